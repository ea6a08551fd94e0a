"""Synthetic users' data for simulations, by named distribution."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from protocols import InputKind, ShuffleProtocol

from ._common import UsageError

__all__ = ["DISTRIBUTIONS", "generate_values"]

#: distribution name → what it means, per input kind
DISTRIBUTIONS: dict[str, str] = {
    "zipf": "Zipf-like: P(j) ∝ 1/(j+1)^1.1 over the domain (categorical); skewed for others",
    "uniform": "every value equally likely",
    "gaussian": "a discretized normal centred in the domain (sd = domain/6)",
}


def _categorical(name: str, d: int, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    j = np.arange(d, dtype=np.float64)
    if name == "zipf":
        w = 1.0 / (j + 1.0) ** 1.1
    elif name == "uniform":
        w = np.ones(d)
    else:
        w = np.exp(-0.5 * ((j - (d - 1) / 2) / max(d / 6, 1e-9)) ** 2)
    return rng.choice(d, size=n, p=w / w.sum())


def generate_values(
    protocol: ShuffleProtocol, n: int, distribution: str, *, rng: np.random.Generator
) -> npt.NDArray[Any]:
    """``n`` users' values of the kind ``protocol`` takes, drawn from ``distribution``."""
    if distribution not in DISTRIBUTIONS:
        raise UsageError(
            f"unknown distribution {distribution!r}; choose one of: {', '.join(DISTRIBUTIONS)}"
        )
    kind = protocol.input_kind
    d = protocol.domain
    if kind is InputKind.CATEGORICAL:
        return _categorical(distribution, d, n, rng)
    if kind is InputKind.BINARY:
        p = {"zipf": 0.1, "uniform": 0.5, "gaussian": 0.3}[distribution]
        return (rng.random(n) < p).astype(np.int64)
    if kind in (InputKind.REAL01, InputKind.REAL_PM1):
        draw: Callable[[], npt.NDArray[np.float64]] = {
            "zipf": lambda: rng.beta(0.5, 3.0, n),
            "uniform": lambda: rng.random(n),
            "gaussian": lambda: np.clip(rng.normal(0.5, 1 / 6, n), 0.0, 1.0),
        }[distribution]
        x = draw()
        return x if kind is InputKind.REAL01 else 2.0 * x - 1.0
    if kind is InputKind.SET:
        # Each user holds one element (a one-hot row); distinct elements = support size.
        items = _categorical(distribution, d, n, rng)
        rows = np.zeros((n, d), dtype=bool)
        rows[np.arange(n), items] = True
        return rows
    raise UsageError(f"no data generator for input kind {kind.value}")  # pragma: no cover
