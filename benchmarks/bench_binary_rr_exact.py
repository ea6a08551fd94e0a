"""Exact accountant of shuffled binary randomized response: before/after, side by side.

``protocols.binary_rr_epsilon`` is the max over a (others holding 1) of the exact
ε(δ) of the shuffled count, by a branch and bound over ranges of a. This script keeps the
previous implementation (ranges halving [5, n/2], every range and point evaluated from its
full law, in log space,
through :func:`protocols.epsilon_for_pair`, which sorts the likelihood ratios) as the
reference, runs both on the same inputs in one process with cold caches, checks that they
agree to 1e-9 relative, and prints a Markdown table (old/new seconds and their ratio: CPU
seconds of this process, the comparable figure on a shared machine, and wall seconds).

    python benchmarks/bench_binary_rr_exact.py              # grid + timings up to n = 10^6
    python benchmarks/bench_binary_rr_exact.py --quick      # small grid only
    python benchmarks/bench_binary_rr_exact.py --large      # + new alone at n = 10^7, 10^8
    python benchmarks/bench_binary_rr_exact.py --certified  # the certified search instead

``--certified`` times the search that answers past 2^28 other users (a proven upper bound U
at most 10^-3 relative above the exact value, and L, the best exact ε(a) it evaluated): at
10^6 and 10^8 users next to the exact search (its value inside [L, U]), then alone at 10^9
and 10^10, each at ε0 = 1 and 4, δ = 10^-6, with cold caches.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from protocols import epsilon_for_pair
from protocols.accounting import _binary_rr as tight

FloatArray = np.ndarray

# --- the previous implementation (reference) -------------------------------------------------
# Its pair of log-laws is still _binary_rr_pair of protocols/accounting/_binary_rr.py (the
# reference form there).

_SEED = 4
_LEAF = 4


def old_binary_rr(eps0: float, n_others: int, delta: float, n_fakes: int) -> float:
    """The previous ``_binary_rr_cached`` (seeds a ≤ 4, then the branch and bound)."""

    def exact(a: int, others: int = n_others) -> float:
        return epsilon_for_pair(*tight._binary_rr_pair(eps0, others, a, n_fakes), delta)

    half = n_others // 2
    best = max(exact(a) for a in range(min(_SEED, half) + 1))
    ranges = [(min(_SEED, half) + 1, half)]
    while ranges:
        lo, hi = ranges.pop()
        if lo > hi:
            continue
        if hi - lo < _LEAF:
            best = max(best, *(exact(a) for a in range(lo, hi + 1)))
        elif exact(lo, n_others - (hi - lo)) > best:
            mid = (lo + hi) // 2
            ranges += [(mid + 1, hi), (lo, mid)]
    return min(best, eps0)


def new_binary_rr(eps0: float, n_others: int, delta: float, n_fakes: int) -> float:
    tight._binary_rr_cached.cache_clear()
    tight._binary_rr_seeded.cache_clear()
    return tight.binary_rr_epsilon(eps0, n_others, delta, n_fakes=n_fakes)


def _timed(f: Callable[[float, int, float, int], float], *args: Any) -> tuple[float, float, float]:
    """(value, wall seconds, CPU seconds of this process): on a shared machine the CPU time
    is the comparable figure."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = f(*args)
    return value, time.perf_counter() - wall, time.process_time() - cpu


#: (ε0, n_others, δ, n_fakes): the grid compared old against new.
GRID_SMALL = [
    (0.5, 29, 1e-2, 0),
    (1.0, 39, 1e-3, 0),
    (2.0, 39, 1e-3, 7),
    (3.0, 249, 0.1, 0),
    (4.0, 399, 1e-2, 0),
    (4.0, 399, 1e-2, 30),
    (1.5, 11, 1e-4, 3),
    (0.1, 999, 1e-6, 0),
    (8.0, 999, 1e-6, 0),
    (1.0, 9_999, 1e-6, 0),
    (2.0, 9_999, 1e-9, 100),
    (0.5, 9_999, 1e-3, 0),
    (3.0, 50_000, 0.1, 0),
]
GRID_LARGE = [
    (0.2, 99_999, 1e-6, 0),
    (1.0, 99_999, 1e-6, 0),
    (4.0, 99_999, 1e-8, 1000),
    (1.0, 999_999, 1e-6, 0),
    (2.0, 999_999, 1e-10, 0),
]


def _clear_caches() -> None:
    tight._binary_rr_cached.cache_clear()
    tight._binary_rr_seeded.cache_clear()
    tight._binary_rr_certified.cache_clear()


