"""The binomial and negative binomial laws, and an FFT convolution, for the accountants.

Bit for bit what ``scipy.stats.binom``, ``scipy.stats.nbinom`` and
``scipy.signal.fftconvolve`` return, without importing ``scipy.stats`` or ``scipy.signal``:
those two packages cost ~0.45 s of CPU to import, paid by every process that builds a
protocol. In a parallel experiment grid that import is serial (the pool's workers inherit
it), so it caps the speedup.

How the values stay identical:

* ``scipy.stats.binom`` and ``nbinom`` compute their pmf, cdf, sf, ppf and isf with Boost's
  implementations, compiled into ``scipy.special._ufuncs`` (``_binom_pmf``, ...); each
  function here calls the same kernel and applies the same rules as
  ``scipy.stats.rv_discrete`` outside the support (0 or 1 there, ``nan`` for invalid
  parameters, the support's ends at q = 0 and q = 1, the pmf clipped to [0, 1]).
* :func:`fftconvolve` makes the calls ``scipy.signal.fftconvolve`` makes for two 1-D real
  arrays in ``"full"`` mode: ``scipy.fft.rfftn`` at ``next_fast_len``, the product,
  ``irfftn``, the first ``len(a) + len(b) − 1`` points.

The kernels are private to scipy: where the installed scipy lacks them, each law falls back
to ``scipy.stats`` (same values, slower import). ``tests/test_distributions.py`` compares
every function with scipy's on the support, its edges and invalid parameters.

Only what the accountants use is here: the laws' parameters are arrays or scalars that
broadcast, as in scipy; the convolution takes 1-D float64 arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "binom_cdf",
    "binom_isf",
    "binom_pmf",
    "binom_ppf",
    "binom_sf",
    "fftconvolve",
    "nbinom_isf",
    "nbinom_pmf",
    "nbinom_sf",
]

FloatArray = npt.NDArray[np.float64]
#: A float64 array, or a numpy scalar where every argument was a scalar (as scipy returns).
Result = Any

_Kernel = Callable[..., FloatArray]


@functools.cache
def _kernel(name: str) -> _Kernel | None:
    """scipy's compiled kernel ``name`` (``"_binom_pmf"``, ...), or ``None`` if this scipy
    has none by that name."""
    try:
        from scipy.special import _ufuncs
    except ImportError:  # pragma: no cover - scipy moved its private module
        return None
    kernel: _Kernel | None = getattr(_ufuncs, name, None)
    return kernel


def _binom_valid(n: npt.NDArray[Any], p: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """scipy's ``binom._argcheck``: n a non-negative integer, 0 ≤ p ≤ 1."""
    return np.asarray((n >= 0) & (n == np.round(n)) & (p >= 0) & (p <= 1))


