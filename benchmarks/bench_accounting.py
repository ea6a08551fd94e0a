"""Cost of the tight accountants (protocols/accounting/), side by side in one run.

Each accountant is evaluated cold (caches cleared, the bounds' shared cache too) forward
(ε_l → ε_c) and inverse (ε_c → ε_l), at n = 10^4 … 10^6 (any with ``--n``), δ = 10^-6; the
survey's closed form is the reference. Wall and CPU seconds of this process.

    python benchmarks/bench_accounting.py [--n 10000 100000 1000000]

``--blanket`` instead times the k-RR blanket before/after its speed-up, side by side in one
run: "before" is the previous algorithm (kept as the slow reference: full-precision root
find, three binomial tails per cell, no pruning; inverse by a root find on the divergence
guarded by the forward map), "after" the registered bound; plus the start-up cost of
``import protocols`` with and without scipy's modules imported eagerly (as before).

    python benchmarks/bench_accounting.py --blanket [--n ...] [--domains 3 8 1024]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from protocols import BOUNDS, KRR_BLANKET_BOUND, BoundNotApplicable
from protocols.accounting import _amplification, _binary_rr, _blanket, _clones, _krr_exact, _laws

CASES = [
    ("thm2_fmt_closed_form", 2),
    ("binary_rr_exact", 2),
    ("fmt21_numerical", 2),
    ("fmt23_stronger_clone", 2),
    ("krr_blanket_numerical", 16),
]


def _clear() -> None:
    _amplification._evaluate.cache_clear()  # the bounds' shared cache of answers
    for f in (
        _binary_rr._binary_rr_cached,
        _clones._clone_cached,
        _blanket._blanket_cached,
        _krr_exact._krr_exact_cached,
        _blanket._blanket_inverse_cached,
        _clones._sc_inverse,
    ):
        f.cache_clear()


def _reference_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    """The blanket's inverse as it was: a root find on the divergence, then the forward guard."""

    def divergence(e: float) -> float:
        grid = _blanket._blanket_setup(e, n - 1, k, 0, 0.0)
        return _blanket._blanket_hockey_reference(eps_c, e, k, grid)

    return _laws._invert_on_divergence(
        divergence,
        lambda e: _blanket.krr_blanket_reference_epsilon(e, n - 1, delta, k=k),
        eps_c,
        delta,
    )


def _timed(f: Callable[..., float], *args: object, **kw: object) -> tuple[float, float]:
    _clear()
    t = time.perf_counter()
    v = f(*args, **kw)
    return float(v), time.perf_counter() - t


def _import_seconds(code: str, repeats: int = 5) -> float:
    """Median wall time of a fresh interpreter running ``code``."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def blanket_before_after(ns: list[int], domains: list[int], eps_l: float, eps_c: float) -> None:
    """Cold forward and inverse of the k-RR blanket, previous algorithm vs the registered one."""
    delta = 1e-6
    # Warm-up: the first call pays scipy's (lazy) import; keep it out of either column.
    _blanket.krr_blanket_reference_epsilon(eps_l, 99, delta, k=3)
    KRR_BLANKET_BOUND.epsilon_local(epsilon_central=eps_c, n=100, delta=delta, k=3)
    print(
        "| n | d | ε_c before | after | fwd s before | after | ε_l before | after |"
        " inv s before | after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        for k in domains:
            fb, tfb = _timed(_blanket.krr_blanket_reference_epsilon, eps_l, n - 1, delta, k=k)
            fa, tfa = _timed(
                KRR_BLANKET_BOUND.epsilon_central, epsilon_local=eps_l, n=n, delta=delta, k=k
            )
            ib, tib = _timed(_reference_inverse, eps_c, n, delta, k)
            ia, tia = _timed(
                KRR_BLANKET_BOUND.epsilon_local, epsilon_central=eps_c, n=n, delta=delta, k=k
            )
            print(
                f"| {n} | {k} | {fb:.6g} | {fa:.6g} | {tfb:.3f} | {tfa:.3f} | {ib:.6g} | "
                f"{ia:.6g} | {tib:.3f} | {tia:.3f} |"
            )
    eager = "import scipy.optimize, scipy.signal, scipy.special, scipy.stats, protocols"
    before = _import_seconds(eager)
    after = _import_seconds("import protocols")
    print(f"\nimport protocols: {after:.3f} s; with scipy imported eagerly: {before:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    ap.add_argument("--epsilon-local", type=float, default=4.0)
    ap.add_argument("--epsilon-central", type=float, default=0.5)
    ap.add_argument("--blanket", action="store_true", help="blanket before/after only")
    ap.add_argument("--domains", type=int, nargs="+", default=[3, 8, 1024])
    args = ap.parse_args()
    if args.blanket:
        blanket_before_after(args.n, args.domains, args.epsilon_local, args.epsilon_central)
        return
    # Warm-up: the first call pays scipy's (lazy) import; keep it out of the first row.
    BOUNDS["binary_rr_exact"].epsilon_local(epsilon_central=1.0, n=100, delta=1e-6, k=2)
    print("| bound | k | n | ε_c | forward s | CPU s | ε_l for ε_c | inverse s | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.n:
        for name, k in CASES:
            bound = BOUNDS[name]
            cells = []
            for direction in ("forward", "inverse"):
                _clear()
                t, cpu = time.perf_counter(), time.process_time()
                try:
                    if direction == "forward":
                        v = bound.epsilon_central(
                            epsilon_local=args.epsilon_local, n=n, delta=1e-6, k=k
                        )
                    else:
                        v = bound.epsilon_local(
                            epsilon_central=args.epsilon_central, n=n, delta=1e-6, k=k
                        )
                    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
                    cells += [f"{v:.4g}", f"{wall:.3f}", f"{cpu:.3f}"]
                except BoundNotApplicable:
                    cells += ["n/a", "-", "-"]
            print(f"| {name} | {k} | {n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
