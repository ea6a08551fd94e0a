"""Measure the ε a local randomizer really satisfies: the audit every LDP mechanism is tested by.

A randomizer R is ε-LDP iff for all inputs v, v' and outputs y, P[R(v) = y] ≤ e^ε P[R(v') = y]
(densities for continuous outputs). So its true ε is

    ε* = max_{v, v', y} ln( P[R(v) = y] / P[R(v') = y] ),

infinite as soon as some output is possible under one input and impossible under another
(the support check).

* Discrete randomizers on small domains (kRR, SUE, OUE, THE, BLH, OLH, HR, Duchi, Harmony):
  the exact (inputs × outputs) probability matrix, so ε* is exact (for local hashing, exact
  over the listed hash seeds; the seed is independent of the input, so the ratio of a report
  is that of y given its seed). The unary encodings draw their bits with 32-bit thresholds,
  so the law audited is the one they sample, p* and q*; where that rounding lowers ε* by
  more than 0.1% (OUE saturates at ε* = ln(2^32 − 1) ≈ 22.18, SUE at ≈ 44.36) the result's
  ``caveat`` says so: the randomizer is more private, and less accurate, than configured.
* Continuous ones (PM, Laplace, SHE, DCT): log-densities on a grid of inputs × a grid of
  outputs, plus the support check. The output grid is a uniform one plus the midpoint of
  every gap between consecutive breakpoints of any input's density (support ends, PM's
  centre piece), so every piece of a piecewise-constant density is sampled however narrow
  (PM's centre piece has length 2/(e^{ε/2} − 1)). ε* on the grid is a lower bound on the
  true ε; it is exact for PM and DCT (piecewise constant, every piece hit) and for Laplace
  and SHE (the ratio reaches its supremum on whole half-lines, orthants for SHE, which the
  grid samples).

Contract: the verdict ``holds`` is ε_measured ≤ ε_claimed·(1 + 1e-9) + 1e-12, and
``audit_mechanism`` only measures where double-precision rounding cannot move ε_measured by
more than that tolerance and the exact law fits in memory, so a verdict is never an artefact
of rounding or of the grid.
Elsewhere it raises :class:`ParameterError` with the valid range and the reason
(:func:`epsilon_range`):

* ε ≥ 1e-6 for every mechanism: below it the verdict's absolute slack (1e-12, which absorbs
  the ~1e-14 rounding of log-likelihood differences) exceeds a millionth of ε, and the
  mechanisms' e^ε − 1 keeps fewer than ten significant digits (at ε ≈ 1e-16 it is 0).
* Duchi and Harmony: ε ≤ 17. P[−B | +1] = 1/(e^ε + 1) is realised as a multiple of 2^-53,
  rounded up so that the law stays ε-LDP (``_TwoPoint``); that granularity moves the
  measured ε by up to about 2^-53·(e^ε + 1), which exceeds 1e-9·ε above ε ≈ 17 (from
  ε ≈ 37 the probability is 2^-53 itself and the measured ε falls below ε).
* PM: ε ≤ 30. Its centre piece [ℓ(t), r(t)] has length 2/(e^{ε/2} − 1) and float endpoints
  near ±1, each rounded by up to ~2·2^-53: a relative error of up to 2^-52·(e^{ε/2} − 1) in
  its length, above 1e-9 from ε ≈ 30.6 (at ε ≈ 72 the piece vanishes in double precision).
  Its density ratio itself stays exact, and the grid hits the piece however short.
* SUE: ε ≤ 73. Above ε ≈ 73.47 its p = e^{ε/2}/(e^{ε/2} + 1) rounds to 1 in double
  precision, which a 32-bit threshold cannot express (p* saturates at 1 − 2^-32 from
  ε ≈ 44.4 anyway, so nothing is lost).
* OLH: d·S·g ≤ 2^24 entries in its exact law (S = 64 seeds, g = round(e^ε + 1)), i.e.
  ε ≤ ln(⌊2^24/(64 d)⌋ − ½) rounded down to 0.01: 10.39 at d = 8, 6.93 at d = 256. The
  matrix would need d·S·g·8 bytes (1.8e3 GiB at ε = 20, d = 8); beyond ε ≈ 22.18 g no
  longer fits the hash's 32-bit range at all.
* every other mechanism: ε ≤ 700, the cap of the constructors (e^ε must be finite); their
  laws stay exact there (probabilities like 1/(e^ε + d − 1) carry relative error only).

Domain limits are the oracles' own (``output_distribution`` refuses d above 4096 for kRR,
2048 for HR, 256 for local hashing, 12 for unary encodings; SHE's grid takes d ≤ 3).

``audit_mechanism(name, epsilon, domain)`` runs the right audit for every mechanism name of
:data:`AUDITABLE` and returns an :class:`AuditResult` (``epsilon_claimed``,
``epsilon_measured``, ``holds``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._base import MAX_EPSILON, MIN_EPSILON
from .._errors import ParameterError
from ._freq_oracles import FREQUENCY_ORACLES, SHE, _Unary
from ._mean import MEAN_MECHANISMS, PiecewiseMechanism, _Continuous, _TwoPoint
from ._oracle import _MAX_LAW_ENTRIES

__all__ = [
    "AUDITABLE",
    "EPS_MIN",
    "AuditResult",
    "audit_density",
    "audit_discrete",
    "audit_mechanism",
    "epsilon_range",
    "measured_epsilon_discrete",
    "measured_epsilon_log_density",
]

#: relative slack for floating-point rounding when comparing measured and claimed ε
_RTOL = 1e-9

#: every mechanism name ``audit_mechanism`` understands
AUDITABLE: tuple[str, ...] = tuple(sorted({*FREQUENCY_ORACLES, *MEAN_MECHANISMS}))

#: smallest ε any audit measures (see the module docstring): every mechanism's own floor
EPS_MIN = MIN_EPSILON
_EPS_MIN_WHY = (
    "below 1e-06 double-precision rounding of the log-likelihood ratios is no longer "
    "negligible against epsilon"
)
#: the mechanisms' constructors refuse larger ε (e^ε must be finite)
_EPS_CAP = MAX_EPSILON
_EPS_CAP_WHY = "the mechanism takes epsilon <= 700 (e^epsilon must be finite)"

#: Duchi's and Harmony's limit (their laws are the same two-point law)
_TWO_POINT_LIMIT = (
    17.0,
    "above 17 the 2^-53 granularity of P[-B | +1] = 1/(e^eps + 1) (rounded up, as randomize "
    "samples it) moves the measured epsilon by more than 1e-9 of it",
)
#: largest ε at which double precision keeps the measured ε within the verdict tolerance,
#: and why (the derivations are in the module docstring); absent: the constructors' cap
_EPS_MAX: dict[str, tuple[float, str]] = {
    "duchi": _TWO_POINT_LIMIT,
    "harmony": _TWO_POINT_LIMIT,
    "sue": (
        73.0,
        "above 73.47 p = e^(eps/2)/(e^(eps/2) + 1) rounds to 1 in double precision, which its "
        "32-bit threshold cannot express (p* = 1 - 2^-32 and epsilon* = 44.36 from eps = 44.4)",
    ),
    "pm": (
        30.0,
        "above 30 its centre piece, 2/(e^(eps/2) - 1) long, is so short that rounding its "
        "endpoints changes its length by more than 1e-9 of it",
    ),
}

#: hash seeds an OLH/BLH audit lists (``_LocalHashing.output_distribution``'s default)
_LH_SEEDS = 64


def epsilon_range(name: str, domain: int | None = None) -> tuple[float, float, str]:
    """(smallest, largest ε, why not larger) at which :func:`audit_mechanism` measures ``name``.

    Within the range double-precision rounding cannot move the measured ε by more than the
    verdict's tolerance, and the exact law fits in memory; see the module docstring.

    Args:
        name: one of :data:`AUDITABLE` (case-insensitive).
        domain: input domain size for frequency oracles (default 8).

    Returns:
        ``(lowest, highest, why)``: the auditable ε range and why it stops there.

    Raises:
        ParameterError: unknown name, or a local-hashing domain above 256.
    """
    key = _key(name)
    if key == "olh":
        d = 8 if domain is None else int(domain)
        g_max = _MAX_LAW_ENTRIES // (_LH_SEEDS * max(d, 2))
        if g_max < 3:  # the oracle refuses d > 256 anyway
            raise ParameterError(f"local-hashing output distribution needs d <= 256, got d={d}")
        # g = round(e^ε + 1) <= g_max  ⟸  e^ε < g_max − ½; rounded down so the stated bound
        # is the one enforced
        hi = math.floor(100 * math.log(g_max - 0.5)) / 100
        why = (
            f"above {hi:g} at domain {d} its exact output law, d*S*g = {d}*{_LH_SEEDS}*g "
            f"entries with g = round(e^eps + 1), exceeds 2^24 entries (128 MiB)"
        )
        return EPS_MIN, hi, why
    hi, why = _EPS_MAX.get(key, (_EPS_CAP, _EPS_CAP_WHY))
    return EPS_MIN, hi, why


def _key(name: str) -> str:
    key = str(name).lower()
    if key not in AUDITABLE:
        raise ParameterError(f"unknown mechanism {name!r}; choose one of: {', '.join(AUDITABLE)}")
    return key


def _check_epsilon(key: str, epsilon: float, domain: int | None) -> float:
    """ε as a float inside the audit's range for ``key``, else a one-line ParameterError."""
    lo, hi, why = epsilon_range(key, domain)
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilon must be a number, got {epsilon!r}") from None
    if lo <= eps <= hi:  # false for nan
        return eps
    if math.isnan(eps) or eps <= 0:
        why = "epsilon must be a number > 0"
    elif eps < lo:
        why = _EPS_MIN_WHY
    elif key == "olh":
        d = 8 if domain is None else int(domain)
        g = math.exp(eps) + 1 if eps <= _EPS_CAP else math.inf
        why += f"; at epsilon={eps:g} it would need {d * _LH_SEEDS * g * 8 / 2**30:.3g} GiB"
    raise ParameterError(
        f"{key} can be audited for epsilon in [{lo:g}, {hi:g}], got {eps:g}: {why}"
    )


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
        caveat: a sentence a reader of a passing verdict must see (None if none): the
            randomizer realises a much smaller ε than claimed (32-bit thresholds).
    """

    mechanism: str
    epsilon_claimed: float
    epsilon_measured: float
    holds: bool
    method: str
    domain: int | None
    note: str
    caveat: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The result as a JSON object.

        Returns:
            One key per field.
        """
        return {
            "mechanism": self.mechanism,
            "epsilon_claimed": self.epsilon_claimed,
            "epsilon_measured": self.epsilon_measured,
            "holds": self.holds,
            "method": self.method,
            "domain": self.domain,
            "note": self.note,
            "caveat": self.caveat,
        }


