"""Cnt_PURE's exact central accountant: tilted FFTs against direct log-space convolution.

``protocols._cnt_pure.pure_central_epsilon`` computes the exact pure ε of one user among N
others holding 0 (the bound behind Cnt_PURE's and RSum_PURE's λ). This script times it side
by side with the obvious exact method — adding the N users one at a time in log space — on
the same inputs, checks that both give the same ε, times it against its previous sweep
(each next tilt's window overlapping three quarters of the last, power-of-two lengths,
numpy's FFT and complex power; restored by patching the module, so both run here side by
side), and times the whole
calibration
(``CntPURE(...)``, which evaluates the accountant several times) for a few (ε, n). For each
calibration it also states the std two simpler calibrations give on the same (ε, n) — the
truncated DLap alone (no mixed ω: ``weights=()``), and ω of scale Δ = 1 only,
τ = 2⌈log₂ n⌉ + 1, crowd capped at 4 096 — so they are compared within one run.

    python benchmarks/bench_pure_accountant.py            # N up to 800 for the direct method
    python benchmarks/bench_pure_accountant.py --quick    # N up to 200
    python benchmarks/bench_pure_accountant.py --calibrations   # the calibrations only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from scipy.special import logsumexp

import protocols._cnt_pure as cnt_pure_module
from protocols import CntPURE
from protocols._cnt_pure import (
    PureBitCounter,
    _calibrate,
    _choose,
    _limit_lambda,
    _omega,
    default_tau,
    pure_central_epsilon,
    user_laws,
)


def delta_one_counter(epsilon: float, n: int) -> PureBitCounter:
    """The earlier calibration: Δ = 1, τ = 2⌈log₂ n⌉ + 1, at most 4 096 same-bit users."""
    tau = default_tau(n)
    lam, eps_c = _calibrate(epsilon, tau, min((n - 1 + 1) // 2, 4096), 1.0)
    alpha = math.exp(-epsilon)
    omega = tuple(float(w) for w in _omega(tau, alpha))
    return PureBitCounter(epsilon, tau, lam, alpha, omega, 4096, eps_c, 1.0)


@contextlib.contextmanager
def previous_sweep() -> Iterator[None]:
    """pure_central_epsilon as it was before 2026-11-29 22:40 UTC: the next tilt's mean a
    quarter of a trusted half-width *below* the top of the last trusted region, FFT lengths
    rounded up to a power of two, numpy's FFT, and numpy's complex power for the crowd's
    characteristic function."""
    previous = {
        "_SWEEP_STEP": -0.25,
        "sfft": np.fft,
        "_int_power": lambda z, n: z**n,
        "_fft_width": lambda span, tau: 1 << max(1, max(span - 1, tau).bit_length()),
    }
    saved = {name: getattr(cnt_pure_module, name) for name in previous}
    for name, value in previous.items():
        setattr(cnt_pure_module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(cnt_pure_module, name, value)


def timed(fn: Callable[..., float], *args: Any, **kwargs: Any) -> tuple[float, float]:
    """(fn(*args, **kwargs), its wall time in seconds)."""
    t0 = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t0


def direct_epsilon(lam: float, tau: int, alpha: float, others: int) -> float:
    """The exact ε by sequential log-space convolution (O(N² τ²) work)."""
    p0, p1 = user_laws(lam, tau, alpha)
    lp0, lp1 = np.log(p0), np.log(p1)

    def conv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.full((b.size, a.size + b.size - 1), -np.inf)
        for j in range(b.size):
            out[j, j : j + a.size] = a + b[j]
        return np.asarray(logsumexp(out, axis=0))

    s = np.zeros(1)
    for _ in range(others):
        s = conv(s, lp0)
    return float(np.max(np.abs(conv(s, lp0) - conv(s, lp1))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller N for the direct method")
    ap.add_argument("--calibrations", action="store_true", help="time the calibrations only")
    args = ap.parse_args()
    if not args.calibrations:
        accountant(quick=args.quick)
    calibrations()


def accountant(*, quick: bool) -> None:
    """The accountant against direct convolution, and against its previous sweep."""
    eps, tau = 1.0, 21
    alpha = math.exp(-eps)
    for others in (50, 200) if quick else (50, 200, 800):
        lam = 16.0 / others
        direct, direct_s = timed(direct_epsilon, lam, tau, alpha, others)
        tilted, tilted_s = timed(pure_central_epsilon, lam=lam, tau=tau, alpha=alpha, others=others)
        row = {"case": "accountant", "others": others, "tau": tau, "lam": lam}
        row |= {
            "epsilon_direct": direct,
            "epsilon_tilted": tilted,
            "abs_diff": abs(direct - tilted),
        }
        row |= {"direct_s": round(direct_s, 3), "tilted_s": round(tilted_s, 4)}
        print(json.dumps(row | {"speedup": round(direct_s / tilted_s, 1)}), flush=True)
    large = [(n, 41, 4.0 / n, math.exp(-0.5)) for n in (4096, 65536, 1 << 19)]
    large.append((53_605, 401, 1.5e-4, math.exp(-0.1 / 1.5)))  # ε = 0.1's old crowd cap
    for others, tau, lam, alpha in large:
        kw: dict[str, Any] = {"lam": lam, "tau": tau, "alpha": alpha, "others": others}
        now, now_s = timed(pure_central_epsilon, **kw)
        with previous_sweep():
            before, before_s = timed(pure_central_epsilon, **kw)
        row = {"case": "accountant_large", "others": others, "tau": tau, "epsilon": now}
        row |= {"abs_diff_previous": abs(now - before), "tilted_s": round(now_s, 3)}
        row |= {"previous_s": round(before_s, 3), "speedup": round(before_s / now_s, 1)}
        print(json.dumps(row), flush=True)


def calibrations() -> None:
    """Whole calibrations, and the std of the simpler ones at the same (ε, n)."""
    for n in (10_000, 1_000_000):
        for e in (0.1, 0.5, 1.0, 2.0):
            for cache in (_calibrate, _limit_lambda, _choose):
                cache.cache_clear()
            t0 = time.perf_counter()
            p = CntPURE(epsilon=e, n=n)
            bit = p.bit  # calibrated on first use
            seconds = time.perf_counter() - t0
            old = delta_one_counter(e, n)
            dlap = PureBitCounter.derive(
                epsilon=e, tau=bit.tau, honest_users=n, weights=()
            )  # the truncated DLap alone
            std = math.sqrt(bit.variance(n=n, count=n / 2, fakes=0))
            std_old = math.sqrt(old.variance(n=n, count=n / 2, fakes=0))
            std_dlap = math.sqrt(dlap.variance(n=n, count=n / 2, fakes=0))
            print(
                json.dumps(
                    {
                        "case": "calibration",
                        "n": n,
                        "epsilon": e,
                        "tau": bit.tau,
                        "scale": bit.scale,
                        "weight": bit.weight,
                        "lam": bit.lam,
                        "certified_users": bit.certified_users,
                        "seconds": round(seconds, 2),
                        "std": round(std, 2),
                        "dlap_scale": dlap.scale,
                        "dlap_lam": dlap.lam,
                        "dlap_std": round(std_dlap, 2),
                        "delta1_tau": old.tau,
                        "delta1_lam": old.lam,
                        "delta1_std": round(std_old, 2),
                        "std_ratio": round(std_old / std, 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
