"""Measured lower bounds: distinguishing attacks on real pipeline runs.

An (ε, δ)-DP mechanism bounds every test's error rates: for any rejection region S,
Pr_{D1}[S] ≤ e^ε Pr_{D0}[S] + δ. Run the pipeline many times on two neighbouring datasets,
apply a test to the analyzer's view, and a 95 % Clopper–Pearson lower bound on the true
positive rate and upper bound on the false positive rate give an ε that the true guarantee
cannot be below (with 95 % confidence) — the empirical auditing method of Jagielski, Ullman,
Oprea (NeurIPS'20) and Nasr et al. (S&P'21), here on the ESA system itself.

Setup of one attack (:class:`AttackSetup`): the victim is user 0 and holds the protocol's
"0" value in D0 and its "1" value in D1; every other user holds "0" (the worst case for
binary randomized response). The colluders' knowledge is applied on real runs:

* colluding users (users 1..k) read their own reports as they enter the first shuffler;
  their messages are removed from the analyzer's view;
* a colluding shuffler (hops 0..c−1) knows the fakes it added: the multiset difference
  between what it forwarded and what it received; they are removed too;
* if every shuffler colludes, the chain is traced and the view is the victim's own report.

The test statistic is the protocol's own estimate of the "1" count (or of the sum/mean) on
that residual view — for k-RR this is the count of x¹, the likelihood-ratio test (monotone
likelihood ratio in the count) for binary RR. Its threshold is chosen on the first third of
the trials and evaluated on the rest, so the interval is honest.

Replay attack (:func:`replay_attack`): with ``PipelineConfig(replay_protection=False)`` a
colluding party on the path re-sends the victim's report k more times (an interceptor at the
first shuffler); the victim's message then appears k+1 times and ε rises with k. With
protection on, the first shuffler drops the copies (its ``replayed`` counter shows k) and
the view — and so the bound — is unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

import crypto
import esa
from protocols import (
    CollusionConfig,
    InputKind,
    ParameterError,
    ShuffleProtocol,
    collusion_scenarios,
)

__all__ = [
    "AttackResult",
    "AttackSetup",
    "clopper_pearson",
    "distinguishing_attack",
    "epsilon_lower_bound",
    "protocol_family",
    "replay_attack",
]


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds: (lower, upper), each holding w.p. ≥ 1 − alpha."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ParameterError(f"need 0 <= successes <= trials, trials > 0; got {successes}/{trials}")
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha, successes, trials - successes + 1))
    hi = (
        1.0
        if successes == trials
        else float(stats.beta.ppf(1 - alpha, successes + 1, trials - successes))
    )
    return lo, hi


def epsilon_lower_bound(
    *,
    hits_1: int,
    trials_1: int,
    hits_0: int,
    trials_0: int,
    delta: float,
    confidence: float = 0.95,
) -> float:
    """ε that any (ε, δ) guarantee must exceed, from a test's hits under D1 and D0.

    Uses S (hits) and its complement, both as "D1 vs D0"; the four one-sided intervals are
    Bonferroni-corrected so the result holds with the stated confidence.

    Raises:
        ParameterError: ``confidence`` outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:  # false for nan
        raise ParameterError(f"confidence must lie in (0, 1), got {confidence!r}")
    alpha = (1.0 - confidence) / 4.0
    tpr_lo, _ = clopper_pearson(hits_1, trials_1, alpha)
    _, fpr_hi = clopper_pearson(hits_0, trials_0, alpha)
    tnr_lo, _ = clopper_pearson(trials_0 - hits_0, trials_0, alpha)
    _, fnr_hi = clopper_pearson(trials_1 - hits_1, trials_1, alpha)
    best = 0.0
    # Pr_{D1}[S] ≤ e^ε Pr_{D0}[S] + δ and Pr_{D0}[S^c] ≤ e^ε Pr_{D1}[S^c] + δ.
    for num, den in ((tpr_lo, fpr_hi), (tnr_lo, fnr_hi)):
        if num - delta > 0 and den > 0:
            best = max(best, math.log((num - delta) / den))
    return best


def protocol_family(protocol: ShuffleProtocol) -> tuple[str, int, str]:
    """(family, k, note) for accounting: the protocol's own
    :meth:`~protocols.ShuffleProtocol.randomizer_family`."""
    family = protocol.randomizer_family()
    return family.kind, family.k, family.note


