"""Measure the ε a local randomizer really satisfies (PROTOCOLS.md "How each one is tested" 2).

A randomizer R is ε-LDP iff for all inputs v, v' and outputs y, P[R(v) = y] ≤ e^ε P[R(v') = y]
(densities for continuous outputs). So its true ε is

    ε* = max_{v, v', y} ln( P[R(v) = y] / P[R(v') = y] ),

infinite as soon as some output is possible under one input and impossible under another
(the support check).

* Discrete randomizers on small domains (kRR, SUE, OUE, THE, BLH, OLH, HR, Duchi, Harmony):
  the exact (inputs × outputs) probability matrix, so ε* is exact (for local hashing, exact
  over the listed hash seeds; the seed is independent of the input, so the ratio of a report
  is that of y given its seed).
* Continuous ones (PM, Laplace, SHE, DCT): log-densities on a grid of inputs × a grid of
  outputs that straddles every breakpoint, plus the support check; ε* on the grid is a lower
  bound on the true ε, exact for piecewise-constant densities whose pieces the grid hits.

``audit_mechanism(name, epsilon, domain)`` runs the right audit for every mechanism name of
:data:`AUDITABLE` and returns an :class:`AuditResult` (``epsilon_claimed``,
``epsilon_measured``, ``holds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._errors import ParameterError
from ._freq_oracles import FREQUENCY_ORACLES, SHE, _Unary
from ._mean import MEAN_MECHANISMS, _Continuous, _TwoPoint

__all__ = [
    "AUDITABLE",
    "AuditResult",
    "audit_density",
    "audit_discrete",
    "audit_mechanism",
    "measured_epsilon_discrete",
    "measured_epsilon_log_density",
]

#: relative slack for floating-point rounding when comparing measured and claimed ε
_RTOL = 1e-9

#: every mechanism name ``audit_mechanism`` understands
AUDITABLE: tuple[str, ...] = tuple(sorted({*FREQUENCY_ORACLES, *MEAN_MECHANISMS}))


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Outcome of an LDP audit.

    Attributes:
        mechanism: the mechanism's name.
        epsilon_claimed: the ε the mechanism (or its paper) claims.
        epsilon_measured: the largest log likelihood ratio found (inf if the supports differ).
        holds: epsilon_measured <= epsilon_claimed (up to 1e-9 relative rounding).
        method: "exact" (full discrete output law) or "grid" (densities on a grid).
        domain: the input domain size audited (None for mechanisms on [−1, 1]).
        note: how the figure was obtained, or why it fails.
    """

    mechanism: str
    epsilon_claimed: float
    epsilon_measured: float
    holds: bool
    method: str
    domain: int | None
    note: str

    def to_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "epsilon_claimed": self.epsilon_claimed,
            "epsilon_measured": self.epsilon_measured,
            "holds": self.holds,
            "method": self.method,
            "domain": self.domain,
            "note": self.note,
        }


def _holds(measured: float, claimed: float) -> bool:
    return bool(measured <= claimed * (1 + _RTOL) + 1e-12)