def _holds(measured: float, claimed: float) -> bool:
    return bool(measured <= claimed * (1 + _RTOL) + 1e-12)


def measured_epsilon_discrete(probs: npt.ArrayLike) -> float:
    """max over outputs y and input pairs of ln(P[y|v]/P[y|v']) for an (inputs, outputs) matrix.

    Args:
        probs: output probabilities, one row per input (at least two rows).

    Returns:
        The measured ε; inf if some output has positive probability under one input and 0
        under another.

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
    """Same for an (inputs, grid points) matrix of log-densities (−inf = off support).

    Args:
        log_dens: log-densities, one row per input (at least two) and one column per point.

    Returns:
        max over points and input pairs of the log-density difference; inf if some point is in
        the support of one input and not another.

    Raises:
        ParameterError: not such a matrix, or no point lies in any input's support.
    """
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
    """Exact audit of a discrete randomizer from its (inputs, outputs) probability matrix.

    Args:
        mechanism: the mechanism's name, for the result.
        probs: output probabilities, one row per input.
        epsilon_claimed: the ε the mechanism claims.
        domain: the input domain size, for the result.

    Returns:
        The exactly measured ε, the verdict and a note.

    Raises:
        ParameterError: not a 2-D matrix of probabilities whose rows sum to 1.
    """
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
    """Grid audit of a continuous randomizer from an (inputs, points) log-density matrix.

    Args:
        mechanism: the mechanism's name, for the result.
        log_dens: log-densities, one row per input and one column per grid point.
        epsilon_claimed: the ε the mechanism claims.
        domain: the input domain size, for the result.

    Returns:
        The measured ε on the grid, the verdict and a note.

    Raises:
        ParameterError: not a 2-D matrix with at least two inputs, or no grid point in any
            input's support.
    """
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
    # while a dense grid still lands inside every wide piece; _piece_midpoints the narrow ones.
    g = np.linspace(lo, hi, points)
    return np.asarray(g + (hi - lo) / points * (math.sqrt(2) - 1))


def _piece_midpoints(mech: _Continuous, inputs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Midpoints of the gaps between consecutive breakpoints of every input's density.

    Between two consecutive breakpoints every input's density is constant (for piecewise-
    constant densities), so one point per gap samples every piece, however narrow: PM's
    centre piece (2/(e^{ε/2} − 1) long) slips between the uniform grid's points above ε ≈ 18,
    and DCT's support ends t ± d lie 0.05 apart while d ≈ 0.4/ε is huge for small ε.
    """
    ends = [b for t in inputs for b in mech.support(float(t))]
    if isinstance(mech, PiecewiseMechanism):
        left, right = mech._lr(inputs)  # the float breakpoints log_density itself uses
        ends += [*left, *right]
    pts = np.unique(np.asarray(ends, dtype=np.float64))
    pts = pts[np.isfinite(pts)]
    return np.asarray((pts[:-1] + pts[1:]) / 2)


