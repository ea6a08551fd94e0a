"""The privacy statement of the run that actually happened.

A protocol's :attr:`~protocols.ShuffleProtocol.privacy` is computed once, for the run it was
calibrated for (n users, so many fakes). A run may differ: fewer users arrive (dropped,
held below a threshold), the shufflers add fewer fakes, the data set has another size.
:func:`run_guarantee` compares the run's facts (:class:`RunFacts`, from the hops' counters)
with the calibration and states the guarantee that holds for the run:

* the run matches the calibration: the calibrated guarantee;
* it differs and the protocol can compute its guarantee for the run
  (:meth:`~protocols.ShuffleProtocol.privacy_for_run`): that one, capped at ε_l;
* it differs and the protocol cannot: ε_c = ε_l if its messages are ε_l-LDP (the local
  guarantee holds whatever the shuffle did), else ε = ∞ (nothing is proven) — never the
  calibrated number.

With ``on_mismatch="refuse"`` a run that differs raises :class:`GuaranteeMismatch` instead.

A noisy threshold (:attr:`RunFacts.threshold_epsilon`) is not a difference: its release
decisions are added to whichever guarantee holds by basic composition, ε + m·k·ε_t
(:func:`esa._threshold.threshold_cost`; ∞ when no bound k on a user's reports is known).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from protocols import PrivacyGuarantee, ShuffleProtocol

from ._errors import ConfigError, GuaranteeMismatch, check_integer
from ._roles import HopCounters, reports_per_fake
from ._threshold import check_threshold_epsilon, threshold_cost

__all__ = [
    "OnMismatch",
    "RunFacts",
    "RunGuarantee",
    "check_on_mismatch",
    "run_facts",
    "run_guarantee",
]

OnMismatch = Literal["recompute", "refuse"]


def check_on_mismatch(on_mismatch: object) -> OnMismatch:
    """``on_mismatch`` if it is ``"recompute"`` or ``"refuse"``.

    Raises:
        ConfigError: any other value.
    """
    if on_mismatch == "recompute":
        return "recompute"
    if on_mismatch == "refuse":
        return "refuse"
    raise ConfigError(f"on_mismatch must be 'recompute' or 'refuse', got {on_mismatch!r}")


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What one run did, as its counters show it (conservatively).

    Attributes:
        n_users: honest users whose reports reached the analyzer: the users who sent,
            minus one per report the counters say was lost on the way (invalid, replayed,
            held, or missing between hops), as if each lost report were another user's.
        fakes_added: fake values each shuffler added, in hop order (chain by chain); a
            shuffler that held its crowd added none.
        fakes_arrived: fake values counted for the guarantee: the sum of ``fakes_added``
            minus every lost report (as if each had been a fake), at least 0.
        shufflers: shufflers per chain.
        threshold: the shufflers' crowd threshold (0: none).
        domain: the protocol's input domain (values outside it are refused before a run).
        threshold_epsilon: ε_t of the shufflers' noisy threshold (``None``: none, or a plain
            one); listed by :meth:`to_json` only when set.
    """

    n_users: int
    fakes_added: tuple[int, ...]
    fakes_arrived: int
    shufflers: int
    threshold: int
    domain: int
    threshold_epsilon: float | None = None

    def __post_init__(self) -> None:
        for name in ("n_users", "fakes_arrived", "threshold"):
            check_integer(getattr(self, name), name, 0)
        check_integer(self.shufflers, "shufflers", 1)
        check_integer(self.domain, "domain", 1)
        object.__setattr__(
            self, "fakes_added", tuple(check_integer(f, "fakes_added", 0) for f in self.fakes_added)
        )
        eps_t = check_threshold_epsilon(self.threshold_epsilon, "threshold_epsilon")
        object.__setattr__(self, "threshold_epsilon", eps_t)

    def to_json(self) -> dict[str, Any]:
        """The facts as a JSON object.

        Returns:
            One key per field (``threshold_epsilon`` only when set).
        """
        out: dict[str, Any] = {
            "n_users": self.n_users,
            "fakes_added": list(self.fakes_added),
            "fakes_arrived": self.fakes_arrived,
            "shufflers": self.shufflers,
            "threshold": self.threshold,
            "domain": self.domain,
        }
        if self.threshold_epsilon is not None:
            out["threshold_epsilon"] = self.threshold_epsilon
        return out


