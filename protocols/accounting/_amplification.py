"""Privacy amplification by shuffling: the survey's Theorems 1–4, both directions.

Each bound is an :class:`AmplificationBound` with a forward map ε_l → ε_c and an inverse
ε_c → ε_l. Both refuse with :class:`BoundNotApplicable` outside the range where the theorem
is proven. Bounds are registered by name in :data:`BOUNDS`; :func:`tightest_central` and
:func:`largest_local` pick, among the bounds that apply to a randomizer family, the one that
gives the smallest ε_c (resp. the largest ε_l, i.e. the least local noise).

Families: ``"generic"`` (any ε_l-LDP randomizer) and ``"krr"`` (k-ary randomized response,
which outputs a uniform value with probability λ = k/(e^{ε_l}+k−1), else the true value;
binary randomized response is ``"krr"`` with k = 2). A bound for ``"generic"`` applies to every
family.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .._base import MAX_EPSILON, check_delta, check_epsilon, check_n
from .._errors import BoundNotApplicable, ParameterError

__all__ = [
    "BOUNDS",
    "AmplificationBound",
    "BoundMethod",
    "available_bounds",
    "krr_epsilon_from_lambda",
    "krr_lambda",
    "largest_local",
    "register_bound",
    "resolve_bound",
    "tightest_central",
]


def krr_lambda(epsilon_local: float, k: int) -> float:
    """Probability λ that k-RR outputs a uniform value, so that it is exactly ε_l-LDP.

    Args:
        epsilon_local: ε_l, in (0, MAX_EPSILON].
        k: domain size, at least 2.

    Returns:
        λ = k/(e^{ε_l} + k − 1), in (0, 1).

    Raises:
        ParameterError: ε_l out of range or k not an integer >= 2.
    """
    # Any ε_l > 0 (an inverse may return one below MIN_EPSILON: almost no signal left).
    if not 0.0 < epsilon_local <= MAX_EPSILON:  # false for NaN
        raise ParameterError(
            f"epsilon_local must lie in (0, {MAX_EPSILON:g}], got {epsilon_local!r}"
        )
    k = check_n(k, "k", 2)
    return k / (math.exp(epsilon_local) + k - 1)


def krr_epsilon_from_lambda(lam: float, k: int) -> float:
    """ε_l of k-RR that outputs a uniform value w.p. λ: ln(1 + k(1−λ)/λ), for λ in (0, 1].

    Args:
        lam: probability λ of the uniform output, in (0, 1].
        k: domain size, at least 2.

    Returns:
        ε_l (0 at λ = 1).

    Raises:
        ParameterError: λ outside (0, 1] or k not an integer >= 2.
    """
    k = check_n(k, "k", 2)
    if not 0.0 < lam <= 1.0:  # false for NaN
        raise ParameterError(f"lambda must lie in (0, 1], got {lam!r}")
    return math.log1p(k * (1.0 - lam) / lam)


#: How a bound's value relates to the exact ε of the shuffled mechanism (the worst case over
#: the other users' data), as :meth:`AmplificationBound.method_at` states it: ``"exact"``
#: (that ε itself), ``"certified"`` (a proven upper bound at most a stated relative tolerance
#: above it) or ``"bound"`` (a proven upper bound; nothing is claimed about its slack).
BoundMethod = Literal["exact", "certified", "bound"]


@dataclass(frozen=True, slots=True)
class AmplificationBound:
    """An amplification theorem as a pair of maps, with the randomizers it covers.

    Attributes:
        name: registry name (``thm1_erlingsson``, ...).
        families: randomizer families the theorem covers (``"generic"`` covers all).
        citation: paper and equation.
        forward: (ε_l, n, δ, k) → ε_c; raises BoundNotApplicable outside its range.
        inverse: (ε_c, n, δ, k) → ε_l; raises BoundNotApplicable outside its range.
        pure: the bound is proven at δ = 0 (pure DP), so δ = 0 is a valid request; every
            other bound refuses δ = 0 with :class:`~protocols.NeedsPositiveDelta` (a
            BoundNotApplicable) naming itself. Only ``local_dp`` is pure.
        exact_up_to: up to this many users (victim included) ``forward`` is the exact ε of
            the shuffled mechanism, not only a bound on it; None for a theorem's bound.
        certified_tolerance: past ``exact_up_to`` users, ``forward`` is a proven upper bound
            at most this much (relative) above the exact ε; None if nothing is claimed there.
    """

    name: str
    families: frozenset[str]
    citation: str
    forward: Callable[[float, int, float, int], float]
    inverse: Callable[[float, int, float, int], float]
    pure: bool = False
    exact_up_to: int | None = None
    certified_tolerance: float | None = None

    def method_at(self, n: int) -> tuple[BoundMethod, float | None]:
        """How this bound's value at n users relates to the exact ε of the mechanism.

        The forward value is the exact ε (``"exact"``), a proven upper bound at most the
        tolerance (relative) above it (``"certified"``), or a proven upper bound of unstated
        slack (``"bound"``: every theorem). In the inverse direction the ε_l returned is the
        largest whose forward value meets the target, found to the same standard: for
        ``"certified"``, a proven ε_l within about the tolerance below the largest exact one.

        Args:
            n: number of users, the victim included.

        Returns:
            ``("exact", 0.0)``, ``("certified", tolerance)`` or ``("bound", None)``.

        Raises:
            ParameterError: n is not an integer >= 1.
        """
        n = check_n(n)
        if self.exact_up_to is not None and n <= self.exact_up_to:
            return "exact", 0.0
        if self.certified_tolerance is not None:
            return "certified", self.certified_tolerance
        return "bound", None

    def applies_to(self, family: str) -> bool:
        """Whether the theorem covers randomizers of ``family``.

        Args:
            family: randomizer family (``"krr"``, ``"generic"``, ...).

        Returns:
            True if it is one of :attr:`families`, or if the theorem covers every family.
        """
        return "generic" in self.families or family in self.families

    def epsilon_central(self, *, epsilon_local: float, n: int, delta: float, k: int = 2) -> float:
        """ε_c guaranteed after shuffling n reports of an ε_l-LDP randomizer, at most ε_l:
        the shuffle is post-processing of ε_l-LDP reports (a closed form such as Thm 3's
        exceeds ε_l at tiny ε_l: 0.70 at ε_l = 1e-5, n = 1000).

        Args:
            epsilon_local: ε_l of each user's randomizer.
            n: number of users.
            delta: target δ.
            k: domain of the k-RR randomizer.

        Returns:
            ε_c, at most ε_l.

        Raises:
            BoundNotApplicable: the theorem does not hold at these parameters.
            ParameterError: a parameter out of range.
        """
        eps = check_epsilon(epsilon_local, "epsilon_local")
        args = (eps, check_n(n), self._delta(delta), check_n(k, "k", 2))
        return min(eps, _evaluated(self, False, *args))

    def epsilon_local(self, *, epsilon_central: float, n: int, delta: float, k: int = 2) -> float:
        """Largest ε_l whose shuffle of n reports this theorem proves (ε_c, δ)-DP.

        Args:
            epsilon_central: target ε_c.
            n: number of users.
            delta: target δ.
            k: domain of the k-RR randomizer.

        Returns:
            ε_l.

        Raises:
            BoundNotApplicable: the theorem does not reach ε_c at these parameters.
            ParameterError: a parameter out of range.
        """
        eps = check_epsilon(epsilon_central, "epsilon_central")
        return _evaluated(self, True, eps, check_n(n), self._delta(delta), check_n(k, "k", 2))

    def _delta(self, delta: float) -> float:
        return check_delta(
            delta, pure=self.pure, who=self.name, why="it is an approximate-DP bound"
        )


#: Bound evaluations kept in this process, both directions (see :func:`_evaluated`).
_EVALUATIONS_KEPT = 4096


@functools.lru_cache(maxsize=_EVALUATIONS_KEPT)
def _evaluate(
    bound: AmplificationBound, inverse: bool, eps: float, n: int, delta: float, k: int
) -> tuple[float, BoundNotApplicable | None]:
    """One evaluation of a bound's map, or its refusal, kept for the next identical call."""
    try:
        return (bound.inverse if inverse else bound.forward)(eps, n, delta, k), None
    except BoundNotApplicable as exc:
        return math.nan, exc