def _nbinom_valid(n: npt.NDArray[Any], p: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """scipy's ``nbinom._argcheck``: n > 0, 0 < p ≤ 1."""
    return np.asarray((n > 0) & (p > 0) & (p <= 1))


_VALID = {"binom": _binom_valid, "nbinom": _nbinom_valid}


def _evaluate(
    law: str, method: str, x: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike
) -> Result:
    """``scipy.stats.<law>.<method>(x, n, p)`` (``law`` "binom" or "nbinom"; ``method``
    "pmf", "cdf", "sf", "ppf" or "isf") from scipy's kernel, with ``rv_discrete``'s rules
    where the kernel is not called:

    * invalid parameters (and x = NaN): NaN;
    * pmf: 0 off the integers of the support [0, top] (top = n, or ∞ for nbinom);
    * cdf, sf at floor(x): 0 or 1 below and above the support;
    * ppf, isf: −1 and top at the ends q ∈ {0, 1}, NaN for q outside [0, 1].

    Without the kernel (another scipy), scipy.stats itself.
    """
    kernel = _kernel(f"_{law}_{method}")
    if kernel is None:
        from scipy import stats

        return getattr(getattr(stats, law), method)(x, n, p)
    xb, nb, pb = np.broadcast_arrays(np.asarray(x), np.asarray(n), np.asarray(p))
    valid = _VALID[law](nb, pb)
    top = nb if law == "binom" else np.full(nb.shape, np.inf)
    if method == "pmf":
        out = np.zeros(valid.shape)
        call = valid & (xb >= 0) & (xb <= top) & (np.floor(xb) == xb)
    elif method in ("cdf", "sf"):
        out = np.zeros(valid.shape)
        if method == "cdf":
            out[xb >= top] = 1.0
        else:
            out[((xb < 0) | np.isneginf(xb)) & valid] = 1.0
        call = valid & (xb >= 0) & (xb < top) & np.isfinite(xb)
        xb = np.floor(xb)
    else:
        out = np.full(valid.shape, np.nan)
        below, beyond = (xb == 0, xb == 1) if method == "ppf" else (xb == 1, xb == 0)
        out[below & valid] = -1.0
        out[beyond & valid] = top[beyond & valid]
        call = valid & (xb > 0) & (xb < 1)
    if method in ("pmf", "cdf", "sf"):
        out[~valid | np.isnan(xb)] = np.nan
    if call.any():
        with np.errstate(over="ignore"):  # Boost's quantile search (scipy's gh-17432)
            values = kernel(xb[call], nb[call], pb[call])
        out[call] = values if method in ("ppf", "isf") else np.clip(values, 0, 1)
    return out[()] if out.ndim == 0 else out


def binom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) = k]: ``scipy.stats.binom.pmf(k, n, p)``, bit for bit."""
    return _evaluate("binom", "pmf", k, n, p)


def binom_cdf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) ≤ k]: ``scipy.stats.binom.cdf(k, n, p)``, bit for bit."""
    return _evaluate("binom", "cdf", k, n, p)


def binom_sf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) > k]: ``scipy.stats.binom.sf(k, n, p)``, bit for bit."""
    return _evaluate("binom", "sf", k, n, p)


def binom_ppf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[Bin(n, p) ≤ k] ≥ q: ``scipy.stats.binom.ppf(q, n, p)``, bit for bit."""
    return _evaluate("binom", "ppf", q, n, p)


def binom_isf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[Bin(n, p) > k] ≤ q: ``scipy.stats.binom.isf(q, n, p)``, bit for bit."""
    return _evaluate("binom", "isf", q, n, p)


def nbinom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[NB(n, p) = k] (failures before the n-th success): ``scipy.stats.nbinom.pmf``."""
    return _evaluate("nbinom", "pmf", k, n, p)


def nbinom_sf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[NB(n, p) > k]: ``scipy.stats.nbinom.sf(k, n, p)``, bit for bit."""
    return _evaluate("nbinom", "sf", k, n, p)


def nbinom_isf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[NB(n, p) > k] ≤ q: ``scipy.stats.nbinom.isf(q, n, p)``, bit for bit."""
    return _evaluate("nbinom", "isf", q, n, p)


def fftconvolve(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """The full linear convolution of two 1-D float64 arrays by FFT:
    ``scipy.signal.fftconvolve(a, b)``, bit for bit.

    Raises:
        ValueError: an argument is not 1-D.
    """
    from scipy import fft

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"fftconvolve takes 1-D arrays, not {x.ndim}-D and {y.ndim}-D")
    if x.size == 0 or y.size == 0:
        return np.asarray([], dtype=np.float64)
    if x.size == 1 or y.size == 1:  # scipy broadcasts the product: no FFT on that axis
        return np.asarray(x * y, dtype=np.float64)
    size = x.size + y.size - 1
    shape, axes = [fft.next_fast_len(size, True)], [0]
    spectrum = fft.rfftn(x, shape, axes=axes) * fft.rfftn(y, shape, axes=axes)
    return np.array(fft.irfftn(spectrum, shape, axes=axes)[:size], dtype=np.float64)
