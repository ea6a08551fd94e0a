"""The in-process pipeline: encoders → m shufflers → analyzer, in one process.

The same role objects run inside the TCP services; here the hops hand batches to each other
directly, which is what statistical sweeps and most tests use.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

import crypto
from protocols import (
    Estimate,
    MessageTally,
    PrivacyGuarantee,
    RNGLike,
    ShuffleProtocol,
    as_generator,
)

from ._codec import HopCodec, make_codec
from ._document import json_document
from ._errors import ConfigError, check_integer, check_workers
from ._executor import InlineExecutor, local_pool, map_ordered
from ._guarantee import OnMismatch, RunGuarantee, check_on_mismatch, run_facts, run_guarantee
from ._roles import (
    Analyzer,
    AnalyzerOutput,
    Encoder,
    HopCounters,
    Shuffler,
    lost_estimate,
    reports_per_fake,
    split_messages,
)
from ._store import DEFAULT_MEMORY_BUDGET, chunks
from ._threshold import NoisyThreshold

__all__ = [
    "USERS_PER_CHUNK",
    "PipelineConfig",
    "RunResult",
    "encode_chunk",
    "encode_users",
    "run_pipeline",
]

#: Users one encoding task randomizes and seals. Fixed, whatever the executor: chunk i draws
#: from the i-th child of the run's seed, so a serial, a local-pool and a Dask run of one
#: seed give the same messages.
USERS_PER_CHUNK = 16384

Interceptor = Callable[[Any], Any]

#: Every onion layer binds its hop index as 16 bits (:mod:`crypto`), and the analyzer's hop
#: is m: at most 2^16 − 1 shufflers.
MAX_SHUFFLERS = 2**16 - 1
#: Epoch and crowd ids are 64-bit fields of every layer header and associated data.
MAX_ID = 2**64 - 1


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """How one simulated deployment is set up.

    Attributes:
        shufflers: m >= 1 shufflers in the chain.
        fake_reports: n_r uniform fake reports each shuffler adds per released crowd (MURS).
        threshold: a crowd with fewer reports is held by a shuffler (0: no threshold).
        threshold_noise: ε_t of a noisy threshold (``None``, the default: the plain one):
            each shuffler releases a crowd of c reports iff c + Z ≥ ``threshold``, Z ~
            DLap(e^{−ε_t}) fresh per crowd, drawn from the seeded generator with
            ``seeded_fakes`` and from the OS CSPRNG without. The decision is ε_t-DP per
            report (:mod:`esa._threshold`), and the run's statement adds m·k·ε_t to its ε
            (:func:`esa.run_guarantee`). Needs ``threshold`` >= 1.
        crypto: ``"onion"`` (real encryption, default) or ``"ideal"`` (plaintext stand-in).
        replay_protection: test-only switch; ``False`` lets replayed reports through.
        workers: processes for the crypto (``None``: every core).
        epoch: epoch id bound into every layer.
        crowd_id: crowd of every user's reports.
        seeded_fakes: draw fake values from the simulation's seeded generator so a seed
            reproduces the estimate exactly; ``False`` draws them from the OS CSPRNG as a
            live shuffler does. The permutation is always from the CSPRNG.
        representation: ``"reports"`` (default): one report per message through every hop.
            ``"tally"`` (``ideal`` only, protocols with :attr:`~protocols.ShuffleProtocol.
            supports_tally`): the hops carry the estimator's additive summary of the
            message multiset (:class:`protocols.MessageTally`) instead — what an ideal
            shuffler's output *is* to such an analyzer — so runs of 10^8–10^11 messages
            (PRHR, PUCM, PRRQ at n = 10^6) fit one machine. Thresholds, fakes and every
            counter behave as with reports; nothing can be intercepted or replayed.
        memory_budget: bytes one batch of reports may hold in RAM (default 64 MiB); a larger
            batch spills to a memory-mapped temp file, chunk by chunk, so the run's memory
            stays about one chunk per stage whatever n (its disk then needs the batch's
            size free; a run without room stops with :class:`ConfigError`).
        spill_dir: where spilled batches go (default: the system's temp directory); the
            files are deleted as soon as they are created.

    Raises:
        ConfigError: a field of the wrong type or out of range (the integers must be ints:
            shufflers in [1, 2^16 − 1], epoch and crowd_id in [0, 2^64), fake_reports and
            threshold >= 0, workers None or >= 1), tally with onion crypto, or a
            ``threshold_noise`` not a finite number > 0 or given with threshold 0, or a
            negative memory budget.
    """

    shufflers: int = 3
    fake_reports: int = 0
    threshold: int = 0
    crypto: Literal["onion", "ideal"] = "onion"
    replay_protection: bool = True
    workers: int | None = None
    epoch: int = 1
    crowd_id: int = 0
    seeded_fakes: bool = True
    representation: Literal["reports", "tally"] = "reports"
    threshold_noise: float | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    spill_dir: str | Path | None = None

    def __post_init__(self) -> None:
        # All checks here, before any work (typed errors, raised up front); integral fields
        # are stored as Python ints (numpy integers would not serialize in ``RunResult.to_json``).
        ints = {
            "shufflers": (1, MAX_SHUFFLERS),
            "fake_reports": (0, None),
            "threshold": (0, None),
            "epoch": (0, MAX_ID),
            "crowd_id": (0, MAX_ID),
            "memory_budget": (0, None),
        }
        for name, (lo, hi) in ints.items():
            object.__setattr__(self, name, check_integer(getattr(self, name), name, lo, hi))
        object.__setattr__(self, "workers", check_workers(self.workers))
        for name in ("replay_protection", "seeded_fakes"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.crypto not in ("onion", "ideal"):
            raise ConfigError(f"crypto must be 'onion' or 'ideal', got {self.crypto!r}")
        if self.representation not in ("reports", "tally"):
            raise ConfigError(
                f"representation must be 'reports' or 'tally', got {self.representation!r}"
            )
        if self.representation == "tally" and self.crypto != "ideal":
            raise ConfigError("representation 'tally' needs crypto='ideal' (there are no reports)")
        if self.threshold_noise is not None:
            # NoisyThreshold validates ε_t (finite, > 0) and threshold >= 1.
            rule = NoisyThreshold(self.threshold, self.threshold_noise)
            object.__setattr__(self, "threshold_noise", rule.epsilon)

    @property
    def total_fakes(self) -> int:
        """Fakes the analyzer expects in a released crowd: every shuffler adds n_r."""
        return self.shufflers * self.fake_reports


@dataclass(slots=True)
class RunResult:
    """What one pipeline run produced, with everything ``esa simulate --json`` reports.

    ``extra["drop_check"]`` is ``{"ok", "problems"}`` from the hops' counters
    (:func:`check_drops`), as a TCP run's analyzer reports it from the signed statements.

    ``guarantee`` is the privacy statement of the run that happened
    (:func:`esa.run_guarantee`); left out, it is derived from ``hops`` with
    ``on_mismatch="recompute"``. :attr:`privacy` is the one to report, never
    ``protocol.privacy`` (the calibration).
    """

    protocol: ShuffleProtocol
    config: PipelineConfig
    n: int
    estimate: Estimate
    truth: npt.NDArray[np.float64]
    hops: list[HopCounters]
    analyzer_messages: npt.NDArray[Any]
    seconds: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)
    guarantee: RunGuarantee | None = None

    def __post_init__(self) -> None:
        if self.guarantee is None:
            facts = run_facts(
                self.protocol,
                self.hops,
                n=self.n,
                sent=None,
                shufflers=self.config.shufflers,
                threshold=self.config.threshold,
                threshold_epsilon=self.config.threshold_noise,
            )
            self.guarantee = run_guarantee(self.protocol, facts, on_mismatch="recompute")

    @property
    def run_guarantee(self) -> RunGuarantee:
        """The run's privacy statement (see the class docstring)."""
        assert self.guarantee is not None  # set by __post_init__
        return self.guarantee

    @property
    def privacy(self) -> PrivacyGuarantee:
        """The guarantee that holds for this run."""
        return self.run_guarantee.privacy

    @property
    def calibration(self) -> PrivacyGuarantee:
        """The protocol's calibrated guarantee (what it was configured for)."""
        return self.run_guarantee.calibrated

    @property
    def mismatch(self) -> tuple[str, ...]:
        """How the run differs from the calibration (empty: it does not)."""
        return self.run_guarantee.differences

    @property
    def error(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.estimate.values - self.truth, dtype=np.float64)

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.error))) if self.error.size else 0.0

    @property
    def rmse(self) -> float:
        return float(np.sqrt(np.mean(self.error**2))) if self.error.size else 0.0

    def to_json(self, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The run as the JSON document ``esa simulate --json`` prints, exactly.

        Args:
            metadata: ``command`` (argv list), ``parameters`` (the parsed arguments) and
                ``seed``, as :func:`esa.json_document` takes them; without it they are
                ``null``, ``{}`` and ``extra["seed"]`` (or ``null``).

        Returns:
            A JSON-safe dict: ``schema_version``, ``version``, the metadata, the run's fields
            and ``non_finite`` (every non-finite number is ``null`` there, its place listed in
            ``non_finite``; docs/schema/simulate.schema.json).
        """
        privacy = self.privacy
        body = {
            "protocol": self.protocol.name,
            "n": self.n,
            "domain": self.protocol.domain,
            "epsilon_central": privacy.epsilon_central,
            "epsilon_local": privacy.epsilon_local,
            "delta": privacy.delta,
            "bound": privacy.bound,
            "privacy_recomputed": self.run_guarantee.recomputed,
            "run_differences": list(self.mismatch),
            "shufflers": self.config.shufflers,
            "fake_reports": self.config.fake_reports,
            "threshold": self.config.threshold,
            "crypto": self.config.crypto,
            "representation": self.config.representation,
            "messages_per_user": self.protocol.messages_per_user,
            "estimate": self.estimate.values.tolist(),
            "truth": self.truth.tolist(),
            "max_abs_error": self.max_abs_error,
            "rmse": self.rmse,
            "expected_std": self.estimate.expected_std.tolist(),
            "estimator_details": dict(self.estimate.extra),
            "hops": [h.to_json() for h in self.hops],
            "seconds": dict(self.seconds),
            **self.extra,
        }
        return json_document(body, {"seed": self.extra.get("seed"), **(metadata or {})})


def _chain_keys(
    config: PipelineConfig, channels: int, keys: Sequence[crypto.PartyKeys] | None
) -> tuple[list[list[crypto.LayerPrivateKey | None]], list[list[bytes]]]:
    """Layer keys and public routes of each channel's chain (all end at one analyzer)."""
    m = config.shufflers
    if config.crypto != "onion":
        return [[None] * (m + 1) for _ in range(channels)], [[b""] * (m + 1)] * channels
    if keys is not None:
        if len(keys) != m + 1:
            raise ConfigError(f"need {m + 1} party keys (m shufflers + analyzer), got {len(keys)}")
        chains = [list(keys)]
    else:
        analyzer = crypto.PartyKeys.generate(crypto.analyzer_name())
        chains = [
            [crypto.PartyKeys.generate(crypto.shuffler_name(i)) for i in range(m)] + [analyzer]
            for _ in range(channels)
        ]
    layer_keys: list[list[crypto.LayerPrivateKey | None]] = [
        [k.layer for k in chain] for chain in chains
    ]
    return layer_keys, [[k.layer.public_key for k in chain] for chain in chains]


class _Stopwatch:
    """Wall time of each stage of one run; announces every stage to ``on_stage``."""

    def __init__(self, on_stage: Callable[[str], None] | None) -> None:
        self._on_stage = on_stage
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str, key: str) -> Iterator[None]:
        if self._on_stage is not None:
            self._on_stage(name)
        t = time.perf_counter()
        yield
        self.seconds[key] = time.perf_counter() - t