def _evaluated(
    bound: AmplificationBound, inverse: bool, eps: float, n: int, delta: float, k: int
) -> float:
    """``bound.forward`` (or ``bound.inverse``) at these arguments, computed once per process.

    Protocol construction, the collusion audit and ``esa amplify`` ask the same bounds the
    same questions (a construction asks for the inverse, then checks it with the forward
    map; an audit builds the protocol again without its fakes): each distinct question is
    answered once and kept, refusals included. The key is the bound itself and its exact
    arguments, as floats and ints (no rounding: a cached answer is the answer to exactly
    that question); the maps are pure functions of them. The numerical accountants also
    keep their own caches on rounded arguments, for the root finds inside them.
    """
    value, refusal = _evaluate(bound, inverse, float(eps), int(n), float(delta), int(k))
    if refusal is not None:
        raise refusal.with_traceback(None)
    return value


BOUNDS: dict[str, AmplificationBound] = {}


def register_bound(bound: AmplificationBound) -> AmplificationBound:
    """Add a bound to :data:`BOUNDS` (name must be new).

    Args:
        bound: the bound, under its :attr:`~AmplificationBound.name`.

    Returns:
        ``bound`` itself (so the call can wrap a definition).

    Raises:
        ParameterError: a bound of that name is already registered.
    """
    if bound.name in BOUNDS:
        raise ParameterError(f"bound {bound.name!r} is already registered")
    BOUNDS[bound.name] = bound
    return bound