@dataclass(frozen=True, slots=True)
class AttackSetup:
    """One audited configuration.

    Attributes:
        n: users (victim + colluders + honest others).
        shufflers: m.
        fake_reports: n_r per shuffler.
        colluding_users: k (users 1..k).
        colluding_shufflers: c (hops 0..c−1); c = m means the chain is traced.
        delta: δ of the guarantee being tested.
        trials: runs per hypothesis.
        seed: seed of the statistics (each trial spawns its own generator).
        replay_copies: extra copies of the victim's report injected at the first shuffler.
        replay_protection: the pipeline's test-only switch.
    """

    n: int
    shufflers: int = 1
    fake_reports: int = 0
    colluding_users: int = 0
    colluding_shufflers: int = 0
    delta: float = 1e-6
    trials: int = 2000
    seed: int = 0
    replay_copies: int = 0
    replay_protection: bool = True

    def __post_init__(self) -> None:
        if self.n < 1 or self.trials < 30 or self.shufflers < 1:
            raise ParameterError(
                f"attack needs n >= 1, shufflers >= 1 and trials >= 30; got n={self.n}, "
                f"shufflers={self.shufflers}, trials={self.trials}"
            )
        if not 0 <= self.colluding_users <= self.n - 1:
            raise ParameterError(
                f"colluding_users must lie in [0, {self.n - 1}], got {self.colluding_users}"
            )
        if not 0 <= self.colluding_shufflers <= self.shufflers:
            raise ParameterError(
                f"colluding_shufflers must lie in [0, {self.shufflers}], "
                f"got {self.colluding_shufflers}"
            )
        if self.replay_copies < 0:
            raise ParameterError(f"replay_copies must be >= 0, got {self.replay_copies}")


@dataclass(frozen=True, slots=True)
class AttackResult:
    """A measured ε lower bound and the evidence behind it."""

    epsilon_lower: float
    confidence: float
    trials: int
    threshold: float
    tpr: float
    fpr: float
    replayed_dropped: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _victim_values(protocol: ShuffleProtocol) -> tuple[Any, Any]:
    kind = protocol.input_kind
    if kind in (InputKind.BINARY, InputKind.CATEGORICAL):
        return 0, 1
    if kind is InputKind.REAL01:
        return 0.0, 1.0
    if kind is InputKind.REAL_PM1:
        return -1.0, 1.0
    raise ParameterError(f"{protocol.name}: no distinguishing attack for {kind.value} inputs")