def _unary_caveat(oracle: _Unary, realised: float) -> str | None:
    """Say so when the 32-bit thresholds cut ε* by more than 0.1% below the unrounded law's."""
    p, q = oracle.p_nominal, oracle.q_nominal
    with np.errstate(divide="ignore"):
        log_odds = float(np.log(p) - np.log1p(-p) + np.log1p(-q) - np.log(q))
    # ε* of the unrounded law: ε for SUE and OUE by construction, less for THE; the min keeps
    # the figure sane where 1 − p has lost its digits (SUE at large ε)
    nominal = min(oracle.epsilon, log_odds)
    if not realised < nominal * (1 - 1e-3):
        return None
    floor = 2.0**-32
    limits = []
    if oracle.q_star <= floor:
        limits.append("q* = 2^-32 is the smallest probability they can draw")
    if oracle.p_star >= 1 - floor:
        limits.append("p* = 1 - 2^-32 the largest")
    limit = f" ({', '.join(limits)})" if limits else ""
    return (
        f"the 32-bit thresholds turn p = {p:.10g}, q = {q:.6g} into p* = {oracle.p_star:.10g}, "
        f"q* = {oracle.q_star:.6g}{limit}: the randomizer realises only epsilon = "
        f"{realised:.6g}, not the {nominal:.6g} of its unrounded law, so it is more private and "
        "less accurate than configured"
    )