def _invert_increasing(
    forward: Callable[[float], float], target: float, eps_max: float, what: str
) -> float:
    """Largest ε_l ≤ eps_max with forward(ε_l) ≤ target, for a continuous increasing map."""
    if forward(eps_max) <= target:
        return eps_max
    lo = 1e-12
    if forward(lo) > target:
        raise BoundNotApplicable(f"{what}: epsilon_central={target:g} is below what any ε_l gives")
    # Imported here: scipy costs ~0.5 s at start-up and most runs never invert a bound.
    from scipy.optimize import brentq

    return float(brentq(lambda e: forward(e) - target, lo, eps_max, xtol=1e-12, rtol=1e-12))


# --- No amplification: post-processing -------------------------------------------------
# The shuffled multiset is a function of the n ε_l-LDP reports, and changing one user's input
# changes only that user's report, so it is (ε_l, 0)-DP whatever n is. Always applicable: the
# floor every other bound must beat, and what a protocol falls back to when n is too small
# for any amplification theorem.


def _identity(eps: float, n: int, delta: float, k: int) -> float:
    return eps


register_bound(
    AmplificationBound(
        name="local_dp",
        families=frozenset({"generic"}),
        citation="post-processing of ε_l-LDP reports (no amplification)",
        forward=_identity,
        inverse=_identity,
        pure=True,
    )
)