def run_facts(
    protocol: ShuffleProtocol,
    hops: Sequence[HopCounters],
    *,
    n: int,
    sent: Sequence[int] | None,
    shufflers: int,
    threshold: int,
    threshold_epsilon: float | None = None,
) -> RunFacts:
    """The facts of one run from its hops' counters.

    Args:
        protocol: the configured protocol.
        hops: every chain's shufflers in chain order, then the analyzer (as
            :func:`esa.run_pipeline` lists them).
        n: users who sent reports.
        sent: reports the encoders sealed for each chain (``None``: unknown, taken to be
            what each chain's first shuffler received).
        shufflers: shufflers per chain.
        threshold: the shufflers' crowd threshold.
        threshold_epsilon: ε_t of their noisy threshold (``None``: none).

    Returns:
        The conservative facts (see :class:`RunFacts`).
    """
    *chain_hops, analyzer = hops
    lost = 0
    for h in hops:
        lost += h.invalid + h.replayed + h.held
    # Reports missing between hops (an interceptor that removed some): what each hop
    # should have received minus what it did.
    channels = sorted({h.channel for h in chain_hops}) or [0]
    last_forwarded = 0
    for c in channels:
        mine = [h for h in chain_hops if h.channel == c]
        expected = sent[c] if sent is not None and c < len(sent) else None
        for h in mine:
            if expected is not None:
                lost += max(0, expected - h.received)
            expected = h.forwarded
        last_forwarded += expected if expected is not None else 0
    if chain_hops:
        lost += max(0, last_forwarded - analyzer.received)
    per_fake = reports_per_fake(protocol)
    fakes_added = tuple(h.fakes_added // per_fake for h in chain_hops)
    fake_reports = sum(h.fakes_added for h in chain_hops)
    return RunFacts(
        n_users=max(0, int(n) - lost),
        fakes_added=fakes_added,
        fakes_arrived=max(0, fake_reports - lost) // per_fake,
        shufflers=shufflers,
        threshold=threshold,
        domain=protocol.domain,
        threshold_epsilon=threshold_epsilon,
    )


@dataclass(frozen=True, slots=True)
class RunGuarantee:
    """The privacy statement of one run.

    Attributes:
        privacy: the guarantee stated for the run.
        calibrated: the protocol's calibrated guarantee (:attr:`ShuffleProtocol.privacy`).
        differences: how the run differs from the calibration, one line each (empty: not).
        recomputed: True when ``privacy`` was derived for the run's facts rather than taken
            from the calibration (i.e. the run differs).
        facts: the run's facts.
    """

    privacy: PrivacyGuarantee
    calibrated: PrivacyGuarantee
    differences: tuple[str, ...]
    recomputed: bool
    facts: RunFacts

    def to_json(self) -> dict[str, Any]:
        """The guarantee as a JSON object.

        Returns:
            The run's ε_c, ε_l, δ and bound, whether it was recomputed, how the run differed and
            the calibrated guarantee.
        """
        return {
            "epsilon_central": self.privacy.epsilon_central,
            "epsilon_local": self.privacy.epsilon_local,
            "delta": self.privacy.delta,
            "bound": self.privacy.bound,
            "privacy_recomputed": self.recomputed,
            "run_differences": list(self.differences),
            "calibrated": {
                "epsilon_central": self.calibrated.epsilon_central,
                "epsilon_local": self.calibrated.epsilon_local,
                "delta": self.calibrated.delta,
                "bound": self.calibrated.bound,
            },
            "facts": self.facts.to_json(),
        }


def differences(protocol: ShuffleProtocol, facts: RunFacts) -> list[str]:
    """How ``facts`` differ from ``protocol``'s calibration, one line each."""
    cal = protocol.calibration
    if cal is None:
        return [f"calibration: {protocol.name} records no calibrated n, so no run matches it"]
    found = []
    if facts.n_users != cal.n:
        found.append(f"n: calibrated {cal.n}, arrived {facts.n_users}")
    if facts.fakes_arrived != cal.fake_reports_total:
        per = "/".join(str(f) for f in facts.fakes_added) or "0"
        found.append(
            f"fake reports: calibrated {cal.fake_reports_total} in total, "
            f"{facts.fakes_arrived} counted (added per shuffler: {per})"
        )
    fakes_in_play = cal.fake_reports_total > 0 or any(facts.fakes_added)
    if cal.shufflers is not None and cal.shufflers != facts.shufflers and fakes_in_play:
        found.append(f"shufflers: calibrated {cal.shufflers}, ran {facts.shufflers}")
    return found


def run_guarantee(
    protocol: ShuffleProtocol, facts: RunFacts, *, on_mismatch: OnMismatch = "recompute"
) -> RunGuarantee:
    """The guarantee that holds for the run ``facts`` describe (module docstring).

    Args:
        protocol: the configured protocol that ran.
        facts: what the run did.
        on_mismatch: ``"recompute"`` states the run's own guarantee when it differs from
            the calibration; ``"refuse"`` raises instead.

    Returns:
        The run's statement.

    Raises:
        GuaranteeMismatch: ``on_mismatch="refuse"`` and the run differs (it names how).
        ConfigError: ``on_mismatch`` is neither value.
    """
    on_mismatch = check_on_mismatch(on_mismatch)
    calibrated = protocol.privacy
    found = differences(protocol, facts)
    if not found:
        return RunGuarantee(
            _with_threshold(protocol, calibrated, facts), calibrated, (), False, facts
        )
    if on_mismatch == "refuse":
        raise GuaranteeMismatch(found)
    eps_l = calibrated.epsilon_local
    run = protocol.privacy_for_run(facts.n_users, facts.fakes_arrived)
    if run is None:
        if math.isfinite(eps_l):
            run = PrivacyGuarantee(
                epsilon_central=eps_l,
                epsilon_local=eps_l,
                delta=0.0,
                bound=f"local guarantee eps_l ({protocol.name} cannot recompute for this run)",
            )
        else:
            run = PrivacyGuarantee(
                epsilon_central=math.inf,
                epsilon_local=eps_l,
                delta=1.0,
                bound=f"nothing proven ({protocol.name} cannot recompute for this run and "
                "its messages carry no local guarantee)",
            )
    elif math.isfinite(eps_l) and not run.epsilon_central <= eps_l:
        run = PrivacyGuarantee(eps_l, eps_l, 0.0, "local guarantee eps_l")
    return RunGuarantee(
        _with_threshold(protocol, run, facts), calibrated, tuple(found), True, facts
    )


def _with_threshold(
    protocol: ShuffleProtocol, privacy: PrivacyGuarantee, facts: RunFacts
) -> PrivacyGuarantee:
    """``privacy`` composed with the run's noisy-threshold decisions (basic composition:
    ε + m·k·ε_t, δ unchanged; :func:`esa._threshold.threshold_cost`), or as is without one."""
    eps_t = facts.threshold_epsilon
    if eps_t is None:
        return privacy
    cost = threshold_cost(protocol, eps_t, facts.shufflers)
    return PrivacyGuarantee(
        epsilon_central=privacy.epsilon_central + cost,
        epsilon_local=privacy.epsilon_local,
        delta=privacy.delta,
        bound=f"{privacy.bound} + noisy threshold (eps_t = {eps_t:g} per decision, "
        f"{facts.shufflers} shuffler(s): +{cost:g}, basic composition)",
    )
