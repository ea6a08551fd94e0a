"""Noisy crowd thresholds (Prochlo's randomized threshold) and the privacy they cost.

A plain threshold T releases a crowd iff its report count c satisfies c ≥ T. That decision
is a deterministic function of c, so it is not differentially private at all: at c = T − 1
one more report flips it, and whoever sees whether the crowd was released (everyone
downstream: the next hops, the analyzer, the signed ``held`` counters) learns it.

A noisy threshold with parameter ε_t releases iff c + Z ≥ T, with Z drawn afresh for every
crowd of every epoch from the two-sided geometric (discrete Laplace) law DLap(α),
α = e^{−ε_t}: P[Z = k] = (1−α)/(1+α) · α^{|k|}, k ∈ ℤ
(:func:`protocols._noise.symmetric_geometric`).

**Claim.** The release decision is ε_t-DP with respect to adding or removing one report of
the crowd (neighbouring counts c and c + 1).

**Proof.** c ↦ c + Z is the geometric mechanism of Ghosh, Roughgarden and Sundararajan
(STOC'09) for a count of sensitivity 1: for every integer y,
P[c + Z = y] / P[c + 1 + Z = y] = α^{|y−c|−|y−c−1|} ∈ [α, 1/α] = [e^{−ε_t}, e^{ε_t}], so
c + Z is ε_t-DP. The decision 1[c + Z ≥ T] is a function of c + Z alone (T is public),
and post-processing never increases ε: for either outcome S ∈ {release, hold},
P[decision(c) ∈ S] ≤ e^{ε_t} · P[decision(c ± 1) ∈ S]. □ The two release probabilities are
explicit (:func:`release_probability`): with k = T − c, P[Z ≥ k] = α^k/(1+α) for k ≥ 1 and
1 − α^{1−k}/(1+α) for k ≤ 0; tests check the ratio bound on them in exact rational
arithmetic.

**What it does not cover.**

* The report count itself. A released crowd's reports are forwarded, so the next hop and the
  analyzer count them (and the counters, ``held`` included, state the count); only fakes
  (and the protocol's own guarantee) hide how many there were. The noisy threshold protects
  the *decision*, not the released data.
* Users who send several reports. The noise is calibrated to one report; a user who sends
  up to k reports moves c by up to k, and by group privacy the decision is k·ε_t-DP for
  that user's presence.
* Several decisions. Every shuffler of a chain thresholds the crowd it receives, each with
  fresh noise: m decisions per chain. Reports of one user spread over several chains (one
  per channel) count once each towards k.
* Composition with the protocol. The decisions and the released messages depend on the
  same users, so by basic composition a run's statement is ε + m·k·ε_t (δ unchanged), where
  ε is what the protocol proves for the run (:func:`threshold_cost` computes m·k·ε_t, and
  :func:`esa.run_guarantee` adds it). When no bound k on a user's reports is known, the
  cost is ∞: nothing is proven.

Randomness: a live shuffler draws Z from a ChaCha20 stream keyed by the OS
(:func:`crypto.csprng_generator`), fresh per decision; only a reproducible simulation
(``PipelineConfig(seeded_fakes=True)``) passes a seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import numpy as np

import crypto
from protocols import RNGLike, ShuffleProtocol, as_generator
from protocols._noise import geometric_alpha, symmetric_geometric

from ._errors import ConfigError

__all__ = [
    "NoisyThreshold",
    "check_threshold_epsilon",
    "release_probability",
    "reports_per_user_bound",
    "threshold_cost",
]

Num = TypeVar("Num", float, Fraction)


def check_threshold_epsilon(epsilon: object, name: str = "threshold_noise") -> float | None:
    """``epsilon`` as a float if it is a finite number > 0, ``None`` if it is ``None``.

    Args:
        epsilon: the noisy threshold's ε_t, or ``None`` (a plain threshold).
        name: how the error message names the setting.

    Returns:
        ε_t as a float, or ``None``.

    Raises:
        ConfigError: a bool, a non-number, a non-finite number or one ≤ 0.
    """
    if epsilon is None:
        return None
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.integer | np.floating):
        raise ConfigError(f"{name} must be a finite number > 0 or None, got {epsilon!r}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return eps


def release_probability(count: int, threshold: int, alpha: Num) -> Num:
    """P[count + Z ≥ threshold] for Z ~ DLap(α), in closed form.

    With k = threshold − count: α^k/(1+α) for k ≥ 1, else 1 − α^{1−k}/(1+α). Pass a
    :class:`~fractions.Fraction` α to compute it exactly (the law's ratio bound is then
    checked without rounding); a float α gives a float.

    Args:
        count: the crowd's report count c ≥ 0.
        threshold: T.
        alpha: α in (0, 1) (α = e^{−ε_t}).

    Returns:
        The release probability, of α's type.

    Raises:
        ConfigError: α outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must lie in (0, 1), got {alpha!r}")
    k = int(threshold) - int(count)
    if k >= 1:
        return alpha**k / (1 + alpha)
    return 1 - alpha ** (1 - k) / (1 + alpha)


