"""Cost of the tight accountants (protocols/_tight.py), side by side in one run.

Each accountant is evaluated cold (caches cleared) forward (ε_l → ε_c) and inverse
(ε_c → ε_l), at n = 10^4 … 10^6, δ = 10^-6; the survey's closed form is the reference.

    python benchmarks/bench_accounting.py [--n 10000 100000 1000000]
"""

from __future__ import annotations

import argparse
import time

from protocols import BOUNDS, KRR_BLANKET_BOUND, BoundNotApplicable
from protocols import _tight as tight

CASES = [
    ("thm2_fmt_closed_form", 2),
    ("binary_rr_exact", 2),
    ("fmt21_numerical", 2),
    ("fmt23_stronger_clone", 2),
    ("krr_blanket_numerical", 16),
]


def _clear() -> None:
    for f in (
        tight._binary_rr_cached,
        tight._clone_cached,
        tight._blanket_cached,
        tight._krr_exact_cached,
    ):
        f.cache_clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    ap.add_argument("--epsilon-local", type=float, default=4.0)
    ap.add_argument("--epsilon-central", type=float, default=0.5)
    args = ap.parse_args()
    print("| bound | k | n | ε_c | forward s | ε_l for ε_c | inverse s |")
    print("|---|---|---|---|---|---|---|")
    for n in args.n:
        for name, k in CASES:
            bound = KRR_BLANKET_BOUND if name == KRR_BLANKET_BOUND.name else BOUNDS[name]
            cells = []
            for direction in ("forward", "inverse"):
                _clear()
                t = time.perf_counter()
                try:
                    if direction == "forward":
                        v = bound.epsilon_central(
                            epsilon_local=args.epsilon_local, n=n, delta=1e-6, k=k
                        )
                    else:
                        v = bound.epsilon_local(
                            epsilon_central=args.epsilon_central, n=n, delta=1e-6, k=k
                        )
                    cells += [f"{v:.4g}", f"{time.perf_counter() - t:.3f}"]
                except BoundNotApplicable:
                    cells += ["n/a", "-"]
            print(f"| {name} | {k} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
