"""Composition over epochs: what one user keeps after T epochs of one or several mechanisms.

A :class:`PrivacyProfile` describes one epoch of one mechanism by a *dominating pair*
(P, Q) of probability mass functions on one finite support: for neighbouring datasets
(D, D') the epoch's two output laws are a post-processing of (P, Q), and of (Q, P) for
(D', D). Every hockey-stick divergence of the epoch, and of any composition of such
epochs, is then at most that of the pair and of the product of the pairs (Zhu, Dong, Wang,
"Optimal accounting of differential privacy via characteristic function", AISTATS'22,
Thm 10). A profile is built from

* a pair directly (:meth:`PrivacyProfile.from_pair`, :meth:`PrivacyProfile.from_log_pair`;
  e.g. randomized response, :func:`binary_rr_profile`, :func:`krr_profile`, or the clone
  reductions of the shuffled k-RR, :func:`clone_profile`, :func:`stronger_clone_profile`,
  :func:`fmt21_profile`);
* one (ε, δ) point (:meth:`PrivacyProfile.from_point`): its pair is the canonical
  (ε, δ) pair of Kairouz, Oh, Viswanath (ICML'15), which dominates every (ε, δ)-DP
  mechanism;
* an ε(δ) curve (:meth:`PrivacyProfile.from_curve`): the curve is read at a grid of δ and
  the pair is the one whose trade-off function is the upper envelope of the points' trade-off
  functions f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)) (Dong, Roth, Su,
  "Gaussian differential privacy", JRSS-B 2022, Prop. 2.5 and 2.12): the weakest
  mechanism meeting every point read, so a valid (if not tight) dominating pair.

:func:`compose` composes the pairs' privacy loss distributions with ``dp_accounting``
(pessimistic discretization: the result is an upper bound, at most T·Δ above the exact
value for T epochs and discretization interval Δ), reports a Rényi-DP cross-check where
the pairs have finite Rényi divergences, and, when every profile is the same (ε, δ) point,
the exact optimal composition of Kairouz, Oh, Viswanath (Thm 3.3), :func:`kov_epsilon`.
:func:`per_epoch_epsilon` inverts it by bisection.

scipy and dp_accounting are imported inside the functions that use them: importing the
package must not pay their start-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from .._base import check_delta, check_epsilon, check_n
from .._distributions import binom_pmf
from .._errors import ParameterError
from ._clones import _krr_fake_clone_probability
from ._laws import epsilon_for_pair

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

__all__ = [
    "ComposedGuarantee",
    "CompositionMethod",
    "PrivacyProfile",
    "ProfileKind",
    "binary_rr_profile",
    "clone_profile",
    "compose",
    "fmt21_profile",
    "kov_delta",
    "kov_epsilon",
    "krr_profile",
    "per_epoch_epsilon",
    "stronger_clone_profile",
]

FloatArray = npt.NDArray[np.float64]

ProfileKind = Literal["pair", "point", "curve"]
#: ``"pld"``: every profile is a pair; ``"kov_optimal"``: every profile is the same (ε, δ)
#: point, exact optimal composition; ``"murtagh_vadhan_pld"``: every profile is an (ε, δ)
#: point, not all the same: the optimal heterogeneous composition (Murtagh, Vadhan, TCC'16)
#: evaluated as the PLD of the canonical pairs; ``"pld_envelope"``: some profile is an ε(δ)
#: curve, or points and pairs are mixed.
CompositionMethod = Literal["pld", "kov_optimal", "murtagh_vadhan_pld", "pld_envelope"]

#: How far a pmf's total may be from 1.
MASS_TOLERANCE = 1e-9
#: Default discretization interval of the privacy loss (dp_accounting's own default).
DEFAULT_INTERVAL = 1e-4
#: Default δ grid at which an ε(δ) curve is read (see :meth:`PrivacyProfile.from_curve`).
DEFAULT_CURVE_DELTAS: tuple[float, ...] = tuple(float(d) for d in np.geomspace(1e-15, 0.5, 57))
#: ε values of a curve above this are not used (a weaker assumption, still valid): the
#: loss grid of the pair would be too long.
CURVE_EPSILON_MAX = 60.0
#: Rényi orders of the cross-check.
RDP_ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0,
    16.0, 20.0, 24.0, 28.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0, 512.0, 1024.0,
)  # fmt: skip
#: Pairs up to this many points go through dp_accounting's
#: ``from_two_probability_mass_functions`` (a Python loop over a dict); larger ones are
#: rounded onto the same grid with numpy (the same arithmetic, vectorized).
DICT_PATH_MAX = 4096
#: Most points of a clone pair (128 MiB per float64 array).
CLONE_MAX_POINTS = 1 << 24
#: Tail of the binomial laws of a clone pair kept, in standard deviations (+ 30); what is
#: cut (≪ 10^-20) goes to the pair's infinite-loss atoms, which is pessimistic.
_CLONE_TAIL_SD = 10.0


def _log(a: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.log(a)


def _check_log_pair(log_p: npt.ArrayLike, log_q: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    lp = np.array(log_p, dtype=np.float64)
    lq = np.array(log_q, dtype=np.float64)
    if lp.ndim != 1 or lq.ndim != 1 or lp.shape != lq.shape or lp.size == 0:
        raise ParameterError(
            f"a pair needs two non-empty 1-D arrays on one support, got shapes {lp.shape} "
            f"and {lq.shape}"
        )
    for name, arr in (("p", lp), ("q", lq)):
        if np.isnan(arr).any() or (arr == np.inf).any():
            raise ParameterError(f"log {name} must be finite or -inf (mass 0), got NaN or +inf")
        total = float(np.sum(np.exp(arr)))
        if not abs(total - 1.0) <= MASS_TOLERANCE:
            raise ParameterError(f"{name} must sum to 1 (within {MASS_TOLERANCE:g}), got {total!r}")
    lp.setflags(write=False)
    lq.setflags(write=False)
    return lp, lq


def _check_point(epsilon: float, delta: float) -> tuple[float, float]:
    try:
        eps, dlt = float(epsilon), float(delta)
    except (TypeError, ValueError):
        raise ParameterError(f"(ε, δ) must be numbers, got {epsilon!r}, {delta!r}") from None
    if not 0.0 <= eps <= 700.0:  # false for NaN
        raise ParameterError(f"epsilon must lie in [0, 700], got {epsilon!r}")
    if not 0.0 <= dlt < 1.0:
        raise ParameterError(f"delta of a point must lie in [0, 1), got {delta!r}")
    return eps, dlt


def _envelope_pair(points: Sequence[tuple[float, float]]) -> tuple[FloatArray, FloatArray]:
    """The pair whose trade-off function is max over the points of f_{ε,δ} (see module doc).

    f is convex, piecewise linear, with f(1) = 0. Its upper envelope of lines β = a + bα is
    walked from α = 0: each segment of slope b < 0 on [α_j, α_{j+1}] is an atom with
    Q = α_{j+1} − α_j and P = −b·Q (likelihood ratio −b); P's mass 1 − f(0) has Q = 0
    (infinite loss) and Q's mass past the point where f reaches 0 has P = 0.
    """
    lines: dict[float, float] = {0.0: 0.0}  # slope -> largest intercept
    for eps, dlt in points:
        e = math.exp(eps)
        for slope, icpt in ((-e, 1.0 - dlt), (-1.0 / e, (1.0 - dlt) / e)):
            lines[slope] = max(lines.get(slope, -math.inf), icpt)
    # Upper envelope over the reals, slopes increasing (convex hull trick).
    hull: list[tuple[float, float]] = []
    for b, a in sorted(lines.items()):
        while len(hull) >= 2:
            (b1, a1), (b2, a2) = hull[-2], hull[-1]
            # hull[-1] is useless if the new line meets hull[-2] no later than hull[-1] does.
            if (a1 - a) * (b2 - b1) <= (a1 - a2) * (b - b1):
                hull.pop()
            else:
                break
        hull.append((b, a))
    # Restrict to [0, 1]: breakpoints x_j between hull[j] and hull[j+1].
    p_atoms: list[float] = []
    q_atoms: list[float] = []
    start = 0.0
    for j, (b, a) in enumerate(hull):
        end = 1.0 if j + 1 == len(hull) else (a - hull[j + 1][1]) / (hull[j + 1][0] - b)
        end = min(max(end, 0.0), 1.0)
        if end <= start:
            continue
        if b < 0.0:
            q_atoms.append(end - start)
            p_atoms.append(-b * (end - start))
        else:  # the zero line: f = 0 from here on, Q's remaining mass has P = 0
            q_atoms.append(1.0 - start)
            p_atoms.append(0.0)
            break
        start = end
    # 1 − f(0) is the smallest δ, exactly (1 − (1 − δ) in floats is not δ): the finite
    # atoms are renormalised around it (breakpoint round-off, relative changes ~1e-16).
    p_inf = min(dlt for _, dlt in points)
    p = np.clip(np.array(p_atoms), 0.0, None)
    q = np.clip(np.array(q_atoms), 0.0, None)
    # f is symmetric (each f_{ε,δ} is), so Q's mass where P = 0 is 1 − f(0) as well.
    q[-1] = p_inf if p[-1] == 0.0 else q[-1]
    p = np.concatenate(([p_inf], p * ((1.0 - p_inf) / p.sum())))
    q = np.concatenate(([0.0], q[:-1] * ((1.0 - q[-1]) / q[:-1].sum()), q[-1:]))
    return _log(p), _log(q)


@dataclass(frozen=True, slots=True, eq=False)
class PrivacyProfile:
    """One epoch of one mechanism: a dominating pair, an (ε, δ) point or an ε(δ) curve.

    Build it with :meth:`from_pair`, :meth:`from_log_pair`, :meth:`from_point` or
    :meth:`from_curve`. Every profile carries a dominating pair (``log_p``, ``log_q``):
    the pair given, the canonical pair of the point, or the envelope pair of the curve.

    Attributes:
        description: what the epoch is, for reports.
        kind: ``"pair"``, ``"point"`` or ``"curve"``.
        log_p: log-pmf of P (−inf for mass 0), read-only.
        log_q: log-pmf of Q on the same support, read-only.
        points: the (ε, δ) points the pair was built from (empty for a pair).
        curve: the ε(δ) callable of a curve profile, else None.
    """

    description: str
    kind: ProfileKind
    log_p: FloatArray
    log_q: FloatArray
    points: tuple[tuple[float, float], ...] = ()
    curve: Callable[[float], float] | None = None

    @classmethod
    def from_pair(
        cls, p: npt.ArrayLike, q: npt.ArrayLike, *, description: str = ""
    ) -> PrivacyProfile:
        """A dominating pair of pmfs on one support.

        Args:
            p: P(y) for y on the support (non-negative, summing to 1).
            q: Q(y) on the same support.
            description: what the epoch is (default: the support size).

        Returns:
            The profile.

        Raises:
            ParameterError: the arrays are not 1-D of one length, have negative or
                non-finite entries, or do not sum to 1 within :data:`MASS_TOLERANCE`.
        """
        pa = np.asarray(p, dtype=np.float64)
        qa = np.asarray(q, dtype=np.float64)
        if (
            (pa < 0).any()
            or (qa < 0).any()
            or not (np.isfinite(pa).all() and np.isfinite(qa).all())
        ):
            raise ParameterError("pmf entries must be finite and non-negative")
        return cls.from_log_pair(_log(pa), _log(qa), description=description)

    @classmethod
    def from_log_pair(
        cls, log_p: npt.ArrayLike, log_q: npt.ArrayLike, *, description: str = ""
    ) -> PrivacyProfile:
        """A dominating pair given as log-pmfs (−inf for mass 0) on one support.

        Args:
            log_p: log P(y).
            log_q: log Q(y) on the same support.
            description: what the epoch is (default: the support size).

        Returns:
            The profile.

        Raises:
            ParameterError: mismatched shapes, NaN or +inf entries, or a law whose mass is
                not 1 within :data:`MASS_TOLERANCE`.
        """
        lp, lq = _check_log_pair(log_p, log_q)
        return cls(description or f"dominating pair on {lp.size} points", "pair", lp, lq)

    @classmethod
    def from_point(cls, epsilon: float, delta: float, *, description: str = "") -> PrivacyProfile:
        """An (ε, δ)-DP epoch, through the canonical pair that dominates every such mechanism.

        Args:
            epsilon: ε ≥ 0 of the epoch.
            delta: δ in [0, 1) of the epoch.
            description: what the epoch is (default: ``"(ε, δ)-DP"``).

        Returns:
            The profile.

        Raises:
            ParameterError: ε outside [0, 700] or δ outside [0, 1).
        """
        eps, dlt = _check_point(epsilon, delta)
        lp, lq = _envelope_pair([(eps, dlt)])
        lp.setflags(write=False)
        lq.setflags(write=False)
        return cls(description or f"({eps:g}, {dlt:g})-DP", "point", lp, lq, ((eps, dlt),))

    @classmethod
    def from_curve(
        cls,
        curve: Callable[[float], float],
        *,
        description: str = "",
        deltas: Sequence[float] = DEFAULT_CURVE_DELTAS,
    ) -> PrivacyProfile:
        """An epoch known only through ε(δ): (curve(δ), δ)-DP for every δ.

        The curve is read at ``deltas`` (default: 57 values from 10^-15 to ½, log-spaced);
        the pair is the weakest mechanism meeting all those points. Reading fewer points
        weakens the pair, never invalidates it; values ε = inf, or above
        :data:`CURVE_EPSILON_MAX`, are not used. The smallest δ read is mass of infinite
        loss in every epoch: T epochs cost at least about T times it.

        Args:
            curve: δ ↦ ε, e.g. ``lambda d: stronger_clone_epsilon(1.0, 9999, d, k=4)``.
            description: what the epoch is.
            deltas: where to read the curve, each in (0, 1).

        Returns:
            The profile (its ``curve`` is kept for per-epoch ε at other δ).

        Raises:
            ParameterError: a δ outside (0, 1), a value that is NaN or negative, or no
                finite value at all.
        """
        points: list[tuple[float, float]] = []
        for d in deltas:
            dlt = check_delta(d)
            eps = float(curve(dlt))
            if math.isnan(eps) or eps < 0.0:
                raise ParameterError(f"curve({dlt:g}) must be a number >= 0, got {eps!r}")
            if eps <= CURVE_EPSILON_MAX:
                points.append((eps, dlt))
        if not points:
            raise ParameterError("the curve gave no finite ε at the δ read")
        lp, lq = _envelope_pair(points)
        lp.setflags(write=False)
        lq.setflags(write=False)
        return cls(description or "ε(δ) curve", "curve", lp, lq, tuple(points), curve)

    def epsilon(self, delta: float) -> float:
        """ε of one epoch at δ: exact for the pair; for a curve, the smaller of the curve's
        value and its pair's.

        Args:
            delta: δ.

        Returns:
            ε ≥ 0 (``inf`` if no finite ε reaches δ).

        Raises:
            ParameterError: δ outside (0, 1).
        """
        dlt = check_delta(delta)
        with np.errstate(over="ignore"):  # e^{loss} past 10^308: H is 0 there
            eps = epsilon_for_pair(self.log_p, self.log_q, dlt)
        if self.curve is not None:
            eps = min(eps, float(self.curve(dlt)))
        # A point read at its own δ (or above) is the point: the pair's hockey-stick at
        # exactly δ can round to just above it.
        known = [e for e, d in self.points if d <= dlt]
        return min([eps, *known])


def binary_rr_profile(epsilon: float) -> PrivacyProfile:
    """Binary randomized response at ε (no shuffling): P = (p, q), Q = (q, p), p = e^ε/(1+e^ε).

    Args:
        epsilon: ε of the randomizer.

    Returns:
        The privacy profile of the pair (P, Q).

    Raises:
        ParameterError: ε outside [10^-6, 700] (where e^ε − 1 keeps its precision).
    """
    eps = check_epsilon(epsilon)
    lp = -math.log1p(math.exp(-eps))
    lq = -math.log1p(math.exp(eps))
    return PrivacyProfile.from_log_pair(
        [lp, lq], [lq, lp], description=f"binary randomized response, ε = {eps:g}"
    )


def krr_profile(epsilon: float, k: int) -> PrivacyProfile:
    """k-ary randomized response at ε (no shuffling), reduced to three outcomes (the true
    value, the neighbour's value, any other): P = (p, q, (k−2) q), Q = (q, p, (k−2) q).

    Args:
        epsilon: ε of the randomizer.
        k: domain size, at least 2.

    Returns:
        The privacy profile of the pair (P, Q).

    Raises:
        ParameterError: ε out of range or k < 2.
    """
    eps = check_epsilon(epsilon)
    k = check_n(k, "k", 2)
    lq = -math.log(math.exp(eps) + k - 1.0)
    lp = eps + lq
    lr = math.log(k - 2.0) + lq if k > 2 else -math.inf
    return PrivacyProfile.from_log_pair(
        [lp, lq, lr], [lq, lp, lr], description=f"{k}-ary randomized response, ε = {eps:g}"
    )


def clone_profile(
    epsilon_local: float,
    n_others: int,
    *,
    clone_probability: float,
    n_fakes: int = 0,
    fake_clone_probability: float = 0.0,
    description: str = "",
) -> PrivacyProfile:
    """The clone reduction's pair for one shuffled epoch (Feldman, McMillan, Talwar).

    The shuffled output is a post-processing of (A+Δ, C−A+1−Δ) under D and of
    (A+1−Δ, C−A+Δ) under D', with C = Bin(n_others, clone_probability) +
    Bin(n_fakes, fake_clone_probability), A ~ Bin(C, ½), Δ ~ Bern(e^{ε0}/(e^{ε0}+1)). The
    pair is put on the points (C, A+Δ); binomial tails beyond 10 standard deviations go to
    infinite-loss atoms of both laws (pessimistic, mass ≪ 10^-20). Its one-epoch ε(δ) is
    :func:`protocols.clone_epsilon`'s.

    Args:
        epsilon_local: ε0 of the victim's local randomizer.
        n_others: other honest users.
        clone_probability: probability that another user's report is a clone.
        n_fakes: fakes added by honest shufflers.
        fake_clone_probability: probability that one fake is a clone.
        description: what the epoch is.

    Returns:
        The profile.

    Raises:
        ParameterError: bad arguments, or a pair of more than :data:`CLONE_MAX_POINTS`
            points (about n_others > 10^5).
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    n_others = check_n(n_others, "n_others", 0)
    n_fakes = check_n(n_fakes, "n_fakes", 0)
    for name, prob in (
        ("clone_probability", clone_probability),
        ("fake_clone_probability", fake_clone_probability),
    ):
        if not 0.0 <= prob <= 1.0:
            raise ParameterError(f"{name} must lie in [0, 1], got {prob!r}")

    def window(n: int, prob: float) -> tuple[int, int]:
        sd = math.sqrt(n * prob * (1.0 - prob))
        return (
            max(0, math.floor(n * prob - _CLONE_TAIL_SD * sd - 30)),
            min(n, math.ceil(n * prob + _CLONE_TAIL_SD * sd + 30)),
        )

    lo1, hi1 = window(n_others, clone_probability)
    w = binom_pmf(np.arange(lo1, hi1 + 1), n_others, clone_probability)
    lo = lo1
    if n_fakes:
        lo2, hi2 = window(n_fakes, fake_clone_probability)
        w = np.convolve(w, binom_pmf(np.arange(lo2, hi2 + 1), n_fakes, fake_clone_probability))
        lo += lo2
    keep = w > 1e-300
    c = np.arange(lo, lo + w.size)[keep]
    w = w[keep]
    c_max = int(c[-1])
    half = math.ceil(_CLONE_TAIL_SD * math.sqrt(c_max) / 2.0) + 30
    offsets = np.arange(-half, half + 2)  # x = A + Δ around ⌊c/2⌋
    if c.size * offsets.size > CLONE_MAX_POINTS:
        raise ParameterError(
            f"the clone pair would have {c.size * offsets.size:,} points "
            f"(over {CLONE_MAX_POINTS:,}): too many users for it"
        )
    x = (c // 2)[:, None] + offsets[None, :]
    cc = np.broadcast_to(c[:, None], x.shape)
    valid = (x >= 0) & (x <= cc + 1)
    b_here = binom_pmf(x, cc, 0.5)  # P[A = x]; 0 outside [0, c]
    b_prev = binom_pmf(x - 1, cc, 0.5)  # P[A = x − 1]
    pv = 1.0 / (1.0 + math.exp(-eps0))  # P[Δ = 1] under D
    qv = 1.0 - pv
    p = (w[:, None] * (pv * b_prev + qv * b_here))[valid]
    q = (w[:, None] * (qv * b_prev + pv * b_here))[valid]
    # Cut tails: one atom of mass `cut` each, P-only and Q-only (the cut region has the
    # same mass under both laws, and its hockey-stick contribution is at most that mass).
    cut = max(0.0, 1.0 - float(p.sum()))
    cut_q = max(0.0, 1.0 - float(q.sum()))
    p = np.concatenate((p, [cut, 0.0]))
    q = np.concatenate((q, [0.0, cut_q]))
    return PrivacyProfile.from_pair(
        p / p.sum(),
        q / q.sum(),
        description=description
        or (
            f"clone reduction, ε0 = {eps0:g}, {n_others} others (clone w.p. "
            f"{clone_probability:.4g}), {n_fakes} fakes"
        ),
    )


def stronger_clone_profile(
    epsilon_local: float, n_others: int, *, k: int, n_fakes: int = 0
) -> PrivacyProfile:
    """FMT'23 stronger clone pair of shuffled k-RR (clones w.p. 2/(e^{ε0}+1); uniform fakes
    are clones w.p. 2(e^{ε0}+k−1)/(k(e^{ε0}+1))): :func:`protocols.stronger_clone_epsilon`'s
    pair.

    Args:
        epsilon_local: ε0 of the victim's k-RR randomizer.
        n_others: other honest users.
        k: domain of the k-RR randomizer, at least 2.
        n_fakes: uniform fake reports added by honest shufflers.

    Returns:
        The privacy profile of the clone pair.

    Raises:
        ParameterError: bad arguments (see :func:`clone_profile`).
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    k = check_n(k, "k", 2)
    return clone_profile(
        eps0,
        n_others,
        clone_probability=2.0 / (math.exp(eps0) + 1.0),
        n_fakes=n_fakes,
        fake_clone_probability=_krr_fake_clone_probability(eps0, k),
        description=(
            f"shuffled {k}-RR, ε0 = {eps0:g}, {n_others} others, {n_fakes} fakes "
            "(FMT'23 stronger clone pair)"
        ),
    )


def fmt21_profile(epsilon_local: float, n_others: int) -> PrivacyProfile:
    """FMT'21 clone pair (clones w.p. e^{−ε0}), valid for every shuffled ε0-LDP randomizer:
    :func:`protocols.fmt21_numerical_epsilon`'s pair.

    Args:
        epsilon_local: ε0 of the victim's randomizer.
        n_others: other honest users.

    Returns:
        The privacy profile of the clone pair.

    Raises:
        ParameterError: bad arguments (see :func:`clone_profile`).
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    return clone_profile(
        eps0,
        n_others,
        clone_probability=math.exp(-eps0),
        description=f"shuffled ε0 = {eps0:g}-LDP, {n_others} others (FMT'21 clone pair)",
    )


# --- the optimal composition of (ε, δ) points --------------------------------------------


def _kov_pair(epsilon: float, k: int) -> tuple[FloatArray, FloatArray]:
    """k-fold binary RR at ε as a pair on the number l of flipped answers: Bin(k, q), Bin(k, p)."""
    from scipy import special

    l = np.arange(k + 1, dtype=np.float64)  # noqa: E741
    log_comb = special.gammaln(k + 1.0) - special.gammaln(l + 1.0) - special.gammaln(k - l + 1.0)
    log_p = -math.log1p(math.exp(-epsilon)) if epsilon > 0 else math.log(0.5)
    log_q = -math.log1p(math.exp(epsilon)) if epsilon > 0 else math.log(0.5)
    return log_comb + l * log_q + (k - l) * log_p, log_comb + l * log_p + (k - l) * log_q


def _check_kov(epsilon: float, delta: float, k: int) -> tuple[float, float, int]:
    eps, dlt = _check_point(epsilon, delta)
    return eps, dlt, check_n(k, "k", 1)


def kov_delta(epsilon: float, delta: float, k: int, epsilon_total: float) -> float:
    """Smallest δ_total with k-fold (ε, δ)-DP ⊆ (ε_total, δ_total)-DP (Kairouz, Oh,
    Viswanath, ICML'15, Thm 3.3: exact and optimal).

    δ_total = 1 − (1−δ)^k (1 − Σ_l C(k,l) max(0, q^l p^{k−l} − e^{ε_total} p^l q^{k−l}))
    with p = e^ε/(1+e^ε), q = 1 − p; at ε_total = (k−2i)ε this is the theorem's δ_i.

    Args:
        epsilon: ε of each of the k mechanisms.
        delta: δ of each of the k mechanisms.
        k: number of mechanisms composed.
        epsilon_total: ε of the composition.

    Returns:
        δ_total, in [0, 1].

    Raises:
        ParameterError: ε outside [0, 700], δ outside [0, 1), k < 1 or ε_total < 0.
    """
    eps, dlt, k = _check_kov(epsilon, delta, k)
    if not 0.0 <= epsilon_total < math.inf:
        raise ParameterError(f"epsilon_total must be a finite number >= 0, got {epsilon_total!r}")
    lp, lq = _kov_pair(eps, k)
    diff = np.exp(lp) - np.exp(lq + epsilon_total)
    hockey = float(np.sum(diff[diff > 0]))
    keep = (1.0 - dlt) ** k
    return min(1.0, 1.0 - keep + keep * hockey)


def kov_epsilon(epsilon: float, delta: float, k: int, delta_total: float) -> float:
    """Smallest ε_total with k-fold (ε, δ)-DP ⊆ (ε_total, δ_total)-DP: :func:`kov_delta`
    inverted exactly (closed form on each piece, no root finding); inf if k·δ already exceeds
    δ_total (precisely, 1 − (1−δ)^k ≥ δ_total).

    Args:
        epsilon: ε of each of the k mechanisms.
        delta: δ of each of the k mechanisms.
        k: number of mechanisms composed.
        delta_total: δ of the composition.

    Returns:
        ε_total ≥ 0, or ``inf``.

    Raises:
        ParameterError: ε outside [0, 700], δ outside [0, 1), k < 1 or δ_total outside (0, 1).
    """
    eps, dlt, k = _check_kov(epsilon, delta, k)
    target = check_delta(delta_total, "delta_total")
    keep = (1.0 - dlt) ** k
    # 1 − keep (1 − H) ≤ target  ⟺  H ≤ (target − 1 + keep) / keep.
    h_target = (target - 1.0 + keep) / keep
    if h_target <= 0.0:
        return math.inf
    if h_target >= 1.0:
        return 0.0
    # The loss (k − 2l)ε decreases in l, so the optimal sets are {l < m} and the smallest ε
    # is max_m log((P[l < m] − h)/Q[l < m]) (every set bounds it below; the optimal one
    # attains it). Q's sums stay in log space: e^{kε} may overflow.
    lp, lq = _kov_pair(eps, k)
    big_p = np.cumsum(np.exp(lp))
    log_q = np.logaddexp.accumulate(lq)
    ok = big_p > h_target
    if not ok.any():
        return 0.0
    return max(0.0, float(np.max(np.log(big_p[ok] - h_target) - log_q[ok])))


# --- composition ---------------------------------------------------------------------------


def _rounded(lu: FloatArray, ll: FloatArray, interval: float) -> tuple[dict[int, float], float]:
    """Pessimistic rounded PLD of (upper, lower), as ``from_two_probability_mass_functions``:
    each loss log(U/L) is rounded up to a multiple of ``interval``; U's mass where L = 0 is
    infinite loss."""
    on_u = np.isfinite(lu)
    inf_mass = float(np.exp(lu[on_u & ~np.isfinite(ll)]).sum())
    keep = on_u & np.isfinite(ll)
    idx = np.ceil((lu[keep] - ll[keep]) / interval).astype(np.int64)
    uniq, inv = np.unique(idx, return_inverse=True)
    sums = np.bincount(inv, weights=np.exp(lu[keep]))
    return dict(zip(uniq.tolist(), sums.tolist(), strict=True)), inf_mass


def _pld(profile: PrivacyProfile, interval: float) -> PrivacyLossDistribution:
    """PLD of the profile's pair, both directions (remove: under P, add: under Q)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    lp, lq = profile.log_p, profile.log_q
    if lp.size <= DICT_PATH_MAX:
        return pld_lib.from_two_probability_mass_functions(
            dict(enumerate(lq.tolist())),
            dict(enumerate(lp.tolist())),
            pessimistic_estimate=True,
            value_discretization_interval=interval,
            symmetric=False,
        )
    remove, inf_remove = _rounded(lp, lq, interval)
    add, inf_add = _rounded(lq, lp, interval)
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        remove, inf_remove, interval, True, add, inf_add, symmetric=False
    )


def _rdp(profile: PrivacyProfile) -> FloatArray | None:
    """max of D_α(P‖Q), D_α(Q‖P) at :data:`RDP_ORDERS`; None if infinite (a point where
    one law has mass and the other none)."""
    from scipy.special import logsumexp

    lp, lq = profile.log_p, profile.log_q
    fp, fq = np.isfinite(lp), np.isfinite(lq)
    if (fp != fq).any():
        return None
    lp, lq = lp[fp], lq[fp]
    orders = np.asarray(RDP_ORDERS)
    out = np.empty(orders.size)
    for i, a in enumerate(orders):
        d_pq = float(logsumexp(a * lp + (1.0 - a) * lq)) / (a - 1.0)
        d_qp = float(logsumexp(a * lq + (1.0 - a) * lp)) / (a - 1.0)
        out[i] = max(d_pq, d_qp, 0.0)
    return out


@dataclass(frozen=True, slots=True)
class ComposedGuarantee:
    """What one user keeps after composing the epochs.

    Attributes:
        epsilon_total: ε of the composition at ``delta`` (an upper bound; ``inf`` if none).
        delta: total δ.
        epochs: T, the number of epochs composed (sum of the counts).
        method: how ``epsilon_total`` was computed (see :data:`CompositionMethod`).
        profiles: (description, count) of each profile composed.
        epsilon_rdp: Rényi-DP cross-check: the pairs' Rényi divergences added up and
            converted at ``delta`` (Canonne, Kamath, Steinke conversion, through
            dp_accounting); None if a pair has infinite Rényi divergence (any δ > 0 part).
        epsilon_naive: basic composition, Σ ε_i at δ_i = δ/T each.
        epsilon_advanced: advanced composition (Dwork, Rothblum, Vadhan, FOCS'10):
            √(2 ln(2/δ) Σ ε_i²) + Σ ε_i (e^{ε_i} − 1), ε_i at δ_i = δ/(2T), slack δ/2.
        discretization_interval: Δ of the privacy loss grid (None for ``kov_optimal``);
            ``epsilon_total`` is at most T·Δ above the exact composition of the pairs.
    """

    epsilon_total: float
    delta: float
    epochs: int
    method: CompositionMethod
    profiles: tuple[tuple[str, int], ...]
    epsilon_rdp: float | None
    epsilon_naive: float
    epsilon_advanced: float
    discretization_interval: float | None


def _check_profiles(
    profiles: Sequence[tuple[PrivacyProfile, int]],
) -> list[tuple[PrivacyProfile, int]]:
    items = list(profiles)
    if not items:
        raise ParameterError("compose needs at least one (profile, count)")
    out: list[tuple[PrivacyProfile, int]] = []
    for item in items:
        try:
            profile, count = item
        except (TypeError, ValueError):
            raise ParameterError(f"each entry must be (profile, count), got {item!r}") from None
        if not isinstance(profile, PrivacyProfile):
            raise ParameterError(f"expected a PrivacyProfile, got {type(profile).__name__}")
        out.append((profile, check_n(count, "count (epochs)", 1)))
    return out


def _method(items: list[tuple[PrivacyProfile, int]]) -> CompositionMethod:
    kinds = {p.kind for p, _ in items}
    if kinds == {"pair"}:
        return "pld"
    if kinds == {"point"}:
        return "kov_optimal" if len({p.points for p, _ in items}) == 1 else "murtagh_vadhan_pld"
    return "pld_envelope"


def _advanced(eps: Sequence[float], counts: Sequence[int], delta_slack: float) -> float:
    if any(math.isinf(e) for e in eps):
        return math.inf
    sq = sum(c * e * e for e, c in zip(eps, counts, strict=True))
    drift = sum(c * e * math.expm1(e) for e, c in zip(eps, counts, strict=True))
    return math.sqrt(2.0 * math.log(1.0 / delta_slack) * sq) + drift


def compose(
    profiles: Sequence[tuple[PrivacyProfile, int]],
    *,
    delta: float,
    value_discretization_interval: float = DEFAULT_INTERVAL,
) -> ComposedGuarantee:
    """ε at δ of running each profile's epoch ``count`` times (any order, adaptively).

    The pairs' privacy loss distributions are built with dp_accounting's pessimistic
    discretization (``from_two_probability_mass_functions``, both directions), self-composed
    ``count`` times and composed; ``epsilon_total`` is their ``get_epsilon_for_delta``. When
    every profile is the same (ε, δ) point, it is the exact :func:`kov_epsilon` instead.

    Args:
        profiles: (profile, count) pairs; T is the sum of the counts.
        delta: total δ in (0, 1).
        value_discretization_interval: Δ of the privacy loss grid; the result is at most
            T·Δ above the exact composition of the pairs (smaller Δ: tighter, slower).

    Returns:
        The guarantee, with the naive, advanced and Rényi numbers beside it.

    Raises:
        ParameterError: no profile, a count < 1, δ outside (0, 1), or Δ not finite and > 0.
    """
    items = _check_profiles(profiles)
    dlt = check_delta(delta)
    interval = float(value_discretization_interval)
    if not 0.0 < interval < math.inf:
        raise ParameterError(
            "value_discretization_interval must be a finite number > 0, "
            f"got {value_discretization_interval!r}"
        )
    epochs = sum(c for _, c in items)
    method = _method(items)
    if method == "kov_optimal":
        (eps0, d0) = items[0][0].points[0]
        eps_total = kov_epsilon(eps0, d0, epochs, dlt)
        if epochs == 1 and d0 <= dlt:  # the point itself (kov's 1 − (1 − δ) rounds)
            eps_total = min(eps_total, eps0)
        used_interval: float | None = None
    else:
        total: PrivacyLossDistribution | None = None
        for profile, count in items:
            pld = _pld(profile, interval)
            if count > 1:
                pld = pld.self_compose(count)
            total = pld if total is None else total.compose(pld)
        assert total is not None
        eps_total = float(total.get_epsilon_for_delta(dlt))
        used_interval = interval

    rdp_eps: float | None = None
    rdps = [_rdp(p) for p, _ in items]
    if all(r is not None for r in rdps):
        from dp_accounting.rdp import rdp_privacy_accountant

        summed = np.sum([c * r for (_, c), r in zip(items, rdps, strict=True) if r is not None], 0)
        rdp_eps = float(rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, summed.tolist(), dlt)[0])

    counts = [c for _, c in items]
    naive = sum(c * p.epsilon(dlt / epochs) for p, c in items)
    advanced = _advanced([p.epsilon(dlt / (2 * epochs)) for p, _ in items], counts, dlt / 2)
    return ComposedGuarantee(
        epsilon_total=eps_total,
        delta=dlt,
        epochs=epochs,
        method=method,
        profiles=tuple((p.description, c) for p, c in items),
        epsilon_rdp=rdp_eps,
        epsilon_naive=float(naive),
        epsilon_advanced=advanced,
        discretization_interval=used_interval,
    )


def per_epoch_epsilon(
    make_profile: Callable[[float], PrivacyProfile],
    epochs: int,
    total_epsilon: float,
    delta: float,
    *,
    value_discretization_interval: float = DEFAULT_INTERVAL,
    lower: float = 1e-6,
    upper: float = 64.0,
    rtol: float = 1e-4,
) -> float:
    """Largest per-epoch parameter ε whose ``epochs``-fold composition stays within
    ``total_epsilon`` at ``delta``, by bisection (the composed ε must grow with ε).

    Args:
        make_profile: ε ↦ the profile of one epoch at parameter ε (e.g.
            :func:`binary_rr_profile`, or ``lambda e: stronger_clone_profile(e, 9999, k=4)``
            where ε is the local ε0).
        epochs: T ≥ 1.
        total_epsilon: the budget, > 0.
        delta: total δ in (0, 1).
        value_discretization_interval: passed to :func:`compose`.
        lower: smallest ε searched.
        upper: largest ε searched (returned if it fits).
        rtol: the answer is within ``rtol``·ε below the largest that fits.

    Returns:
        An ε that fits (its composition is within the budget), within ``rtol`` of the
        largest one.

    Raises:
        ParameterError: bad arguments, or not even ``lower`` fits.
    """
    epochs = check_n(epochs, "epochs", 1)
    dlt = check_delta(delta)
    budget = float(total_epsilon)
    if not 0.0 < budget < math.inf:
        raise ParameterError(f"total_epsilon must be a finite number > 0, got {total_epsilon!r}")
    if not 0.0 < lower < upper < math.inf or not 0.0 < rtol < 1.0:
        raise ParameterError(
            f"need 0 < lower < upper and 0 < rtol < 1, got {lower}, {upper}, {rtol}"
        )

    def fits(eps: float) -> bool:
        got = compose(
            [(make_profile(eps), epochs)],
            delta=dlt,
            value_discretization_interval=value_discretization_interval,
        )
        return got.epsilon_total <= budget

    if not fits(lower):
        raise ParameterError(
            f"even per-epoch ε = {lower:g} exceeds ε_total = {budget:g} over {epochs} epochs"
        )
    lo, hi = lower, min(max(budget, 2.0 * lower), upper)
    while fits(hi):
        if hi >= upper:
            return upper
        lo, hi = hi, min(2.0 * hi, upper)
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