def measured_epsilon_discrete(probs: npt.ArrayLike) -> float:
    """max over outputs y and input pairs of ln(P[y|v]/P[y|v']) for an (inputs, outputs) matrix.

    Returns inf if some output has positive probability under one input and 0 under another.

    Raises:
        ParameterError: not a 2-D matrix of probabilities whose rows sum to 1.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 2 or np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ParameterError(f"need an (inputs >= 2, outputs) probability matrix, got {p.shape}")
    sums = p.sum(axis=1)
    if not np.allclose(sums, 1.0, atol=1e-9):
        raise ParameterError(f"rows must sum to 1, got sums in [{sums.min()}, {sums.max()}]")
    hi, lo = p.max(axis=0), p.min(axis=0)
    used = hi > 0
    if np.any(lo[used] == 0):
        return math.inf
    return float(np.max(np.log(hi[used]) - np.log(lo[used])))


def measured_epsilon_log_density(log_dens: npt.ArrayLike) -> float:
    """Same for an (inputs, grid points) matrix of log-densities (−inf = off support)."""
    ld = np.asarray(log_dens, dtype=np.float64)
    if ld.ndim != 2 or ld.shape[0] < 2:
        raise ParameterError(f"need an (inputs >= 2, points) log-density matrix, got {ld.shape}")
    hi, lo = ld.max(axis=0), ld.min(axis=0)
    used = np.isfinite(hi)
    if not np.any(used):
        raise ParameterError("no grid point lies in the support of any input")
    if np.any(~np.isfinite(lo[used])):
        return math.inf
    return float(np.max(hi[used] - lo[used]))


def audit_discrete(
    mechanism: str, probs: npt.ArrayLike, epsilon_claimed: float, *, domain: int | None = None
) -> AuditResult:
    """Exact audit of a discrete randomizer from its (inputs, outputs) probability matrix."""
    eps = measured_epsilon_discrete(probs)
    p = np.asarray(probs)
    note = f"exact output law, {p.shape[0]} inputs x {p.shape[1]} outputs"
    if math.isinf(eps):
        note += "; some output is impossible under one input and possible under another"
    return AuditResult(mechanism, float(epsilon_claimed), eps, _holds(eps, epsilon_claimed),
                       "exact", domain, note)  # fmt: skip


def audit_density(
    mechanism: str, log_dens: npt.ArrayLike, epsilon_claimed: float, *, domain: int | None = None
) -> AuditResult:
    """Grid audit of a continuous randomizer from an (inputs, points) log-density matrix."""
    eps = measured_epsilon_log_density(log_dens)
    ld = np.asarray(log_dens)
    note = f"density ratio on a grid of {ld.shape[0]} inputs x {ld.shape[1]} outputs"
    if math.isinf(eps):
        note += "; support depends on the input (unbounded likelihood ratio): NOT epsilon-LDP"
    return AuditResult(mechanism, float(epsilon_claimed), eps, _holds(eps, epsilon_claimed),
                       "grid", domain, note)  # fmt: skip


def _unit_inputs(points: int = 41) -> npt.NDArray[np.float64]:
    return np.linspace(-1.0, 1.0, points)


def _output_grid(lo: float, hi: float, points: int = 4001) -> npt.NDArray[np.float64]:
    # An irrational-ish offset keeps grid points off the breakpoints of piecewise densities
    # while a dense grid still lands inside every piece.
    g = np.linspace(lo, hi, points)
    return np.asarray(g + (hi - lo) / points * (math.sqrt(2) - 1))


def audit_mechanism(name: str, epsilon: float, domain: int | None = None) -> AuditResult:
    """Audit the named mechanism at ε (and domain size ``domain`` for frequency oracles).

    Args:
        name: one of :data:`AUDITABLE` (case-insensitive).
        epsilon: the ε the mechanism is configured with and claims.
        domain: input domain size for frequency oracles (default 8; at most 12 for unary
            encodings, 3 for SHE's grid); must be omitted for mean mechanisms on [−1, 1].

    Raises:
        ParameterError: unknown name, bad ε or domain.
    """
    key = str(name).lower()
    if key in FREQUENCY_ORACLES:
        cls = FREQUENCY_ORACLES[key]
        d = 8 if domain is None else domain
        if cls is SHE:
            d = 3 if domain is None else domain
            if not 2 <= int(d) <= 3:
                raise ParameterError(f"the SHE grid audit needs domain in [2, 3], got {d!r}")
        oracle = cls(d=d, epsilon=epsilon)  # type: ignore[call-arg]
        if isinstance(oracle, SHE):
            axis = np.linspace(-4.0, 5.0, 37 if d == 3 else 181) + 0.0123
            pts = np.stack(np.meshgrid(*([axis] * oracle.d), indexing="ij"), -1).reshape(-1, d)
            ld = np.stack([oracle.log_density(pts, v) for v in range(oracle.d)])
            return audit_density(key, ld, oracle.epsilon, domain=oracle.d)
        result = audit_discrete(key, oracle.output_distribution(), oracle.epsilon, domain=d)
        if isinstance(oracle, _Unary):
            note = result.note + (
                f"; bits drawn with 32-bit thresholds: p*={oracle.p_star:.10g}, "
                f"q*={oracle.q_star:.10g}"
            )
            result = AuditResult(**{**result.to_dict(), "note": note})  # type: ignore[arg-type]
        return result
    if key in MEAN_MECHANISMS:
        if domain is not None:
            raise ParameterError(f"{key} acts on [-1, 1]: --domain does not apply")
        mech = MEAN_MECHANISMS[key](epsilon=epsilon)  # type: ignore[call-arg]
        inputs = _unit_inputs()
        if isinstance(mech, _TwoPoint):
            return audit_discrete(key, mech.output_distribution(inputs), mech.epsilon)
        assert isinstance(mech, _Continuous)
        reach = mech.bound if math.isfinite(mech.bound) else 1.0 + 12.0 / mech.epsilon
        grid = _output_grid(-reach - 0.5, reach + 0.5)
        ld = np.stack([mech.log_density(grid, float(t)) for t in inputs])
        result = audit_density(key, ld, mech.epsilon)
        if not mech.is_ldp:
            lo1, hi1 = mech.support(-1.0)
            lo2, hi2 = mech.support(1.0)
            note = result.note + (
                f"; support for v=-1 is [{lo1:.4g}, {hi1:.4g}], for v=+1 [{lo2:.4g}, {hi2:.4g}]"
            )
            result = AuditResult(**{**result.to_dict(), "note": note})  # type: ignore[arg-type]
        return result
    raise ParameterError(f"unknown mechanism {name!r}; choose one of: {', '.join(AUDITABLE)}")