@contextlib.contextmanager
def _counting(on_progress: Callable[[int, int], None] | None, total: int) -> Iterator[None]:
    """Announce ``(done, total)`` reports of the current stage as the crypto finishes them."""
    if on_progress is None:
        yield
        return
    done = 0
    on_progress(0, total)

    def advance(k: int) -> None:
        nonlocal done
        done += k
        on_progress(done, max(total, done))

    with crypto.report_progress(advance):
        yield


def check_held(estimate: Estimate, hops: Sequence[HopCounters]) -> Estimate:
    """A simulated run's estimate, lost (NaN, infinite std, ``reports_held`` in its extra) if
    a shuffler held a crowd below its threshold: the run sends one crowd per chain, so the
    held users are missing from whatever the estimator computed, and comparing it with the
    truth over every user would be wrong. (A deployment's analyzer, which estimates for the
    users that reached it, does not apply this.)

    Args:
        estimate: the analyzer's estimate.
        hops: the counters of every hop of the run.

    Returns:
        ``estimate`` itself if no report was held, else the lost estimate.
    """
    held = sum(h.held for h in hops)
    return lost_estimate(estimate, reports_held=held) if held else estimate


def check_drops(hops: Sequence[HopCounters], sent: Sequence[int]) -> list[str]:
    """The in-process drop check: what is wrong with one run's counters (empty: nothing).

    The rules of the services' signed count statements (``esa.net.check_chain``):
    every hop's counts add up (a shuffler's received − invalid − replayed − held +
    fakes_added = forwarded; the analyzer's received − invalid − replayed = forwarded), the
    first shuffler of chain c received the ``sent[c]`` reports the encoders sealed for it,
    each later shuffler received what the one before forwarded, and the analyzer received
    what the last shuffler of every chain forwarded. A report removed or added on the way
    (an interceptor modelling a malicious party or network) breaks one of these, and the
    estimate has then lost users or fakes it cannot tell apart: the run says so.

    Args:
        hops: every chain's shufflers in chain order, then the analyzer (as run_pipeline
            lists them).
        sent: reports the encoders sealed for each chain.
    """
    *shufflers, analyzer = hops
    problems = []
    for h in shufflers:
        if h.received - h.invalid - h.replayed - h.held + h.fakes_added != h.forwarded:
            problems.append(f"{_hop_name(h, len(sent))} counts do not add up: {h.to_json()}")
    if analyzer.received - analyzer.invalid - analyzer.replayed != analyzer.forwarded:
        problems.append(f"analyzer counts do not add up: {analyzer.to_json()}")
    last_forwarded = 0
    before = ""
    for c, chain_sent in enumerate(sent):
        before = f"the encoders sent {chain_sent}"
        forwarded = chain_sent
        for h in (h for h in shufflers if h.channel == c):
            if h.received != forwarded:
                problems.append(f"{_hop_name(h, len(sent))} received {h.received} but {before}")
            before = f"{_hop_name(h, len(sent))} forwarded {h.forwarded}"
            forwarded = h.forwarded
        last_forwarded += forwarded
    if len(sent) > 1:
        before = f"the chains' last shufflers forwarded {last_forwarded}"
    if analyzer.received != last_forwarded:
        problems.append(f"analyzer received {analyzer.received} but {before}")
    return problems