# --- Theorem 1: Erlingsson, Feldman, Mironov, Raghunathan, Talwar, Thakurta (SODA'19) -------
# Survey eq. (3): for n > 1000, δ ∈ (0, 0.01), ε_l ∈ (0, 1/2): ε_c = 12 ε_l √(ln(1/δ)/n).
# The endpoint ε_l = 1/2 is accepted: it follows from the open interval by a limit argument.
# Let R be (1/2)-LDP and R_t(x) = (1 − t) R(x) + t R(x₀) for a fixed x₀ and t ∈ (0, 1). With
# s = t e^{−1/2}/(1 − t) > 0, every likelihood ratio of R_t is at most (e^{1/2} + s)/(1 + s)
# (mixing a common law in only lowers it, and R(x₀) ≥ e^{−1/2} R(x')), so R_t is ε_t-LDP
# with ε_t < 1/2 and the theorem applies to it: its shuffle is (ε_c(ε_t), δ)-DP with
# ε_c(ε_t) ≤ ε_c(1/2), the formula being increasing in ε_l. Each user's R_t(x) is within
# t of R(x) in total variation, so the shuffled outputs P, P' (of R) and P_t, P'_t (of R_t)
# are within nt: for every event S,
#     P(S) ≤ P_t(S) + nt ≤ e^{ε_c(1/2)} (P'(S) + nt) + δ + nt,
# and t → 0 gives P(S) ≤ e^{ε_c(1/2)} P'(S) + δ. n > 1000 and δ < 0.01 stay strict.


def _thm1_check(n: int, delta: float) -> None:
    if n <= 1000:
        raise BoundNotApplicable(f"thm1_erlingsson needs n > 1000, got n={n}")
    if not delta < 0.01:
        raise BoundNotApplicable(f"thm1_erlingsson needs delta < 0.01, got delta={delta:g}")


def _thm1_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    _thm1_check(n, delta)
    if not eps_l <= 0.5:
        raise BoundNotApplicable(f"thm1_erlingsson needs epsilon_local <= 0.5, got {eps_l:g}")
    return 12.0 * eps_l * math.sqrt(math.log(1.0 / delta) / n)


def _thm1_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    _thm1_check(n, delta)
    eps_l = eps_c / (12.0 * math.sqrt(math.log(1.0 / delta) / n))
    # The theorem holds for ε_l ≤ 1/2 (the endpoint by the limit argument above).
    return min(eps_l, 0.5)


register_bound(
    AmplificationBound(
        name="thm1_erlingsson",
        families=frozenset({"generic"}),
        citation="Erlingsson et al., SODA'19 (arXiv 1811.12469); survey Thm 1, eq. (3)",
        forward=_thm1_forward,
        inverse=_thm1_inverse,
    )
)


# --- Theorem 2: Feldman, McMillan, Talwar (FOCS'21), explicit closed form -----------------
# arXiv 2012.12803 Thm 3.1 / Cor. : for ε_l ≤ ln(n/(16 ln(2/δ))),
#   ε_c = ln(1 + (e^{ε_l}−1)/(e^{ε_l}+1) · (8√(e^{ε_l} ln(4/δ))/√n + 8e^{ε_l}/n)).


def _fmt_eps_max(n: int, delta: float) -> float:
    arg = n / (16.0 * math.log(2.0 / delta))
    if arg <= 1.0:
        raise BoundNotApplicable(
            f"thm2_fmt_closed_form needs n > 16 ln(2/δ) = {16 * math.log(2 / delta):.1f}, got n={n}"
        )
    return math.log(arg)


def _fmt_closed(eps_l: float, n: int, delta: float) -> float:
    e = math.exp(eps_l)
    inner = 8.0 * math.sqrt(e * math.log(4.0 / delta)) / math.sqrt(n) + 8.0 * e / n
    return math.log1p((e - 1.0) / (e + 1.0) * inner)


def _thm2_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    eps_max = _fmt_eps_max(n, delta)
    if eps_l > eps_max:
        raise BoundNotApplicable(
            f"thm2_fmt_closed_form needs epsilon_local <= ln(n/(16 ln(2/δ))) = {eps_max:.4g}, "
            f"got {eps_l:g}"
        )
    return _fmt_closed(eps_l, n, delta)


def _thm2_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    eps_max = _fmt_eps_max(n, delta)
    return _invert_increasing(
        lambda e: _fmt_closed(e, n, delta), eps_c, eps_max, "thm2_fmt_closed_form"
    )