def certified_table() -> None:
    """The certified search at 10^6 … 10^10 users (exact search beside it up to 10^8)."""
    tol = tight._BINARY_TOLERANCE
    bounds = 0
    range_bound = tight._binary_rr_range_bound

    def counted(*args: Any) -> float:
        nonlocal bounds
        bounds += 1
        return range_bound(*args)

    tight._binary_rr_range_bound = counted  # type: ignore[assignment]
    print(f"certified search, tolerance {tol:g}, δ = 1e-6, no fakes\n")
    print(
        "| ε0 | n others | exact ε | exact CPU (s) | U (printed ε) | L | (U − L)/L "
        "| U/exact − 1 | range bounds | certified CPU (s) | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n_others in (10**6 - 1, 10**8 - 1, 10**9 - 1, 10**10 - 1):
        for eps0 in (1.0, 4.0):
            exact, t_exact = math.nan, math.nan
            if n_others <= tight._BINARY_MAX_OTHERS:
                _clear_caches()
                exact, _, t_exact = _timed(tight._binary_rr_cached, eps0, n_others, 1e-6, 0)
            _clear_caches()
            bounds = 0
            (upper, lower), wall, cpu = _timed(
                tight._binary_rr_certified, eps0, n_others, 1e-6, 0, tol
            )
            if not lower <= upper <= lower * (1 + tol):
                raise SystemExit(f"gap out of bounds at n_others={n_others}: {lower} {upper}")
            if exact == exact and not lower <= exact * (1 + 1e-12) <= upper * (1 + 1e-12):
                raise SystemExit(f"exact value outside [L, U] at n_others={n_others}")
            beside = (
                f"{exact:.10g} | {t_exact:.1f}"
                if exact == exact
                else "– (past 2^28) | –"  # the exact search is not run there
            )
            over = f"{upper / exact - 1:.2e}" if exact == exact else "–"
            print(
                f"| {eps0} | {n_others:,} | {beside} | {upper:.10g} | {lower:.10g} | "
                f"{(upper - lower) / lower:.2e} | {over} | {bounds} | {cpu:.1f} | {wall:.1f} |",
                flush=True,
            )
    tight._binary_rr_range_bound = range_bound  # type: ignore[assignment]
    certified_inverse_table()


def certified_inverse_table() -> None:
    """The registered bound's inverse (ε_c → ε_l) past 2^28 users, where it is certified."""
    from protocols import BOUNDS
    from protocols.accounting import _amplification

    bound = BOUNDS["binary_rr_exact"]
    print("\n| n | ε_c | ε_l | certified ε_c at that ε_l | CPU (s) | wall (s) |")
    print("|---|---|---|---|---|---|")
    for n, eps_c in ((10**9, 0.5), (10**10, 0.5), (10**9, 5e-4), (10**10, 1e-4)):
        _clear_caches()
        _amplification._evaluate.cache_clear()
        eps_l, wall, cpu = _timed(
            lambda e, n_, d, k: bound.epsilon_local(epsilon_central=e, n=n_, delta=d, k=k),
            eps_c,
            n,
            1e-6,
            2,
        )
        check = bound.epsilon_central(epsilon_local=eps_l, n=n, delta=1e-6, k=2)
        if check > eps_c:
            raise SystemExit(f"inverse not met at n={n}: {check}")
        print(
            f"| 10^{round(math.log10(n))} | {eps_c:g} | {eps_l:.8g} | {check:.8g} | {cpu:.1f} "
            f"| {wall:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid only")
    parser.add_argument("--large", action="store_true", help="+ new alone at 10^7, 10^8")
    parser.add_argument(
        "--certified", action="store_true", help="the certified search, 10^6 … 10^10 users"
    )
    args = parser.parse_args()
    if args.certified:
        certified_table()
        return
    grid = GRID_SMALL if args.quick else GRID_SMALL + GRID_LARGE
    print(
        "| ε0 | n others | δ | fakes | ε old | ε new | rel. diff | old CPU (s) | new CPU (s) "
        "| speed-up (CPU) | old wall (s) | new wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for eps0, n_others, delta, fakes in grid:
        ref, w_old, t_old = _timed(old_binary_rr, eps0, n_others, delta, fakes)
        val, w_new, t_new = _timed(new_binary_rr, eps0, n_others, delta, fakes)
        rel = abs(val - ref) / max(ref, 1e-300)
        worst = max(worst, rel)
        print(
            f"| {eps0} | {n_others:,} | {delta:g} | {fakes} | {ref:.10g} | {val:.10g} | "
            f"{rel:.1e} | {t_old:.2f} | {t_new:.2f} | {t_old / max(t_new, 1e-3):.1f}× | "
            f"{w_old:.2f} | {w_new:.2f} |",
            flush=True,
        )
    print(f"\nlargest relative difference: {worst:.1e}")
    if worst > 1e-9:
        raise SystemExit("old and new differ by more than 1e-9 relative")
    if args.large:
        print("\n| ε0 | n others | δ | ε new | new CPU (s) | new wall (s) |")
        print("|---|---|---|---|---|---|")
        for eps0, n_others, delta in [(1.0, 10**7 - 1, 1e-6), (1.0, 10**8 - 1, 1e-6)]:
            val, w_new, t_new = _timed(new_binary_rr, eps0, n_others, delta, 0)
            print(
                f"| {eps0} | {n_others:,} | {delta:g} | {val:.10g} | {t_new:.1f} | {w_new:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