def _hop_name(h: HopCounters, channels: int) -> str:
    return f"hop {h.hop}" if channels == 1 else f"chain {h.channel + 1} hop {h.hop}"


def _threshold_rngs(
    config: PipelineConfig, rng: np.random.Generator, count: int
) -> list[np.random.Generator | None]:
    """Each shuffler's generator for its noisy threshold: spawned from ``rng`` with
    ``seeded_fakes`` (spawned after the other stages' children, so a run without a noisy
    threshold draws exactly as before); ``None`` otherwise, so a live-like run draws the
    noise from the OS CSPRNG."""
    if config.threshold_noise is None or not config.seeded_fakes:
        return [None] * count
    return list(rng.spawn(count))


def _result(
    protocol: ShuffleProtocol,
    config: PipelineConfig,
    x: npt.NDArray[Any],
    hops: list[HopCounters],
    out: AnalyzerOutput,
    clock: _Stopwatch,
    sent: Sequence[int],
    on_mismatch: OnMismatch,
) -> RunResult:
    hops.append(out.counters)
    out = replace(out, estimate=check_held(out.estimate, hops))
    seconds = dict(clock.seconds)
    seconds["total"] = sum(seconds.values())
    problems = check_drops(hops, sent)
    facts = run_facts(
        protocol,
        hops,
        n=int(x.shape[0]),
        sent=sent,
        shufflers=config.shufflers,
        threshold=config.threshold,
        threshold_epsilon=config.threshold_noise,
    )
    # Validated before anything is released: "refuse" raises GuaranteeMismatch here.
    guarantee = run_guarantee(protocol, facts, on_mismatch=on_mismatch)
    return RunResult(
        protocol=protocol,
        config=config,
        n=int(x.shape[0]),
        estimate=out.estimate,
        truth=protocol.truth(widened(x)),
        hops=hops,
        analyzer_messages=out.messages,
        seconds=seconds,
        # What a TCP run's analyzer reports (simulations._tcp_run), from the same counters.
        extra={"drop_check": {"ok": not problems, "problems": problems}},
        guarantee=guarantee,
    )