register_bound(
    AmplificationBound(
        name="thm2_fmt_closed_form",
        families=frozenset({"generic"}),
        citation="Feldman, McMillan, Talwar, FOCS'21 (arXiv 2012.12803) Thm 3.1; survey Thm 2",
        forward=_thm2_forward,
        inverse=_thm2_inverse,
    )
)


# --- Theorem 3: Cheu, Smith, Ullman, Zeber, Zhilyaev (Eurocrypt'19), binary RR -------------
# Survey eq. (6): if each user outputs a uniform bit w.p. λ ∈ [14 ln(4/δ)/n, 1], else its bit,
#   ε_c = √(32 ln(4/δ) / (λ n)).   With λ = 2/(e^{ε_l}+1) this is ε_l-LDP.


def _thm3_check_k(k: int) -> None:
    if k != 2:
        raise BoundNotApplicable(f"thm3_cheu covers binary randomized response only, got k={k}")


def _thm3_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    _thm3_check_k(k)
    lam = krr_lambda(eps_l, 2)
    lam_min = 14.0 * math.log(4.0 / delta) / n
    if lam < lam_min:
        raise BoundNotApplicable(
            f"thm3_cheu needs λ = 2/(e^ε_l+1) >= 14 ln(4/δ)/n = {lam_min:.4g}; "
            f"epsilon_local={eps_l:g} gives λ={lam:.4g}"
        )
    return math.sqrt(32.0 * math.log(4.0 / delta) / (lam * n))


def _thm3_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    _thm3_check_k(k)
    lam = 32.0 * math.log(4.0 / delta) / (n * eps_c**2)
    lam = max(lam, 14.0 * math.log(4.0 / delta) / n)
    if lam >= 1.0:
        raise BoundNotApplicable(
            f"thm3_cheu cannot reach epsilon_central={eps_c:g} at n={n}: it needs λ={lam:.3g} >= 1"
        )
    return krr_epsilon_from_lambda(lam, 2)


register_bound(
    AmplificationBound(
        name="thm3_cheu",
        families=frozenset({"krr"}),
        citation="Cheu et al., Eurocrypt'19 (arXiv 1808.01394), shuffled binary randomized "
        "response; survey Thm 3, eq. (6)",
        forward=_thm3_forward,
        inverse=_thm3_inverse,
    )
)


# --- Theorem 4: Balle, Bell, Gascón, Nissim (Crypto'19), k-ary RR privacy blanket ----------
# arXiv 1903.02837 Thm 3.1; survey eq. (8): for ε_c ≤ 1, k-RR with uniform probability
#   λ = max{14 k ln(2/δ) / ((n−1) ε_c²), 27 k / ((n−1) ε_c)}  is (ε_c, δ)-DP after shuffling.
# A larger λ (more noise) stays private, so ε_l → ε_c takes the smallest ε_c whose λ fits.


def _thm4_lambda(eps_c: float, n: int, delta: float, k: int) -> float:
    return max(
        14.0 * k * math.log(2.0 / delta) / ((n - 1) * eps_c**2), 27.0 * k / ((n - 1) * eps_c)
    )


def _thm4_forward(eps_l: float, n: int, delta: float, k: int) -> float:
    if n < 2:
        raise BoundNotApplicable("thm4_balle needs n >= 2")
    lam = krr_lambda(eps_l, k)
    eps_c = max(
        math.sqrt(14.0 * k * math.log(2.0 / delta) / ((n - 1) * lam)), 27.0 * k / ((n - 1) * lam)
    )
    if eps_c > 1.0:
        raise BoundNotApplicable(
            f"thm4_balle holds for epsilon_central <= 1 only; epsilon_local={eps_l:g} at n={n}, "
            f"k={k} would need epsilon_central={eps_c:.4g}"
        )
    return eps_c