def audit_mechanism(name: str, epsilon: float, domain: int | None = None) -> AuditResult:
    """Audit the named mechanism at ε (and domain size ``domain`` for frequency oracles).

    Args:
        name: one of :data:`AUDITABLE` (case-insensitive).
        epsilon: the ε the mechanism is configured with and claims; it must lie in
            :func:`epsilon_range` (where rounding cannot flip the verdict).
        domain: input domain size for frequency oracles (default 8; at most 12 for unary
            encodings, 3 for SHE's grid); must be omitted for mean mechanisms on [−1, 1].

    Returns:
        The measured ε (exact, or on a grid for continuous outputs), whether the claim holds,
        and notes.

    Raises:
        ParameterError: unknown name, bad domain, or ε outside the auditable range (the
            message states the range and why).
    """
    key = _key(name)
    eps = _check_epsilon(key, epsilon, domain)
    if key in FREQUENCY_ORACLES:
        cls = FREQUENCY_ORACLES[key]
        d = 8 if domain is None else domain
        if cls is SHE:
            d = 3 if domain is None else domain
            if not 2 <= int(d) <= 3:
                raise ParameterError(f"the SHE grid audit needs domain in [2, 3], got {d!r}")
        oracle = cls(d=d, epsilon=eps)  # type: ignore[call-arg]
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
            caveat = _unary_caveat(oracle, result.epsilon_measured)
            result = dataclasses.replace(result, note=note, caveat=caveat)
        return result
    if domain is not None:
        raise ParameterError(f"{key} acts on [-1, 1]: --domain does not apply")
    mech = MEAN_MECHANISMS[key](epsilon=eps)  # type: ignore[call-arg]
    inputs = _unit_inputs()
    if isinstance(mech, _TwoPoint):
        return audit_discrete(key, mech.output_distribution(inputs), mech.epsilon)
    assert isinstance(mech, _Continuous)
    reach = mech.bound if math.isfinite(mech.bound) else 1.0 + 12.0 / mech.epsilon
    grid = np.sort(
        np.concatenate([_output_grid(-reach - 0.5, reach + 0.5), _piece_midpoints(mech, inputs)])
    )
    ld = np.stack([mech.log_density(grid, float(t)) for t in inputs])
    result = audit_density(key, ld, mech.epsilon)
    if not mech.is_ldp:
        lo1, hi1 = mech.support(-1.0)
        lo2, hi2 = mech.support(1.0)
        note = result.note + (
            f"; support for v=-1 is [{lo1:.4g}, {hi1:.4g}], for v=+1 [{lo2:.4g}, {hi2:.4g}]"
        )
        result = dataclasses.replace(result, note=note)
    return result