def run_pipeline(
    protocol: ShuffleProtocol,
    values: npt.ArrayLike,
    config: PipelineConfig,
    *,
    rng: RNGLike = None,
    interceptors: Mapping[int, Interceptor] | None = None,
    keys: Sequence[crypto.PartyKeys] | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_mismatch: OnMismatch = "recompute",
    executor: Executor | None = None,
) -> RunResult:
    """Run every user's report through m shufflers to the analyzer.

    Every stage works in chunks: encoding (randomize, split, encode, seal) in chunks of
    :data:`USERS_PER_CHUNK` users, each drawing from its own child of the run's seed, and
    every hop's peeling (onion) in chunks of reports, as tasks on ``executor``; batches past
    ``config.memory_budget`` spill to disk. The estimate depends on the seed alone, not on
    the executor: a serial run, a local pool and a Dask cluster give the same estimate for
    one seed when the fakes are seeded (``config.seeded_fakes``, the default); the
    permutation, Split-Mix shares and ephemeral keys always come from the OS CSPRNG and
    change no estimate.

    Args:
        protocol: the configured mechanism.
        values: users' raw values (validated by the protocol).
        config: the deployment.
        rng: seed or generator for the statistics (randomizers, and fakes when
            ``config.seeded_fakes``; :data:`~protocols.RNGLike`: an int gives the same run
            as ``numpy.random.default_rng`` of it, None fresh OS entropy); children are
            spawned from it per stage.
        interceptors: ``{hop: fn(reports) -> reports}`` applied to the batch arriving at
            ``hop`` (0..m-1 shufflers of the first chain, m analyzer): how tests and audits
            model a malicious or colluding party on the path. An onion batch is handed over
            as an object array of ``bytes`` (the wire reports), an ideal one as its rows.
        keys: the parties' keys in route order (default: fresh in-memory keys).
        on_stage: called with each stage's name as it starts (progress display).
        on_progress: called with ``(done, total)`` reports of the current stage as their
            encryption or peeling finishes (onion runs; a progress bar for long stages).
        on_mismatch: what to do when the run differs from the protocol's calibration
            (fewer or more users arrived, other fakes): ``"recompute"`` (default) states
            the guarantee of the run that happened (:func:`esa.run_guarantee`: the
            protocol's own for the run, else ε_l, else ∞); ``"refuse"`` raises
            :class:`GuaranteeMismatch` instead of returning a result.
        executor: where the chunk tasks run: any :class:`concurrent.futures.Executor`
            (:func:`esa.resolve_executor` makes one for a Dask cluster); default the local
            pool of ``config.workers`` processes for onion runs (in this process for
            ``workers=1``), this process for ideal ones.

    Returns:
        The run, with :attr:`RunResult.privacy` the guarantee of this run.

    Raises:
        ParameterError: values outside the protocol's input domain, or an ``rng`` that is
            not :data:`~protocols.RNGLike`.
        ConfigError: an invalid interceptor hop, keys, representation or on_mismatch.
        GuaranteeMismatch: ``on_mismatch="refuse"`` and the run differs from the
            calibration.

    Example:
        1000 users' values through two shufflers to the analyzer, without encryption
        (``crypto="ideal"``):

        >>> import numpy as np
        >>> from esa import PipelineConfig, run_pipeline
        >>> from protocols import ProtocolSpec, build_protocol
        >>> spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=1000, domain=4)
        >>> protocol = build_protocol("hist_kr", spec)
        >>> values = np.arange(1000) % 4
        >>> config = PipelineConfig(shufflers=2, crypto="ideal")
        >>> result = run_pipeline(protocol, values, config, rng=7)
        >>> result.truth
        array([250., 250., 250., 250.])
        >>> [(hop.role, hop.forwarded) for hop in result.hops]
        [('shuffler', 1000), ('shuffler', 1000), ('analyzer', 1000)]
        >>> bool(np.all(np.abs(result.estimate.values - result.truth) < 100))
        True
    """
    on_mismatch = check_on_mismatch(on_mismatch)
    rng = as_generator(rng)
    x = protocol.validate_values(values)
    n = int(x.shape[0])
    m = config.shufflers
    interceptors = dict(interceptors or {})
    bad_hops = [h for h in interceptors if not 0 <= h <= m]
    if bad_hops:
        raise ConfigError(f"interceptor hops must lie in [0, {m}], got {bad_hops}")
    if config.representation == "tally":
        if interceptors or keys is not None:
            raise ConfigError("a tally run has no reports to intercept and no keys to use")
        return _run_tally(protocol, x, config, rng=rng, on_stage=on_stage, on_mismatch=on_mismatch)
    codec = make_codec(
        config.crypto,
        message_size=protocol.message_size,
        layers=m + 1,
        memory_budget=config.memory_budget,
        spill_dir=config.spill_dir,
    )
    channels = protocol.channels
    if keys is not None and channels != 1:
        raise ConfigError(f"{protocol.name} uses {channels} shuffler chains; keys= is for one")
    # One chain of m shufflers per channel (RSum_RM: one per precision); one analyzer.
    layer_keys, routes = _chain_keys(config, channels, keys)
    stats_rng, *fake_rngs = rng.spawn(m * channels + 1)
    threshold_rngs = _threshold_rngs(config, rng, m * channels)
    clock = _Stopwatch(on_stage)
    # Without an executor, an ideal run stays in this process: its stages are plain numpy,
    # cheaper than shipping their chunks (and a grid's task may not start processes).
    pool = executor
    if pool is None:
        pool = local_pool(config.workers if config.crypto == "onion" else 1)

    def intercepted(hop: int, batch: Any) -> Any:
        if hop not in interceptors:
            return batch
        return interceptors[hop](codec.wire_view(batch))

    with clock.stage("encode", "encode"):
        expected = round(protocol.messages_per_user * n)
        with _counting(on_progress, expected):
            batches = encode_users(
                protocol,
                codec,
                routes,
                x,
                rng=stats_rng,
                epoch=config.epoch,
                crowd_id=config.crowd_id,
                executor=pool,
            )
    sent = [codec.count(b) for b in batches]

    hops: list[HopCounters] = []
    for c in range(channels):
        batch = batches[c]
        for i in range(m):
            label = f"{i + 1}" if channels == 1 else f"{c + 1}.{i + 1}"
            with clock.stage(f"shuffler {label}/{m}", f"shuffler_{label}"):
                if c == 0:
                    batch = intercepted(i, batch)
                # Peel the batch, then wrap the fakes: a Split-Mix fake value is its shares.
                work = codec.count(batch) + config.fake_reports * reports_per_fake(protocol)
                shuffler = Shuffler(
                    hop=i,
                    codec=codec,
                    key=layer_keys[c][i],
                    route=routes[c],
                    protocol=protocol,
                    threshold=config.threshold,
                    fake_reports=config.fake_reports,
                    fake_rng=fake_rngs[c * m + i] if config.seeded_fakes else None,
                    replay_protection=config.replay_protection,
                    workers=config.workers,
                    channel=c,
                    threshold_noise=config.threshold_noise,
                    threshold_rng=threshold_rngs[c * m + i],
                    executor=pool,
                )
                with _counting(on_progress, work):
                    batch, counters = shuffler.process(batch, epoch=config.epoch)
                del shuffler  # its replay cache: a key per report, no longer needed
                counters.channel = c
                hops.append(counters)
        batches[c] = batch

    with clock.stage("analyze", "analyze"):
        batch = intercepted(m, codec.concat(batches))
        del batches
        analyzer = Analyzer(
            hop=m,
            codec=codec,
            key=layer_keys[0][m],
            protocol=protocol,
            replay_protection=config.replay_protection,
            workers=config.workers,
            executor=pool,
        )
        # Fake values actually released (a shuffler that held its whole crowd added none);
        # the counters count their reports.
        n_fakes = sum(h.fakes_added for h in hops) // reports_per_fake(protocol)
        with _counting(on_progress, codec.count(batch)):
            out = analyzer.process(batch, epoch=config.epoch, n_users=n, n_fakes=n_fakes)
    return _result(protocol, config, x, hops, out, clock, sent, on_mismatch)


