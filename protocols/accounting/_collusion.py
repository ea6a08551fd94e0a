"""Collusion scenarios: which ε one user keeps when parties collude with the analyzer.

The privacy accounting of the collusion audit (see docs/design.md). A configuration is n
users with an ε_l-LDP randomizer, m shufflers in a chain each adding n_r uniform fake
reports, k colluding users (their inputs and randomness known to the analyzer) and c
colluding shufflers. The analyzer sees the shuffled multiset; what still protects one
honest user (the victim) is:

* the reports of the honest users other than the victim that the adversary cannot remove
  (n − 1 − k of them), shuffled together by at least one honest shuffler, and
* the fakes of the honest shufflers (colluding shufflers' fakes are known and removed);
* if every shuffler colludes, nothing but the local randomizer: ε_l.

Fakes are accounted as what they are: n_r extra uniform reports. For k-RR-type randomizers
(``family="krr"``) a uniform report is exactly a blanket report, so the honest fakes enter
the tight accountants of :mod:`protocols.accounting` exactly. For generic ε_l-LDP randomizers a
uniform message need not resemble any user's report, so fakes are not counted (conservative)
and the explanation says so.

MURS's claim (Wang et al. VLDB'20, arXiv 1908.11515): against the analyzer + m − 1
shufflers + all other users, the honest shuffler's n_r fakes alone still give a blanket. Here
it is a number computed from the fakes alone (:func:`protocols.krr_fakes_only_epsilon`, exact),
printed next to MURS's own formula √(14 ln(2/δ)/((n−1)/(e^{ε_l}+d−1) + n_r/d)) for comparison.

Lower bounds. A scenario's ``epsilon_lower`` is a lower bound AT THE AUDIT'S δ: the
mechanism is not (ε', δ)-DP for any ε' below it. For a neighbouring pair with output laws P,
Q every event E with P(E) > δ gives ε ≥ ln((P(E) − δ)/Q(E)); the exact ε(δ) of the pair is
the largest such value over both directions. Only a protocol's
``honest_users_lower(honest_others, fakes=…, delta=…)`` supplies one, for the scenario's
honest users AND honest fakes (:func:`pair_lower_epsilon` turns computed laws into it). A
pure-DP (δ = 0) likelihood ratio far in the tail is no lower bound at δ > 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._base import HonestUsersBound, check_delta, check_epsilon, check_n
from .._errors import BoundNotApplicable, ParameterError
from ._blanket import krr_fakes_only_epsilon
from ._shuffled import shuffled_epsilon

__all__ = [
    "CollusionConfig",
    "ScenarioBound",
    "collusion_scenarios",
    "murs_formula",
    "pair_lower_epsilon",
    "resolve_colluding_users",
]

#: What a protocol's ``honest_users_lower`` returns: (ε lower bound at δ, the neighbouring
#: pair it was computed for), or ``None``.
HonestLower = Callable[[int, int, float], tuple[float, str] | None]

#: Relative round-off allowed for in :func:`pair_lower_epsilon`'s sums of non-negative terms.
_SUM_ROUNDOFF = 1e-12


def pair_lower_epsilon(p: npt.ArrayLike, q: npt.ArrayLike, delta: float) -> float:
    """A lower bound on the exact ε(δ) of a pair of laws P, Q from truncated laws p ≤ P, q ≤ Q.

    ``p`` and ``q`` are the probabilities of P and Q on the same cells (any shape), each at
    most the true one (e.g. a law computed on a truncated support with non-negative sums).
    The mass q leaves out, m = 1 − Σq, can sit in any cell, so for every event E of the
    cells P(E) ≥ p(E) and Q(E) ≤ q(E) + m, and

        ε(δ) ≥ ln((p(E) − δ)/(q(E) + m))   whenever p(E) > δ.

    The events tried are the level sets {ln p − ln q > t}, which attain the exact ε(δ) when
    nothing is left out (m = 0); the best over them and over both directions is returned
    (0 if no event has p(E) > δ). The cumulative sums are moved by 10⁻¹² of themselves
    against the bound, for their round-off.

    Args:
        p: probabilities of P on the cells, each at most the true one.
        q: probabilities of Q on the same cells, each at most the true one.
        delta: δ.

    Returns:
        A lower bound ε ≥ 0 on the exact ε(δ) of (P, Q).

    Raises:
        ParameterError: ``p`` and ``q`` differ in shape, or δ is out of range.
    """
    delta = check_delta(delta, pure=True)  # ε(0): the largest privacy loss
    pp = np.clip(np.asarray(p, dtype=np.float64).ravel(), 0.0, None)
    qq = np.clip(np.asarray(q, dtype=np.float64).ravel(), 0.0, None)
    if pp.shape != qq.shape:
        raise ParameterError(f"p and q must have one shape, got {pp.shape}, {qq.shape}")
    best = 0.0
    for a, b in ((pp, qq), (qq, pp)):
        # Σb carries a round-off of at most (cells)·2⁻⁵² (pairwise summation of terms ≤ 1).
        missing = max(0.0, 1.0 - float(b.sum())) + b.size * float(np.finfo(np.float64).eps)
        keep = a > 0.0
        a_k, b_k = a[keep], b[keep]
        if a_k.size == 0:
            continue
        with np.errstate(divide="ignore"):
            llr = np.log(a_k) - np.log(b_k)  # +inf where b = 0
        order = np.argsort(-llr, kind="stable")
        ca = np.cumsum(a_k[order]) * (1.0 - _SUM_ROUNDOFF) - delta
        cb = np.cumsum(b_k[order]) * (1.0 + _SUM_ROUNDOFF) + missing
        ok = ca > 0.0
        if ok.any():
            best = max(best, float(np.max(np.log(ca[ok]) - np.log(cb[ok]))))
    return best


def murs_formula(
    *, epsilon_local: float, n_honest_others: int, n_fakes: int, delta: float, d: int
) -> float:
    """MURS's own bound √(14 ln(2/δ) / ((n−1)/(e^{ε_l}+d−1) + n_r/d)) (survey eq. (8) form).

    ``n_honest_others`` plays the role of n − 1. Returns ``inf`` when the blanket is empty.
    No validity range is enforced: this is printed for comparison only.

    Args:
        epsilon_local: ε_l of the k-RR randomizer.
        n_honest_others: honest users other than the victim (n − 1 in the formula).
        n_fakes: fake reports the adversary cannot tell apart (n_r).
        delta: target δ.
        d: domain of the k-RR randomizer.

    Returns:
        The formula's ε, or ``inf`` when there are neither honest others nor fakes.
    """
    beta = n_honest_others / (math.exp(epsilon_local) + d - 1.0) + n_fakes / d
    if beta <= 0:
        return math.inf
    return math.sqrt(14.0 * math.log(2.0 / delta) / beta)


def resolve_colluding_users(value: float, n: int) -> int:
    """Colluding users as a count: an integer ≥ 1 as is, a fraction in [0, 1) of the n − 1.

    Args:
        value: a count (integer ≥ 1) or a fraction in [0, 1) of the other users.
        n: number of users.

    Returns:
        The number of colluding users, in [0, n − 1].

    Raises:
        ParameterError: negative, or more than the n − 1 other users.
    """
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ParameterError(f"colluding users must be a count or a fraction >= 0, got {value!r}")
    count = round(v * (n - 1)) if v < 1.0 else int(v)
    if v >= 1.0 and v != int(v):
        raise ParameterError(f"colluding users must be an integer count >= 1, got {value!r}")
    if count > n - 1:
        raise ParameterError(f"colluding users={count} exceeds the n-1={n - 1} other users")
    return count


@dataclass(frozen=True, slots=True)
class CollusionConfig:
    """What is audited.

    Attributes:
        family: ``"krr"`` (k-RR-type randomizer over ``k`` values; fakes counted exactly) or
            ``"generic"`` (any ε_l-LDP randomizer; fakes not counted).
        k: k-RR domain (ignored for generic).
        n: users.
        epsilon_local: ε_l of one user's report(s); ``inf`` if the reports alone give none
            (Split-Mix shares).
        delta: δ.
        shufflers: m ≥ 1.
        fake_reports: n_r, uniform fakes per shuffler.
        colluding_users: users (other than the victim) colluding with the analyzer.
        colluding_shufflers: c ∈ [0, m].
        epsilon_claimed: the protocol's own no-collusion claim (used when ε_l is ``inf``).
        claimed_bound: the name of that claim's theorem.
        epsilon_claimed_without_fakes: the same claim for the protocol configured with no
            fakes (None if it does not run without). It holds in every scenario whose other
            users are all honest, whatever fakes remain: an honest shuffler's fakes are
            independent of the data, so adding them is post-processing.
        honest_bound: the protocol's own accountant for h honest other users
            (:meth:`ShuffleProtocol.honest_users_bound`), used in every scenario with an
            honest shuffler where its upper bound is tighter than the generic bound.
        honest_lower: the protocol's own lower bound at δ, called as
            ``honest_lower(h, fakes, delta)`` for h honest other users and ``fakes`` honest
            fakes (a protocol's ``honest_users_lower``): (ε, the neighbouring pair) or
            ``None``. It fills ``epsilon_lower``; with every shuffler colluding it is called
            with h = 0 and no fakes (the victim's own messages, which the traced view shows).
    """

    family: str
    k: int
    n: int
    epsilon_local: float
    delta: float
    shufflers: int = 1
    fake_reports: int = 0
    colluding_users: int = 0
    colluding_shufflers: int = 0
    epsilon_claimed: float | None = None
    claimed_bound: str = ""
    epsilon_claimed_without_fakes: float | None = None
    honest_bound: Callable[[int], HonestUsersBound | None] | None = None
    honest_lower: HonestLower | None = None

    def __post_init__(self) -> None:
        check_n(self.n, "n", 1)
        check_n(self.k, "k", 2)
        if not self.epsilon_local > 0:
            raise ParameterError(f"epsilon_local must be > 0, got {self.epsilon_local!r}")
        # δ = 0 (a pure protocol): only pure bounds apply, local_dp and its own accountant.
        check_delta(self.delta, pure=True)
        check_n(self.shufflers, "shufflers", 1)
        check_n(self.fake_reports, "fake_reports", 0)
        check_n(self.colluding_users, "colluding_users", 0)
        if self.colluding_users > self.n - 1:
            raise ParameterError(
                f"colluding_users={self.colluding_users} exceeds the n-1={self.n - 1} other users"
            )
        if not 0 <= self.colluding_shufflers <= self.shufflers:
            raise ParameterError(
                f"colluding_shufflers must lie in [0, {self.shufflers}], "
                f"got {self.colluding_shufflers}"
            )


@dataclass(frozen=True, slots=True)
class ScenarioBound:
    """One collusion scenario and the ε the victim keeps.

    Attributes:
        scenario: short name (``none``, ``all shufflers``, ``m-1 shufflers`` …).
        honest_users: honest users other than the victim whose reports hide it.
        honest_fakes: fakes unknown to the adversary.
        epsilon_upper: proven upper bound on ε (``inf``: none).
        bound: accountant or theorem that gives it.
        explanation: one plain line: what still protects the user.
        epsilon_lower: a lower bound on ε at the configuration's δ, if the protocol gives one
            (``CollusionConfig.honest_lower``; ``esa audit --measure`` may raise it).
        murs_formula: MURS's own formula for the same honest users/fakes (k-RR only).
        colluding_users: users colluding in this scenario.
        colluding_shufflers: shufflers colluding in this scenario.
    """

    scenario: str
    honest_users: int
    honest_fakes: int
    epsilon_upper: float
    bound: str
    explanation: str
    epsilon_lower: float | None = None
    murs_formula: float | None = None
    colluding_users: int = 0
    colluding_shufflers: int = 0


def _upper(cfg: CollusionConfig, honest_users: int, honest_fakes: int) -> tuple[float, str]:
    if not math.isfinite(cfg.epsilon_local):
        return math.inf, "none (reports alone give no local guarantee)"
    eps0 = check_epsilon(cfg.epsilon_local, "epsilon_local")
    if cfg.delta == 0.0:  # every amplification bound is approximate DP
        return eps0, "local_dp"
    if honest_users == 0 and cfg.family == "krr" and honest_fakes > 0:
        eps = krr_fakes_only_epsilon(eps0, honest_fakes, cfg.delta, k=cfg.k)
        if eps < eps0:
            return eps, "krr_fakes_exact"
        return eps0, "local_dp"
    try:
        return shuffled_epsilon(
            eps0, honest_users, cfg.delta, family=cfg.family, k=cfg.k, n_fakes=honest_fakes
        )
    except BoundNotApplicable:
        return eps0, "local_dp"


def _protects(cfg: CollusionConfig, users: int, fakes: int) -> str:
    parts = []
    if users:
        parts.append(f"{users} honest users")
    if fakes and cfg.family == "krr":
        parts.append(f"{fakes} honest fakes")
    elif fakes:
        parts.append(f"({fakes} fakes not counted: generic randomizer)")
    if not parts:
        return "only the local randomizer"
    return "hidden among " + " + ".join(parts)


def _claim_for(cfg: CollusionConfig, name: str, users: int) -> float | None:
    """The protocol's own claim where it holds: as configured with no collusion; without
    its fakes wherever every other user is honest (colluding shufflers only remove the
    fakes they added themselves)."""
    claims = [cfg.epsilon_claimed] if name == "none" else []
    if users == cfg.n - 1:
        claims.append(cfg.epsilon_claimed_without_fakes)
    known = [c for c in claims if c is not None]
    return min(known) if known else None


def collusion_scenarios(cfg: CollusionConfig) -> list[ScenarioBound]:
    """Every collusion scenario for this configuration, in a fixed order.

    Scenarios: ``none``; ``all shufflers``; ``m-1 shufflers``; ``k users``;
    ``c shufflers + k users`` (the configured collusion); ``m-1 shufflers + k users``;
    ``m-1 shufflers + all other users`` (MURS's claim). Duplicates are dropped.

    Args:
        cfg: the deployment: users, shufflers, fakes, colluders, randomizer and target δ.

    Returns:
        One :class:`ScenarioBound` per distinct scenario, its ε (δ) bound and how it was
        obtained.
    """
    m, r, k_users, c = cfg.shufflers, cfg.fake_reports, cfg.colluding_users, cfg.colluding_shufflers
    others = cfg.n - 1
    murs_d = cfg.k if cfg.family == "krr" else None
    rows: list[tuple[str, int | None, int, str, int, int]] = [
        ("none", others, m * r, "no collusion", 0, 0),
        ("all shufflers", None, 0, "the chain is traced", 0, m),
        ("m-1 shufflers", others, r, "one honest shuffler permutes all", 0, m - 1),
        (
            f"{k_users} users",
            others - k_users,
            m * r,
            "colluders' reports removed",
            k_users,
            0,
        ),
        (
            f"{c} shufflers + {k_users} users",
            None if c == m else others - k_users,
            (m - c) * r,
            "configured collusion",
            k_users,
            c,
        ),
        (
            f"m-1 shufflers + {k_users} users",
            others - k_users,
            r,
            "one honest shuffler, colluders removed",
            k_users,
            m - 1,
        ),
        (
            "m-1 shufflers + all other users",
            0,
            r,
            "MURS's claim",
            others,
            m - 1,
        ),
    ]
    known: dict[int, HonestUsersBound | None] = {}

    def own_bounds(users: int) -> HonestUsersBound | None:
        """The protocol's own accountant, once per number of honest users (scenarios that
        differ only in fakes share it; it can take a second)."""
        if cfg.honest_bound is None:
            return None
        if users not in known:
            known[users] = cfg.honest_bound(users)
        return known[users]

    lowers: dict[tuple[int, int], tuple[float, str] | None] = {}

    def own_lower(users: int, fakes: int) -> tuple[float, str] | None:
        """The protocol's own lower bound at δ, once per (honest users, honest fakes)."""
        if cfg.honest_lower is None:
            return None
        if (users, fakes) not in lowers:
            lowers[(users, fakes)] = cfg.honest_lower(users, fakes, cfg.delta)
        return lowers[(users, fakes)]

    def lower_note(low: tuple[float, str] | None) -> str:
        return "" if low is None else f"; ε ≥ {low[0]:.4g} at δ when {low[1]}"

    out: list[ScenarioBound] = []
    seen: set[tuple[int | None, int]] = set()
    for name, users, fakes, who, ku, cs in rows:
        if (users, fakes) in seen and name not in ("none", "all shufflers"):
            continue
        seen.add((users, fakes))
        if users is None:
            eps = cfg.epsilon_local
            # The traced view shows the victim's own messages: a lower bound for them alone
            # (no honest user, no fake) holds for it.
            low = own_lower(0, 0)
            out.append(
                ScenarioBound(
                    name,
                    0,
                    0,
                    eps,
                    "local_dp" if math.isfinite(eps) else "none",
                    f"{who}: only the local randomizer"
                    + ("" if math.isfinite(eps) else ", which gives no guarantee alone")
                    + lower_note(low),
                    epsilon_lower=None if low is None else low[0],
                    colluding_users=ku,
                    colluding_shufflers=cs,
                )
            )
            continue
        if name == "none" and not math.isfinite(cfg.epsilon_local):
            eps_c = cfg.epsilon_claimed if cfg.epsilon_claimed is not None else math.inf
            bound, how = cfg.claimed_bound or "protocol's own claim", "the protocol's own theorem"
            own = own_bounds(users)
            if own is not None and own.epsilon_upper < eps_c:
                # E.g. a robust protocol's claim assumes only γn honest users; with all of
                # them honest its accountant gives less.
                eps_c, bound, how = own.epsilon_upper, own.bound, "the protocol's own accountant"
            low = own_lower(users, fakes)
            out.append(
                ScenarioBound(
                    name,
                    users,
                    fakes,
                    eps_c,
                    bound,
                    f"{who}: {how}" + lower_note(low),
                    epsilon_lower=None if low is None else low[0],
                    colluding_users=ku,
                    colluding_shufflers=cs,
                )
            )
            continue
        eps_u, bound = _upper(cfg, users, fakes)
        own = own_bounds(users)
        low = own_lower(users, fakes)
        own_used = False
        if own is not None and own.epsilon_upper < eps_u:
            eps_u, bound, own_used = own.epsilon_upper, own.bound, True
        claim_used = False
        claim = _claim_for(cfg, name, users)
        if claim is not None and claim < eps_u:
            # The protocol's own theorem covers this scenario; when it is tighter than what
            # the generic accountants give (e.g. multi-message protocols), use it.
            eps_u, bound, claim_used = claim, cfg.claimed_bound or "claim", True
        murs = (
            murs_formula(
                epsilon_local=cfg.epsilon_local,
                n_honest_others=users,
                n_fakes=fakes,
                delta=cfg.delta,
                d=murs_d,
            )
            if murs_d is not None and math.isfinite(cfg.epsilon_local) and cfg.delta > 0
            else None
        )
        note = ""
        if claim_used:
            note = " (the protocol's own theorem)"
        elif own_used:
            note = " (the protocol's own accountant; fakes not counted)"
        elif cfg.family != "krr" and math.isfinite(cfg.epsilon_local):
            note = " (generic ε_l-LDP bound)"
        out.append(
            ScenarioBound(
                name,
                users,
                fakes,
                eps_u,
                bound,
                f"{who}: {_protects(cfg, users, fakes)}{note}" + lower_note(low),
                epsilon_lower=None if low is None else low[0],
                murs_formula=murs,
                colluding_users=ku,
                colluding_shufflers=cs,
            )
        )
    return out
