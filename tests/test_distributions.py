"""protocols._distributions: the accountants' binomial and negative binomial laws and FFT
convolution equal scipy.stats' and scipy.signal's bit for bit, on the support, at its
edges, for invalid parameters, broadcast or scalar, and without scipy's kernels."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal, stats

from protocols import _distributions as dist

#: (ours, scipy's) for every law function the accountants use.
LAWS = [
    (dist.binom_pmf, stats.binom.pmf),
    (dist.binom_cdf, stats.binom.cdf),
    (dist.binom_sf, stats.binom.sf),
    (dist.binom_ppf, stats.binom.ppf),
    (dist.binom_isf, stats.binom.isf),
    (dist.nbinom_pmf, stats.nbinom.pmf),
    (dist.nbinom_sf, stats.nbinom.sf),
    (dist.nbinom_isf, stats.nbinom.isf),
]
IDS = [ours.__name__ for ours, _ in LAWS]

#: Points in and around each support, and invalid ones.
KS = [-np.inf, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 7.0, 9.0, 10.0, 11.0, 1e6, np.inf, np.nan]
#: Probabilities for the quantiles, the ends included.
QS = [0.0, 1e-300, 1e-12, 0.01, 0.3, 0.5, 0.99, 1 - 1e-12, 1.0, -0.1, 1.5, np.nan]
NS = [0, 1, 2, 10, 10.5, 1000, 10**8, -1, np.nan]
PS = [0.0, 1e-300, 1e-7, 0.25, 0.5, 0.9, 1.0, -0.1, 1.1, np.nan]


def same(ours: Any, theirs: Any) -> None:
    """Same shape, same type of result (scalar or array), same bits (NaN where scipy's is)."""
    assert np.ndim(ours) == np.ndim(theirs)
    assert isinstance(ours, np.ndarray) == isinstance(theirs, np.ndarray)
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    assert a.shape == b.shape
    assert np.array_equal(a.view(np.int64), b.view(np.int64)) or np.array_equal(
        a, b, equal_nan=True
    ), f"{a} != {b}"


@pytest.mark.parametrize(("ours", "theirs"), LAWS, ids=IDS)
def test_every_edge_and_invalid_parameter(ours: Any, theirs: Any) -> None:
    """The full grid of KS (or QS) × NS × PS, one broadcast call and each scalar call."""
    xs = QS if ours.__name__.endswith(("ppf", "isf")) else KS
    # Boost's search for a negative binomial quantile does not end at p ≤ 1e-7 (10^7+
    # failures per success); the accountants' laws are nowhere near.
    ps = [p for p in PS if not 0 < p < 1e-3] if ours is dist.nbinom_isf else PS
    x, n, p = np.meshgrid(np.asarray(xs), np.asarray(NS, dtype=float), np.asarray(ps))
    with np.errstate(all="ignore"):
        same(ours(x, n, p), theirs(x, n, p))
        for xi, ni, pi in itertools.product(xs, NS, ps):
            same(ours(xi, ni, pi), theirs(xi, ni, pi))


@pytest.mark.parametrize(("ours", "theirs"), LAWS, ids=IDS)
def test_integer_arrays_and_broadcasting(ours: Any, theirs: Any) -> None:
    """As the accountants call them: integer k or n arrays against scalars and columns."""
    k = np.arange(-2, 60)
    n = np.arange(0, 80, 7)[:, None]
    q = np.linspace(0.0, 1.0, 23)
    x = q if ours.__name__.endswith(("ppf", "isf")) else k
    for args in [(x, 50, 0.3), (x, n, 0.45), (x[None, :], n, np.array([[0.2]])), (x, 7, 1.0)]:
        same(ours(*args), theirs(*args))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.floats(-5, 2e5, allow_nan=False),
    st.integers(0, 2 * 10**5),
    st.floats(1e-3, 1),
    st.floats(0, 1),
)
def test_random_points(x: float, n: int, p: float, q: float) -> None:
    """Seeded (derandomized) points across the support of every law."""
    for ours, theirs in LAWS:
        arg = q if ours.__name__.endswith(("ppf", "isf")) else x
        with np.errstate(all="ignore"):
            same(ours(arg, n, p), theirs(arg, n, p))
            same(ours(np.floor(arg), n, p), theirs(np.floor(arg), n, p))


@pytest.mark.parametrize(("ours", "theirs"), LAWS, ids=IDS)
def test_fallback_without_scipys_kernels(
    ours: Any, theirs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scipy without the private kernels: the same values, through scipy.stats."""
    monkeypatch.setattr(dist, "_kernel", lambda name: None)
    x = np.linspace(0, 1, 9) if ours.__name__.endswith(("ppf", "isf")) else np.arange(-1, 12)
    same(ours(x, 10, 0.3), theirs(x, 10, 0.3))


@pytest.mark.parametrize(
    ("m", "n"),
    [(1, 1), (1, 700), (700, 1), (2, 2), (513, 600), (1000, 1001), (4097, 3), (11_000, 9_000)],
)
def test_fftconvolve_is_scipys(m: int, n: int) -> None:
    rng = np.random.default_rng(m * 100_003 + n)
    a, b = rng.random(m), rng.random(n) * 1e-3
    same(dist.fftconvolve(a, b), signal.fftconvolve(a, b))
    # A binomial law convolved with itself, as _laws does.
    law = dist.binom_pmf(np.arange(m), m - 1, 0.3)
    same(dist.fftconvolve(law, law[::-1]), signal.fftconvolve(law, law[::-1]))


def test_fftconvolve_edges() -> None:
    assert dist.fftconvolve([], [1.0, 2.0]).size == 0
    same(dist.fftconvolve([2.0], [1.0, 3.0]), signal.fftconvolve([2.0], [1.0, 3.0]))
    with pytest.raises(ValueError, match="1-D"):
        dist.fftconvolve(np.ones((2, 2)), np.ones((2, 2)))


def test_neither_scipy_stats_nor_signal_imported() -> None:
    """The point of the module: the laws and the convolution leave both packages out."""
    code = (
        "import sys, numpy as np\n"
        "from protocols import _distributions as d\n"
        "d.binom_pmf(np.arange(5), 4, .5); d.binom_cdf(2, 4, .5); d.binom_sf(2, 4, .5)\n"
        "d.binom_ppf(.5, 4, .5); d.binom_isf(.5, 4, .5); d.nbinom_pmf(3, 2, .5)\n"
        "d.nbinom_sf(3, 2, .5); d.nbinom_isf(.1, 2, .5)\n"
        "d.fftconvolve(np.ones(600), np.ones(600))\n"
        "print(sorted(m for m in ('scipy.stats', 'scipy.signal') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