def encode_chunk(
    protocol: ShuffleProtocol,
    codec: HopCodec,
    routes: Sequence[Sequence[bytes]],
    values: npt.NDArray[Any],
    seed: np.random.SeedSequence,
    epoch: int,
    crowd_id: int,
) -> list[npt.NDArray[np.uint8]]:
    """One chunk of users' reports: randomized from ``seed``, split, encoded, sealed.

    A task of the encoding stage (module-level, so any executor can run it): its result
    depends on its arguments alone, besides the OS CSPRNG's Split-Mix shares and ephemeral
    keys, which change no estimate.

    Args:
        protocol: the configured protocol.
        codec: the run's report format.
        routes: each chain's public layer keys.
        values: the chunk's users' values.
        seed: the chunk's own seed (a child of the run's).
        epoch: the epoch bound into every layer.
        crowd_id: the crowd id of every report.

    Returns:
        Each chain's reports of the chunk.
    """
    rng = np.random.default_rng(seed)
    messages = split_messages(protocol, protocol.randomize(values, rng=rng))
    channel_of = protocol.channel_of(messages) if len(routes) > 1 else None
    out = []
    with crypto.report_progress(_ignore):  # the stage counts whole chunks (may run here)
        for c, route in enumerate(routes):
            part = messages if channel_of is None else messages[channel_of == c]
            encoder = Encoder(protocol, codec, route, executor=InlineExecutor())
            out.append(encoder.seal_records(part, epoch=epoch, crowd_id=crowd_id, first_hop=0))
    return out