@dataclass(frozen=True, slots=True)
class NoisyThreshold:
    """The release rule c + Z ≥ T with Z ~ DLap(e^{−ε_t}) (module docstring: the proof).

    Attributes:
        threshold: T ≥ 1.
        epsilon: ε_t > 0, finite.

    Raises:
        ConfigError: T not an int ≥ 1, or ε_t not a finite number > 0.
    """

    threshold: int
    epsilon: float

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | np.integer):
            raise ConfigError(f"threshold must be an int, got {self.threshold!r}")
        if int(self.threshold) < 1:
            raise ConfigError(
                f"a noisy threshold needs threshold >= 1, got {self.threshold} (with 0 it "
                "would hold crowds a plain threshold releases, and protect nothing)"
            )
        object.__setattr__(self, "threshold", int(self.threshold))
        eps = check_threshold_epsilon(self.epsilon, "threshold epsilon")
        assert eps is not None
        object.__setattr__(self, "epsilon", eps)

    @property
    def alpha(self) -> float:
        """α = e^{−ε_t}, the noise's parameter."""
        return geometric_alpha(self.epsilon)

    def releases(self, count: int, *, rng: RNGLike = None) -> bool:
        """Draw the decision for one crowd of ``count`` reports: True to release.

        Args:
            count: the crowd's report count.
            rng: a seeded generator or a seed (:data:`~protocols.RNGLike`; simulations
                only); ``None`` draws Z from a fresh OS-keyed ChaCha20 stream
                (:func:`crypto.csprng_generator`), not from a numpy generator.

        Returns:
            Whether count + Z ≥ T.

        Raises:
            ParameterError: an ``rng`` that is not :data:`~protocols.RNGLike`.
        """
        gen = as_generator(rng) if rng is not None else crypto.csprng_generator()
        z = int(symmetric_geometric(self.alpha, rng=gen))
        return int(count) + z >= self.threshold

    def release_probability(self, count: int) -> float:
        """P[release] for a crowd of ``count`` reports (:func:`release_probability`)."""
        return release_probability(count, self.threshold, self.alpha)


def reports_per_user_bound(protocol: ShuffleProtocol) -> int | None:
    """A proven bound k on the reports one user sends, or ``None`` if none is known.

    ``max_messages_per_user`` where the protocol states one; else 1 for a protocol that
    sends exactly one message per user without Split-Mix (``messages_per_user == 1``, the
    project's convention for a single-message protocol). Otherwise ``None``: the expected
    count :attr:`~protocols.ShuffleProtocol.messages_per_user` bounds no single user.

    Args:
        protocol: the configured protocol.

    Returns:
        k ≥ 1, or ``None``.
    """
    bound = getattr(protocol, "max_messages_per_user", None)
    if isinstance(bound, int | np.integer) and not isinstance(bound, bool) and bound >= 1:
        shares = 1 if protocol.share_spec is None else protocol.share_spec.shares
        # max_messages_per_user counts messages; a Split-Mix message travels as its shares.
        return int(bound) * shares
    if protocol.share_spec is None and protocol.messages_per_user == 1:
        return 1
    return None


def threshold_cost(protocol: ShuffleProtocol, epsilon: float, shufflers: int) -> float:
    """The ε a noisy threshold adds to a run's statement: m·k·ε_t (∞ without a bound k).

    Basic composition over the m decisions of each chain, each k·ε_t-DP for one user's
    presence (module docstring).

    Args:
        protocol: the configured protocol (for k, :func:`reports_per_user_bound`).
        epsilon: ε_t of each decision.
        shufflers: m, shufflers per chain.

    Returns:
        m·k·ε_t, or ``math.inf`` when k is unknown.
    """
    k = reports_per_user_bound(protocol)
    if k is None:
        return math.inf
    return shufflers * k * epsilon