def _thm4_inverse(eps_c: float, n: int, delta: float, k: int) -> float:
    if n < 2:
        raise BoundNotApplicable("thm4_balle needs n >= 2")
    if eps_c > 1.0:
        raise BoundNotApplicable(f"thm4_balle holds for epsilon_central <= 1, got {eps_c:g}")
    lam = _thm4_lambda(eps_c, n, delta, k)
    if lam >= 1.0:
        raise BoundNotApplicable(
            f"thm4_balle cannot reach epsilon_central={eps_c:g} at n={n}, k={k}: "
            f"it needs λ={lam:.3g} >= 1 (no signal left)"
        )
    return krr_epsilon_from_lambda(lam, k)


register_bound(
    AmplificationBound(
        name="thm4_balle",
        families=frozenset({"krr"}),
        citation="Balle, Bell, Gascón, Nissim, Crypto'19 (arXiv 1903.02837) Thm 3.1; "
        "survey Thm 4, eq. (8)",
        forward=_thm4_forward,
        inverse=_thm4_inverse,
    )
)


def available_bounds(family: str) -> list[AmplificationBound]:
    """Every registered bound that covers ``family``, in registration order.

    Args:
        family: randomizer family (``"krr"``, ``"generic"``, ...).

    Returns:
        The bounds whose :meth:`AmplificationBound.applies_to` accepts ``family`` (empty if none).
    """
    return [b for b in BOUNDS.values() if b.applies_to(family)]


def resolve_bound(bound: str | None, family: str) -> list[AmplificationBound]:
    """The bounds an accountant chooses among: every one that covers ``family`` (``bound``
    None), or only the one ``bound`` names (a forced bound).

    :func:`tightest_central` and :func:`largest_local` take ``bound=`` and go through here,
    so a forced bound is held to the same checks as an automatic one: it must cover the
    family, hold at the given n, δ and k, and (for ε_c → ε_l) prove the target with its own
    forward map.

    Args:
        bound: name of a registered bound, or None for every bound that covers ``family``.
        family: randomizer family (``"krr"``, ``"generic"``, ...).

    Returns:
        The candidate bounds, in registration order.

    Raises:
        ParameterError: no bound of that name is registered.
        BoundNotApplicable: the named bound does not cover ``family``.
    """
    if bound is None:
        return available_bounds(family)
    try:
        named = BOUNDS[bound]
    except KeyError:
        raise ParameterError(
            f"unknown bound {bound!r}; choose one of: {', '.join(sorted(BOUNDS))}"
        ) from None
    if not named.applies_to(family):
        raise BoundNotApplicable(f"bound {bound!r} does not cover {family} randomizers")
    return [named]


def _not_applicable(bound: str | None, what: str, reasons: list[str]) -> BoundNotApplicable:
    head = f"bound {bound!r} does not apply" if bound is not None else what
    return BoundNotApplicable(head + ": " + "; ".join(reasons))


def _settle(
    bound: AmplificationBound, eps_l: float, target: float, *, n: int, delta: float, k: int
) -> float | None:
    """The largest ε_l within 10^-9 (relative) below ``eps_l`` whose forward map proves
    ``target``, or None."""
    step = max(eps_l * 1e-16, 1e-300)
    while step <= eps_l * 1e-9:
        trial = eps_l - step
        try:
            if bound.epsilon_central(epsilon_local=trial, n=n, delta=delta, k=k) <= target:
                return trial
        except BoundNotApplicable:
            return None
        step *= 4.0
    return None