def encode_users(
    protocol: ShuffleProtocol,
    codec: HopCodec,
    routes: Sequence[Sequence[bytes]],
    values: npt.NDArray[Any],
    *,
    rng: RNGLike,
    epoch: int,
    crowd_id: int = 0,
    executor: Executor | None = None,
) -> list[Any]:
    """The encoding stage of :func:`run_pipeline`: every user's reports, chain by chain.

    Users are cut into chunks of :data:`USERS_PER_CHUNK`; chunk i is randomized from the
    i-th child of ``rng``'s seed (``SeedSequence.spawn``) and sealed by
    :func:`encode_chunk`, as a task on ``executor``. The messages depend on the seed alone,
    not on the executor: a TCP run encodes its users with this, so it sends what the
    in-process run of the same seed sends.

    Args:
        protocol: the configured protocol.
        codec: the report format.
        routes: each chain's public layer keys (one chain per protocol channel).
        values: the users' values (validated).
        rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`); its seed
            sequence is spawned, one child a chunk.
        epoch: the epoch bound into every layer.
        crowd_id: the crowd id of every report.
        executor: where the chunks run (default: the local pool of every core for onion
            reports, this process for ideal ones).

    Returns:
        Each chain's reports, as ``(k, L)`` records.
    """
    rng = as_generator(rng)
    x = np.asarray(values)
    n = int(x.shape[0])
    spans = list(chunks(n, USERS_PER_CHUNK)) or [slice(0, 0)]
    seeds = rng.bit_generator.seed_seq.spawn(len(spans))  # type: ignore[attr-defined]
    writers: list[Any] = []
    jobs = (
        (protocol, codec, routes, widened(x[s]), seed, epoch, crowd_id)
        for s, seed in zip(spans, seeds, strict=True)
    )
    if executor is None:
        executor = local_pool(None if codec.mode == "onion" else 1)
    pool = InlineExecutor() if n <= USERS_PER_CHUNK // 8 else executor
    for parts in map_ordered(pool, encode_chunk, jobs):
        if not writers:
            writers = [codec.writer(p.shape[1]) for p in parts]
        for writer, part in zip(writers, parts, strict=True):
            writer.append(part)
        crypto.announce_progress(sum(p.shape[0] for p in parts))
    return [w.finish() for w in writers]