def _multiset_minus(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Rows of a with one occurrence removed per row of b (multiset difference, vectorized)."""
    if b.shape[0] == 0 or a.shape[0] == 0:
        return a
    a2 = a.reshape(a.shape[0], -1)
    b2 = b.reshape(b.shape[0], -1)
    both = np.concatenate([a2, b2])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    ia, ib = inv[: a2.shape[0]], inv[a2.shape[0] :]
    remove = np.bincount(ib, minlength=int(inv.max()) + 1)
    # Drop, for each value, the first remove[value] rows of a that hold it.
    order = np.argsort(ia, kind="stable")
    sorted_ids = ia[order]
    first = np.searchsorted(sorted_ids, sorted_ids, side="left")
    rank = np.arange(sorted_ids.size) - first
    keep_sorted = rank >= remove[sorted_ids]
    keep = np.zeros(a2.shape[0], dtype=bool)
    keep[order[keep_sorted]] = True
    return a[keep]


class _Decoder:
    """Decodes ideal-codec rows at any hop into protocol messages."""

    def __init__(self, protocol: ShuffleProtocol, layers: int) -> None:
        self.protocol = protocol
        self.codec = esa.make_codec("ideal", message_size=protocol.message_size, layers=layers)

    def __call__(self, batch: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        padded, _ = self.codec.payload_rows(batch)
        payloads, ok = crypto.unpad_rows(padded, self.protocol.message_size)
        messages, valid = self.protocol.decode(np.ascontiguousarray(payloads))
        return np.asarray(messages)[np.asarray(ok) & np.asarray(valid)]


def _statistic(protocol: ShuffleProtocol, view: npt.NDArray[Any], n: int, fakes: int) -> float:
    est = protocol.estimate(view, n=max(n, 1), n_fakes=fakes).values
    return float(est[1] if est.size > 1 else est[0])


def _one_run(
    protocol: ShuffleProtocol, setup: AttackSetup, victim_value: Any, other_value: Any, seed: Any
) -> tuple[float, int]:
    m, c, k = setup.shufflers, setup.colluding_shufflers, setup.colluding_users
    decode = _Decoder(protocol, m + 1)
    values = np.full(setup.n, other_value)
    values[0] = victim_value
    seen: dict[int, npt.NDArray[Any]] = {}

    def at_hop(h: int) -> Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.uint8]]:
        def fn(batch: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
            if h == 0:
                # Single-message protocols: row i is user i's report as it leaves the user.
                seen[-1] = decode(batch[1 : 1 + k])
                seen[-2] = decode(batch[:1])
                if setup.replay_copies:
                    batch = np.concatenate([batch, np.repeat(batch[:1], setup.replay_copies, 0)])
            seen[h] = decode(batch)
            return batch

        return fn

    config = esa.PipelineConfig(
        shufflers=m,
        fake_reports=setup.fake_reports,
        crypto="ideal",
        replay_protection=setup.replay_protection,
        workers=1,
    )
    result = esa.run_pipeline(
        protocol,
        values,
        config,
        rng=np.random.default_rng(seed),
        interceptors={h: at_hop(h) for h in range(m + 1)},
    )
    honest_users = setup.n - k
    if c == m:
        # The whole chain colludes: the victim's report is traced to the analyzer.
        return _statistic(protocol, seen[-2], 1, 0), result.hops[0].replayed
    view = np.asarray(result.analyzer_messages)
    view = _multiset_minus(view, seen[-1])
    for i in range(c):
        fakes_i = _multiset_minus(seen[i + 1], seen[i])  # what shuffler i added
        view = _multiset_minus(view, fakes_i)
    honest_fakes = (m - c) * setup.fake_reports
    return _statistic(protocol, view, honest_users, honest_fakes), result.hops[0].replayed


#: Most trials one task runs (a pool or cluster worker): small enough that a 1000-trial
#: attack makes ~40 tasks to spread, large enough that a task's pickling and scheduling
#: (~1 ms) stays small against its pipeline runs. The scores do not depend on it.
_TRIALS_PER_TASK = 50


def _trial_scores(
    protocol: ShuffleProtocol,
    setup: AttackSetup,
    hypothesis: int,
    start: int,
    stop: int,
) -> tuple[npt.NDArray[np.float64], int]:
    """Scores of trials [start, stop) under hypothesis 0 (D0) or 1 (D1), and the most replayed
    copies the first shuffler dropped in any of them.

    A task that runs anywhere alike (this process, a pool or a Dask worker): trial t of
    hypothesis b draws from a generator seeded with (seed, b, t) only, so neither where nor
    in which chunk it runs changes its score.
    """
    v0, v1 = _victim_values(protocol)
    victim = (v0, v1)[hypothesis]
    scores = np.empty(stop - start)
    dropped = 0
    for i, t in enumerate(range(start, stop)):
        scores[i], rep = _one_run(protocol, setup, victim, v0, (setup.seed, hypothesis, t))
        dropped = max(dropped, rep)
    return scores, dropped


def _check_attack(protocol: ShuffleProtocol, confidence: float) -> None:
    if not 0.0 < confidence < 1.0:  # false for nan
        raise ParameterError(f"confidence must lie in (0, 1), got {confidence!r}")
    if protocol.messages_per_user != 1.0 or protocol.share_spec is not None:
        raise ParameterError(
            f"{protocol.name}: the attack needs one message per user (got "
            f"{protocol.messages_per_user:g}, shares={protocol.share_spec is not None})"
        )
    _victim_values(protocol)


class _PendingAttack:
    """A distinguishing attack whose trials run as tasks on an executor.

    :meth:`result` waits for them and gives what :func:`distinguishing_attack` returns for
    the same arguments, to the bit, wherever the tasks ran.
    """

    def __init__(
        self,
        protocol: ShuffleProtocol,
        setup: AttackSetup,
        *,
        confidence: float = 0.95,
        executor: Executor | None = None,
    ) -> None:
        """Check the attack and submit its trials.

        Args:
            protocol: the protocol under attack.
            setup: the audited configuration.
            confidence: probability that the measured bound holds.
            executor: where the trials run, in chunks of at most _TRIALS_PER_TASK (None:
                here, when :meth:`result` is called).

        Raises:
            ParameterError: as :func:`distinguishing_attack`.
        """
        _check_attack(protocol, confidence)
        self._setup, self._confidence = setup, confidence
        chunks = [
            (b, start, min(start + _TRIALS_PER_TASK, setup.trials))
            for b in (0, 1)
            for start in range(0, setup.trials, _TRIALS_PER_TASK)
        ]
        self._parts: list[Any]
        if executor is None:
            self._parts = [functools.partial(_trial_scores, protocol, setup, *c) for c in chunks]
        else:
            self._parts = [executor.submit(_trial_scores, protocol, setup, *c) for c in chunks]

    def cancel(self) -> None:
        """Cancel the trials that have not started (after an error elsewhere)."""
        for part in self._parts:
            if isinstance(part, Future):
                part.cancel()

    def result(self) -> AttackResult:
        """The measured bound, once every trial has run.

        Returns:
            The attack's :class:`AttackResult`.
        """
        done = [part.result() if isinstance(part, Future) else part() for part in self._parts]
        half = len(done) // 2
        scores = np.stack(
            [
                np.concatenate([s for s, _ in done[:half]]),
                np.concatenate([s for s, _ in done[half:]]),
            ]
        )
        dropped = max(rep for _, rep in done)
        return _attack_result(scores, self._setup, self._confidence, dropped)


def distinguishing_attack(
    protocol: ShuffleProtocol,
    setup: AttackSetup,
    *,
    confidence: float = 0.95,
    executor: Executor | None = None,
) -> AttackResult:
    """Measure an ε lower bound for ``setup`` on real ``--crypto ideal`` pipeline runs.

    The bound holds with probability ≥ ``confidence`` (over the runs); a caller that
    measures several scenarios and reads them together divides 1 − confidence among them
    (``esa audit`` does, Bonferroni). Trial t under hypothesis b is seeded with
    (``setup.seed``, b, t), so the result is the same whether the trials run here or as
    tasks on ``executor`` (:func:`esa.resolve_executor`: local processes or a Dask cluster).

    Args:
        protocol: the protocol under attack (one message per user).
        setup: the audited configuration.
        confidence: probability that the measured bound holds.
        executor: run the trials there, in chunks (None: one after the other, here).

    Returns:
        The measured bound and the evidence behind it.

    Raises:
        ParameterError: multi-message protocols (colluders' reports cannot be located by
            user), input kinds with no natural neighbouring pair, or ``confidence``
            outside (0, 1).
    """
    return _PendingAttack(protocol, setup, confidence=confidence, executor=executor).result()


def _attack_result(
    scores: npt.NDArray[np.float64], setup: AttackSetup, confidence: float, dropped: int
) -> AttackResult:
    """The bound from every trial's score (row b: hypothesis b), calibrated on the first
    third and evaluated on the rest."""
    cal = setup.trials // 3
    cal0, cal1 = scores[0, :cal], scores[1, :cal]
    ev0, ev1 = scores[0, cal:], scores[1, cal:]
    # Threshold: the one whose Clopper–Pearson lower bound is largest on the calibration
    # trials (a point estimate would favour extreme thresholds with tiny counts).
    cands = np.unique(np.concatenate([cal0, cal1]))
    best_t, best_v = (float(cands[0]) if cands.size else 0.0), -1.0
    for thr in cands:
        v = epsilon_lower_bound(
            hits_1=int(np.sum(cal1 >= thr)),
            trials_1=cal,
            hits_0=int(np.sum(cal0 >= thr)),
            trials_0=cal,
            delta=setup.delta,
            confidence=confidence,
        )
        if v > best_v:
            best_t, best_v = float(thr), v
    hits1 = int(np.sum(ev1 >= best_t))
    hits0 = int(np.sum(ev0 >= best_t))
    n_ev = ev0.size
    eps = epsilon_lower_bound(
        hits_1=hits1,
        trials_1=n_ev,
        hits_0=hits0,
        trials_0=n_ev,
        delta=setup.delta,
        confidence=confidence,
    )
    return AttackResult(
        epsilon_lower=eps,
        confidence=confidence,
        trials=setup.trials,
        threshold=best_t,
        tpr=hits1 / n_ev,
        fpr=hits0 / n_ev,
        replayed_dropped=dropped,
    )


def replay_attack(
    protocol: ShuffleProtocol,
    *,
    n: int,
    copies: int,
    replay_protection: bool,
    delta: float = 1e-6,
    trials: int = 1000,
    seed: int = 0,
    shufflers: int = 1,
    fake_reports: int = 0,
) -> tuple[AttackResult, float]:
    """The victim's report replayed ``copies`` times; returns (measured, proven upper bound).

    The upper bound is the no-collusion bound when replays are dropped (protection on), and
    ε_l when they are not: k+1 copies of one ε_l-LDP report are still ε_l-DP (the copies are
    post-processing), but the shuffle no longer hides which copies are the victim's.
    """
    setup = AttackSetup(
        n=n,
        shufflers=shufflers,
        fake_reports=fake_reports,
        delta=delta,
        trials=trials,
        seed=seed,
        replay_copies=copies,
        replay_protection=replay_protection,
    )
    res = distinguishing_attack(protocol, setup)
    family, k, _ = protocol_family(protocol)
    eps_l = protocol.privacy.epsilon_local
    if replay_protection or copies == 0:
        cfg = CollusionConfig(
            family=family,
            k=k,
            n=n,
            epsilon_local=eps_l,
            delta=delta,
            shufflers=shufflers,
            fake_reports=fake_reports,
        )
        upper = collusion_scenarios(cfg)[0].epsilon_upper
    else:
        upper = eps_l
    return res, upper