def tightest_central(
    *,
    epsilon_local: float,
    n: int,
    delta: float,
    family: str,
    k: int = 2,
    bound: str | None = None,
) -> tuple[float, str]:
    """Smallest ε_c any applicable bound proves, and that bound's name.

    Args:
        epsilon_local: ε_l of each user's randomizer.
        n: number of users.
        delta: target δ.
        family: randomizer family (``"krr"``, ``"generic"``, ...).
        k: domain of the k-RR randomizer.
        bound: force this registered bound (:func:`resolve_bound`); None takes the tightest.

    Returns:
        ``(epsilon_central, bound_name)``: the smallest proven ε_c and the bound that proves
        it.

    Raises:
        ParameterError: ``bound`` names no registered bound.
        BoundNotApplicable: if no registered bound (or not the forced one) covers this
            configuration.

    Example:
        Binary randomized response at ε_l = 2 among 10 000 users:

        >>> from protocols import tightest_central
        >>> eps_c, bound = tightest_central(
        ...     epsilon_local=2.0, n=10_000, delta=1e-6, family="krr", k=2
        ... )
        >>> bound, round(eps_c, 3)
        ('binary_rr_exact', 0.087)
    """
    best: tuple[float, str] | None = None
    reasons = []
    for candidate in resolve_bound(bound, family):
        try:
            eps_c = candidate.epsilon_central(epsilon_local=epsilon_local, n=n, delta=delta, k=k)
        except BoundNotApplicable as exc:
            reasons.append(str(exc))
            continue
        if best is None or eps_c < best[0]:
            best = (eps_c, candidate.name)
    if best is None:
        raise _not_applicable(bound, "no amplification bound applies", reasons)
    return best


def largest_local(
    *,
    epsilon_central: float,
    n: int,
    delta: float,
    family: str,
    k: int = 2,
    bound: str | None = None,
) -> tuple[float, str]:
    """Largest ε_l (least local noise) any applicable bound allows for target ε_c.

    The answer is checked with the same bound's forward map: a protocol built from it states
    the target ε_c, so forward(ε_l) ≤ ε_c must hold, and a bound whose numerical inverse
    overshoots (at large ε a root find can land on the wrong side) is passed over for the
    next one. A forced ``bound`` gets the same check: having no next bound to fall back on,
    an answer a rounding error above the target is stepped down (at most 10^-9 relative)
    until its forward map holds; past that it fails with a :class:`BoundNotApplicable`
    instead of configuring a protocol that states more than the target.

    Args:
        epsilon_central: target ε_c.
        n: number of users.
        delta: target δ.
        family: randomizer family (``"krr"``, ``"generic"``, ...).
        k: domain of the k-RR randomizer.
        bound: force this registered bound (:func:`resolve_bound`); None takes the tightest.

    Returns:
        ``(epsilon_local, bound_name)``: the largest proven ε_l and the bound that proves it.

    Raises:
        ParameterError: ``bound`` names no registered bound.
        BoundNotApplicable: if no registered bound (or not the forced one) reaches the target.
    """
    candidates: list[tuple[float, AmplificationBound]] = []
    reasons = []
    for candidate in resolve_bound(bound, family):
        try:
            eps_l = candidate.epsilon_local(epsilon_central=epsilon_central, n=n, delta=delta, k=k)
        except BoundNotApplicable as exc:
            reasons.append(str(exc))
            continue
        candidates.append((eps_l, candidate))
    for eps_l, candidate in sorted(candidates, key=lambda c: -c[0]):
        try:
            proven = candidate.epsilon_central(epsilon_local=eps_l, n=n, delta=delta, k=k)
        except BoundNotApplicable as exc:
            reasons.append(str(exc))
            continue
        if proven <= epsilon_central:
            return eps_l, candidate.name
        if bound is not None:
            # A forced bound has no next candidate to fall back on: where its inverse lands
            # a rounding error above the target, step down to the largest ε_l its forward
            # map accepts (at most 10^-9 relative below the inverse); further, it fails.
            settled = _settle(candidate, eps_l, epsilon_central, n=n, delta=delta, k=k)
            if settled is not None:
                return settled, candidate.name
        reasons.append(
            f"{candidate.name}'s inverse gave epsilon_local={eps_l:.10g}, whose forward map "
            f"proves only {proven:.10g}"
        )
    raise _not_applicable(
        bound,
        f"no amplification bound reaches epsilon_central={epsilon_central:g} at n={n}, "
        f"delta={delta:g}",
        reasons,
    )