def widened(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Integer values narrower than ``int64`` (a run's users' values kept compact,
    :func:`esa._data.compact_values`) as ``int64``: what protocols are handed, chunk by chunk."""
    if values.dtype.kind in "iu" and values.dtype.itemsize < 8:
        return values.astype(np.int64)
    return values


def _ignore(k: int) -> None:
    """A progress hook that drops what it is told."""


def _run_tally(
    protocol: ShuffleProtocol,
    x: npt.NDArray[Any],
    config: PipelineConfig,
    *,
    rng: np.random.Generator,
    on_stage: Callable[[str], None] | None,
    on_mismatch: OnMismatch,
) -> RunResult:
    """:func:`run_pipeline` with ``representation="tally"``: the same roles, on tallies."""
    if not protocol.supports_tally:
        raise ConfigError(
            f"{protocol.name}: its estimator reads individual messages, so it cannot run as a "
            "tally; use representation='reports'"
        )
    if protocol.channels != 1:
        raise ConfigError(f"{protocol.name} uses {protocol.channels} chains; tallies need one")
    n, m = int(x.shape[0]), config.shufflers
    codec = make_codec("ideal", message_size=protocol.message_size, layers=m + 1)
    stats_rng, *fake_rngs = rng.spawn(m + 1)
    threshold_rngs = _threshold_rngs(config, rng, m)
    clock = _Stopwatch(on_stage)

    with clock.stage("encode", "encode"):
        tally: MessageTally = protocol.tally_users(widened(x), rng=stats_rng)
    sent = [tally.messages]
    hops: list[HopCounters] = []
    for i in range(m):
        with clock.stage(f"shuffler {i + 1}/{m}", f"shuffler_{i + 1}"):
            shuffler = Shuffler(
                hop=i,
                codec=codec,
                key=None,
                route=[b""] * (m + 1),
                protocol=protocol,
                threshold=config.threshold,
                fake_reports=config.fake_reports,
                fake_rng=fake_rngs[i] if config.seeded_fakes else None,
                threshold_noise=config.threshold_noise,
                threshold_rng=threshold_rngs[i],
            )
            tally, counters = shuffler.process_tally(tally)
            hops.append(counters)
    with clock.stage("analyze", "analyze"):
        analyzer = Analyzer(hop=m, codec=codec, key=None, protocol=protocol)
        n_fakes = sum(h.fakes_added for h in hops) // reports_per_fake(protocol)
        out = analyzer.process_tally(tally, n_users=n, n_fakes=n_fakes)
    return _result(protocol, config, x, hops, out, clock, sent, on_mismatch)
