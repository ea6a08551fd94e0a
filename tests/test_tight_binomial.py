"""The binomial laws under every numerical accountant, against exact arithmetic.

scipy's ``binom.logpmf`` is off by ~10^-9 in total mass at n = 10^6 and ~10^-5 at 10^10; the
accountants charge such a missing mass to δ in full (the clone reductions' ``dropped``), so a
few 10^-13 of phantom mass moved FMT'23's ε(10^-9) at n = 10^3 by 2·10^-5. The laws are now
``binom.pmf``: these tests pin its accuracy with exact rationals, and the clone bound's answer
with an exact evaluation of its hockey-stick divergence.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from protocols.accounting._clones import _clone_hockey, _clone_weights, stronger_clone_epsilon
from protocols.accounting._laws import _MASS_TOLERANCE, _binom_logpmf, binomial_window


def _exact_pmf(n: int, k: int, prob: float) -> Fraction:
    p = Fraction(prob)  # the float's exact binary value
    return math.comb(n, k) * p**k * (1 - p) ** (n - k)


@pytest.mark.parametrize(("n", "prob"), [(999, 2 / (math.e**0.25 + 1)), (400, 0.3), (700, 1e-3)])
def test_window_matches_exact_rationals_to_1e12(n: int, prob: float) -> None:
    lo, pmf = binomial_window(n, prob)
    for i in np.linspace(0, pmf.size - 1, 9).astype(int):
        exact = float(_exact_pmf(n, lo + int(i), prob))
        assert pmf[i] == pytest.approx(exact, rel=1e-12, abs=1e-300)
    # What lies outside the window is below the mass tolerance.
    inside = sum(_exact_pmf(n, k, prob) for k in range(lo, lo + pmf.size))
    assert float(1 - inside) < 1e-14


@pytest.mark.parametrize("n", [10**6, 10**8, 10**10])
@pytest.mark.parametrize("prob", [0.5, 0.01, 1e-6])
def test_window_keeps_its_mass_at_any_supported_n(n: int, prob: float) -> None:
    # logpmf's mass was off by 1e-9 at 10^6 and 2e-5 at 10^10 (for every prob here).
    lo, pmf = binomial_window(n, prob)
    assert abs(float(pmf.sum()) - 1.0) < 1e-13 < _MASS_TOLERANCE
    lo_log, log_pmf = _binom_logpmf(n, prob)
    assert lo_log == lo
    np.testing.assert_allclose(np.exp(log_pmf), pmf, rtol=1e-14)


def _exact_clone_hockey(eps: float, eps0: float, n_others: int) -> float:
    """H_{e^ε} of FMT'23's clone pair, every term exact (Fractions) but e^ε and e^{ε0}."""
    e0, big_e = Fraction(math.exp(eps0)), Fraction(math.exp(eps))
    pv = e0 / (e0 + 1)
    qv = 1 - pv
    prob = Fraction(2.0 / (math.exp(eps0) + 1.0))
    total = Fraction(0)
    for c in range(n_others + 1):
        w = math.comb(n_others, c) * prob**c * (1 - prob) ** (n_others - c)
        h = Fraction(0)
        for a in range(c + 2):  # A + Δ with A ~ Bin(c, ½), Δ the victim's bit
            below = Fraction(math.comb(c, a - 1), 2**c) if a >= 1 else Fraction(0)
            here = Fraction(math.comb(c, a), 2**c) if a <= c else Fraction(0)
            diff = (pv * below + qv * here) - big_e * (qv * below + pv * here)
            h += max(diff, Fraction(0))
        total += w * h
    return float(total)


def test_stronger_clone_meets_delta_exactly_and_is_tight() -> None:
    # n = 60, ε0 = 1, δ = 10^-6: small enough for exact rationals (~2 s).
    eps0, n_others, delta = 1.0, 59, 1e-6
    eps = stronger_clone_epsilon(eps0, n_others, delta, k=2)
    assert 0.0 < eps < eps0
    assert _exact_clone_hockey(eps, eps0, n_others) <= delta
    assert _exact_clone_hockey(eps * (1 - 1e-6), eps0, n_others) > delta
    # The float evaluation agrees with the exact one to 1e-12 of δ.
    c, w, dropped = _clone_weights(n_others, 2.0 / (math.e + 1.0), 0, 0.0)
    assert _clone_hockey(eps, eps0, c, w) + dropped == pytest.approx(
        _exact_clone_hockey(eps, eps0, n_others), abs=1e-12 * delta
    )
