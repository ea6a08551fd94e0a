"""One epoch of a configured protocol as a :class:`PrivacyProfile`, and several composed.

:func:`protocol_profile` turns a configured :class:`~protocols.ShuffleProtocol` (as
``esa simulate`` builds it) into the profile of one epoch against the analyzer (no
collusion), choosing, in this order:

* **k-RR family** (``randomizer_family().kind == "krr"``, one message per user): a
  dominating pair. Two valid pairs are built — the FMT'23 stronger clone pair of the shuffled
  k-RR with the honest fakes counted (:func:`stronger_clone_profile`), and the victim's own
  k-RR pair at ε_l (:func:`krr_profile`, what shuffling can never make worse) — and the one
  with the smaller one-epoch ε at the protocol's δ is kept. The numerical blanket and the
  exact binary-RR accountant give a smaller one-epoch ε but are maxima over datasets, not one
  pair, so they enter composition only through their (ε, δ) point, never as a pair.
* **any other protocol with a finite ε_l**: the FMT'21 clone pair (:func:`fmt21_profile`:
  valid for every ε_l-LDP randomizer; a user's several messages are one ε_l-LDP report whose
  shuffle is post-processed into the shuffle of its messages) when its ε at the protocol's δ
  is at most the protocol's own claim; otherwise the claim's (ε_c, δ) point.
* **otherwise** (no local guarantee: Split-Mix shares, the multi-message counters): the
  protocol's own (ε_c, δ) point, :meth:`PrivacyProfile.from_point`.

The profile's ``kind`` says which (``"pair"``, ``"point"``; ``"curve"`` when a curve
profile is passed in directly) and its ``description`` names the accountant.

Drop-outs: with ``arrived`` users instead of the configured n (``arrived_fraction`` of
them), the randomizer is the one configured for n, so the guarantee is recomputed at the
real population: the k-RR and FMT'21 pairs with ``arrived − 1`` others; a protocol's own
accountant (:meth:`~protocols.ShuffleProtocol.honest_users_bound`) with ``arrived − 1``
honest others (an absent user's messages are as known to the analyzer as a colluder's:
none). Where neither applies no ε is stated (:class:`~protocols.BoundNotApplicable`): a
robust protocol's claim for a fraction γ of honest users is not read off its parameters
(γ names different things in different protocols).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._base import ShuffleProtocol, check_delta, check_n
from .._errors import BoundNotApplicable, ParameterError
from ._compose import (
    DEFAULT_INTERVAL,
    ComposedGuarantee,
    PrivacyProfile,
    compose,
    fmt21_profile,
    krr_profile,
    stronger_clone_profile,
)

__all__ = [
    "MetricProfile",
    "ProtocolComposition",
    "compose_protocols",
    "fit_budget",
    "protocol_population",
    "protocol_profile",
    "scenario_epsilon_over_epochs",
]


def _params(protocol: ShuffleProtocol) -> Any:
    for attr in ("params", "_p"):
        value = getattr(protocol, attr, None)
        if value is not None and hasattr(value, "n"):
            return value
    return None


def protocol_population(protocol: ShuffleProtocol) -> tuple[int | None, int]:
    """(n, total fakes) the protocol was configured for, as far as its parameters say
    (n is None when they do not name it; fakes default to 0).

    Args:
        protocol: a configured shuffle protocol.

    Returns:
        ``(n, fakes)``: the number of users (None if unknown) and the total fake reports.
    """
    params = _params(protocol)
    if params is None:
        return None, 0
    fakes = getattr(params, "total_fakes", getattr(params, "fake_reports", 0)) or 0
    return int(params.n), int(fakes)


def _arrived(
    protocol: ShuffleProtocol, n: int | None, arrived_fraction: float
) -> tuple[int | None, int, int | None]:
    """(configured n, fakes, users that arrived: None if n is unknown)."""
    conf_n, fakes = protocol_population(protocol)
    if n is not None:
        conf_n = check_n(n)
    frac = float(arrived_fraction)
    if not 0.0 < frac <= 1.0:  # false for NaN
        raise ParameterError(f"arrived_fraction must lie in (0, 1], got {arrived_fraction!r}")
    if conf_n is None:
        return None, fakes, None
    return conf_n, fakes, max(1, math.floor(frac * conf_n + 1e-9))


def protocol_profile(
    protocol: ShuffleProtocol,
    *,
    n: int | None = None,
    arrived_fraction: float = 1.0,
) -> PrivacyProfile:
    """The privacy profile of one epoch of ``protocol`` against the analyzer.

    Args:
        protocol: a configured protocol (e.g. ``build_protocol(name, spec)``).
        n: the users it was configured for (default: read from its parameters; needed for
            the pairs and the drop-out bound when they do not name it).
        arrived_fraction: the fraction of the n users whose reports arrived, in (0, 1].

    Returns:
        The profile (see the module docstring for which one, and ``kind`` /
        ``description`` for what was chosen).

    Raises:
        ParameterError: ``arrived_fraction`` outside (0, 1], or a bad ``n``.
        BoundNotApplicable: fewer users arrived than the protocol's guarantee needs and no
            accountant of it can be evaluated at the real population.
    """
    privacy = protocol.privacy
    family = protocol.randomizer_family()
    eps_c, dlt = float(privacy.epsilon_central), float(privacy.delta)
    eps_l = float(privacy.epsilon_local)
    conf_n, fakes, arrived = _arrived(protocol, n, arrived_fraction)
    if arrived is None and float(arrived_fraction) < 1.0:
        raise BoundNotApplicable(
            f"{protocol.name}: its parameters do not name its n; pass n= to state the "
            "guarantee with drop-outs"
        )
    full = arrived is None or arrived >= (conf_n or 0)
    name = protocol.name
    at_delta = dlt if dlt > 0 else 1e-12  # where two pairs are compared for a pure claim

    if family.kind == "krr" and protocol.messages_per_user == 1.0 and arrived is not None:
        others = arrived - 1
        local = krr_profile(eps_l, family.k)
        try:
            clone = stronger_clone_profile(eps_l, others, k=family.k, n_fakes=fakes)
        except ParameterError:  # too many users for the pair
            clone = None
        best = local
        if clone is not None and clone.epsilon(at_delta) < local.epsilon(at_delta):
            best = clone
        return PrivacyProfile.from_log_pair(
            best.log_p,
            best.log_q,
            description=f"{name}: {best.description}"
            + ("" if full else f"; {arrived} of {conf_n} users arrived"),
        )

    if not full:
        assert arrived is not None
        assert conf_n is not None
        own = protocol.honest_users_bound(arrived - 1)
        if own is not None and math.isfinite(own.epsilon_upper):
            return PrivacyProfile.from_point(
                own.epsilon_upper,
                dlt,
                description=f"{name}: {own.bound}, {arrived} of {conf_n} users arrived",
            )

    if math.isfinite(eps_l) and arrived is not None and arrived > 1:
        try:
            pair: PrivacyProfile | None = fmt21_profile(eps_l, arrived - 1)
        except ParameterError:
            pair = None
        if pair is not None and (not full or pair.epsilon(at_delta) <= eps_c):
            return PrivacyProfile.from_log_pair(
                pair.log_p,
                pair.log_q,
                description=f"{name}: {pair.description}"
                + ("" if full else f"; {arrived} of {conf_n} users arrived"),
            )
    if not full:
        raise BoundNotApplicable(
            f"{name}: its guarantee {privacy.bound} is for {conf_n} users and it has no "
            f"accountant at the {arrived} that arrived: no ε is stated"
        )
    return PrivacyProfile.from_point(eps_c, dlt, description=f"{name}: {privacy.bound}")


@dataclass(frozen=True, slots=True)
class MetricProfile:
    """One metric of a composition: a protocol run for some epochs.

    Attributes:
        protocol: the protocol's name.
        epochs: how many epochs it runs.
        kind: the profile's kind (``"pair"``, ``"point"`` or ``"curve"``).
        description: which accountant gave the profile.
        epsilon_epoch: the one-epoch ε of the profile at the composition's δ.
    """

    protocol: str
    epochs: int
    kind: str
    description: str
    epsilon_epoch: float


@dataclass(frozen=True, slots=True)
class ProtocolComposition:
    """What one user keeps after every metric's epochs.

    Attributes:
        guarantee: the composition (``epsilon_total`` at ``delta``, the method, and the
            naive, advanced and Rényi numbers beside it).
        metrics: one entry per (protocol, epochs) composed, in order.
    """

    guarantee: ComposedGuarantee
    metrics: tuple[MetricProfile, ...]


def compose_protocols(
    items: Sequence[tuple[ShuffleProtocol, int]],
    *,
    delta: float,
    arrived_fraction: float = 1.0,
    value_discretization_interval: float = DEFAULT_INTERVAL,
) -> ProtocolComposition:
    """ε at ``delta`` of running each protocol for its number of epochs (several metrics
    per user, each its own protocol).

    Args:
        items: (configured protocol, epochs) pairs.
        delta: total δ in (0, 1).
        arrived_fraction: the fraction of each protocol's users that arrive in every epoch.
        value_discretization_interval: passed to :func:`compose`.

    Returns:
        The composition, with the profile used for each metric.

    Raises:
        ParameterError: no item, epochs < 1, δ outside (0, 1), or a bad fraction.
        BoundNotApplicable: see :func:`protocol_profile`.
    """
    dlt = check_delta(delta)
    entries = list(items)
    if not entries:
        raise ParameterError("compose_protocols needs at least one (protocol, epochs)")
    profiles: list[tuple[PrivacyProfile, int]] = []
    metrics: list[MetricProfile] = []
    for entry in entries:
        try:
            protocol, epochs = entry
        except (TypeError, ValueError):
            raise ParameterError(f"each entry must be (protocol, epochs), got {entry!r}") from None
        if not isinstance(protocol, ShuffleProtocol):
            raise ParameterError(f"expected a ShuffleProtocol, got {type(protocol).__name__}")
        epochs = check_n(epochs, "epochs", 1)
        profile = protocol_profile(protocol, arrived_fraction=arrived_fraction)
        profiles.append((profile, epochs))
        metrics.append(
            MetricProfile(
                protocol.name, epochs, profile.kind, profile.description, profile.epsilon(dlt)
            )
        )
    guarantee = compose(
        profiles, delta=dlt, value_discretization_interval=value_discretization_interval
    )
    # Each protocol's own (ε_c, δ) claim is a valid profile too (at the full population):
    # composed as points it can be tighter for few epochs; the smaller result is kept.
    if float(arrived_fraction) == 1.0 and any(p.kind != "point" for p, _ in profiles):
        points = [
            (
                PrivacyProfile.from_point(
                    pr.epsilon_central,
                    pr.delta,
                    description=f"{name}: {pr.bound} (its (ε, δ) claim)",
                ),
                count,
            )
            for (pr, name), (_, count) in zip(
                ((e[0].privacy, e[0].name) for e in entries), profiles, strict=True
            )
        ]
        claimed = compose(
            points, delta=dlt, value_discretization_interval=value_discretization_interval
        )
        if claimed.epsilon_total < guarantee.epsilon_total:
            guarantee = claimed
            metrics = [
                MetricProfile(m.protocol, m.epochs, "point", p.description, p.epsilon(dlt))
                for m, (p, _) in zip(metrics, points, strict=True)
            ]
    return ProtocolComposition(guarantee, tuple(metrics))


def fit_budget(
    make_profiles: Callable[[float], Sequence[tuple[PrivacyProfile, int]]],
    total_epsilon: float,
    delta: float,
    *,
    lower: float,
    upper: float,
    rtol: float = 1e-3,
    value_discretization_interval: float = DEFAULT_INTERVAL,
) -> tuple[float, ComposedGuarantee]:
    """Largest per-epoch parameter ε in [``lower``, ``upper``] whose composition
    ``make_profiles(ε)`` stays within ``total_epsilon`` at ``delta``, by bisection (the
    composed ε must grow with ε, as it does for a protocol's ε_c).

    Args:
        make_profiles: ε ↦ the (profile, epochs) list of every metric at per-epoch ε.
        total_epsilon: the budget, > 0.
        delta: total δ in (0, 1).
        lower: smallest ε searched (> 0).
        upper: largest ε searched (returned if it fits).
        rtol: the answer is within ``rtol``·ε below the largest that fits.
        value_discretization_interval: passed to :func:`compose`.

    Returns:
        (ε that fits, its composition).

    Raises:
        ParameterError: bad arguments, or not even ``lower`` fits.
    """
    dlt = check_delta(delta)
    budget = float(total_epsilon)
    if not 0.0 < budget < math.inf:
        raise ParameterError(f"total_epsilon must be a finite number > 0, got {total_epsilon!r}")
    if not 0.0 < lower < upper < math.inf or not 0.0 < rtol < 1.0:
        raise ParameterError(
            f"need 0 < lower < upper and 0 < rtol < 1, got {lower}, {upper}, {rtol}"
        )

    def composed(eps: float) -> ComposedGuarantee:
        return compose(
            make_profiles(eps),
            delta=dlt,
            value_discretization_interval=value_discretization_interval,
        )

    best = composed(lower)
    if not best.epsilon_total <= budget:
        raise ParameterError(
            f"even per-epoch ε = {lower:g} composes to {best.epsilon_total:.4g} > "
            f"ε_total = {budget:g}"
        )
    top = composed(upper)
    if top.epsilon_total <= budget:
        return upper, top
    lo, hi = lower, upper
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi) if hi / lo > 4.0 else 0.5 * (lo + hi)
        got = composed(mid)
        if got.epsilon_total <= budget:
            lo, best = mid, got
        else:
            hi = mid
    return lo, best


def scenario_epsilon_over_epochs(
    *,
    family: str,
    k: int,
    epsilon_local: float,
    honest_users: int | None,
    honest_fakes: int,
    epsilon_upper: float,
    delta: float,
    epochs: int,
    delta_total: float,
    value_discretization_interval: float = DEFAULT_INTERVAL,
) -> tuple[float, str]:
    """ε at ``delta_total`` after ``epochs`` epochs of one collusion scenario (see
    :func:`collusion_scenarios`), the smallest of the valid compositions:

    * the scenario's one-epoch (``epsilon_upper``, ``delta``) point composed (optimally,
      :func:`kov_epsilon`; a pure bound as a pure point);
    * k-RR family: a dominating pair — the victim's own k-RR pair when nobody hides it
      (``honest_users`` None or 0 and no honest fake), else the FMT'23 stronger clone pair
      of its honest users and honest fakes (fakes alone included);
    * any other finite ε_l: the pure ε_l point (nobody hides the victim), else the FMT'21
      clone pair of its honest users.

    Args:
        family: ``"krr"`` or ``"generic"`` (as :class:`CollusionConfig`).
        k: k-RR domain.
        epsilon_local: ε_l (``inf``: none).
        honest_users: honest others hiding the victim (None: the chain is traced).
        honest_fakes: honest fakes.
        epsilon_upper: the scenario's one-epoch upper bound at ``delta``.
        delta: δ of the one-epoch bound.
        epochs: T ≥ 1.
        delta_total: δ of the composition.
        value_discretization_interval: passed to :func:`compose`.

    Returns:
        (ε, how: the composition's method and profile).
    """
    epochs = check_n(epochs, "epochs", 1)
    dlt_total = check_delta(delta_total, "delta_total")
    candidates: list[tuple[float, str]] = [(math.inf, "none")]
    if math.isfinite(epsilon_upper):
        pure = epsilon_upper == epsilon_local and honest_users in (None, 0) and not honest_fakes
        point = PrivacyProfile.from_point(epsilon_upper, 0.0 if pure else delta)
        got = compose([(point, epochs)], delta=dlt_total)
        candidates.append((got.epsilon_total, f"{got.method} of the one-epoch bound"))
    if math.isfinite(epsilon_local):
        users = honest_users or 0
        pair: PrivacyProfile | None = None
        try:
            if family == "krr":
                if users == 0 and honest_fakes == 0:
                    pair = krr_profile(epsilon_local, k)
                else:
                    pair = stronger_clone_profile(
                        epsilon_local, max(0, users), k=k, n_fakes=honest_fakes
                    )
            elif users > 0:
                pair = fmt21_profile(epsilon_local, users)
        except ParameterError:
            pair = None
        if pair is not None:
            got = compose(
                [(pair, epochs)],
                delta=dlt_total,
                value_discretization_interval=value_discretization_interval,
            )
            candidates.append((got.epsilon_total, f"pld of {pair.description}"))
    return min(candidates, key=lambda c: c[0])
