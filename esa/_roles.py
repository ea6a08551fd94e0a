"""The three roles of ESA: Encoder, Shuffler, Analyzer (the report path).

Each role is written once against :class:`~esa._codec.HopCodec`, so the same logic runs on
real onion layers and on the ``ideal`` plaintext stand-in. Randomness is split explicitly:

* the statistics (users' randomizers; fakes in a reproducible simulation) use a numpy
  Generator the caller passes in, or one seeded from the seed it passes
  (:data:`protocols.RNGLike`);
* the shuffle permutation always comes from the OS CSPRNG (:func:`crypto.secure_permutation`),
  and a live shuffler (no ``fake_rng`` given) draws its fakes from a ChaCha20 stream keyed by
  the OS (:func:`crypto.csprng_generator`).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

import crypto
from protocols import Estimate, MessageTally, RNGLike, ShuffleProtocol, as_generator

from ._codec import HopCodec, ReplayCache, distinct_sorted
from ._errors import ConfigError, check_integer, check_workers
from ._store import chunks, release
from ._threshold import NoisyThreshold, check_threshold_epsilon

__all__ = [
    "Analyzer",
    "AnalyzerOutput",
    "Encoder",
    "HopCounters",
    "Shuffler",
    "reports_per_fake",
    "split_messages",
]

#: Payloads the analyzer unpads and decodes at a time.
DECODE_ROWS = 2**20


@dataclass(slots=True)
class HopCounters:
    """Per-hop accounting of one epoch, in reports. Every received report lands in exactly
    one of ``invalid``, ``replayed``, ``held`` or ``forwarded``, and forwarded = received −
    invalid − replayed − held + ``fakes_added``: fake *reports*, so a Split-Mix fake value
    counts its ``shares`` (:func:`reports_per_fake`). ``noisy_threshold`` says the hop
    decided its crowds with a noisy threshold (:mod:`esa._threshold`; never the noise drawn);
    :meth:`to_json` lists it only when True."""

    hop: int
    role: str
    channel: int = 0
    received: int = 0
    invalid: int = 0
    replayed: int = 0
    held: int = 0
    fakes_added: int = 0
    forwarded: int = 0
    noisy_threshold: bool = False

    def to_json(self) -> dict[str, Any]:
        """The counters as a JSON object.

        Returns:
            One key per field (``noisy_threshold`` only when True).
        """
        out = asdict(self)
        if not self.noisy_threshold:
            del out["noisy_threshold"]
        return out


def reports_per_fake(protocol: ShuffleProtocol) -> int:
    """Reports one fake value travels as: its Split-Mix shares, else 1.

    Args:
        protocol: the configured protocol.

    Returns:
        ``share_spec.shares`` if the protocol splits its values, else 1.
    """
    return 1 if protocol.share_spec is None else protocol.share_spec.shares


def split_messages(protocol: ShuffleProtocol, messages: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Apply the protocol's Split-Mix (if any): each value becomes m share messages.

    Shares come from the OS CSPRNG: they never change the sum, so a seeded simulation
    stays reproducible while the shares stay unpredictable.

    Args:
        protocol: the configured protocol.
        messages: the encoded messages (1-D values, or rows whose last column is the value).

    Returns:
        ``messages`` itself without Split-Mix; else m rows per message, each carrying one share
        in place of the value (shares of one value adjacent).
    """
    spec = protocol.share_spec
    if spec is None:
        return messages
    msgs = np.asarray(messages)
    if msgs.ndim == 1:
        return crypto.split_mix(msgs, modulus=spec.modulus, shares=spec.shares).reshape(-1)
    shares = crypto.split_mix(msgs[:, -1], modulus=spec.modulus, shares=spec.shares)
    out = np.repeat(msgs, spec.shares, axis=0)
    out[:, -1] = shares.reshape(-1)
    return out


class Encoder:
    """The client side, vectorized over users: randomize, split, encode, pad, wrap."""

    def __init__(
        self,
        protocol: ShuffleProtocol,
        codec: HopCodec,
        route: Sequence[bytes],
        *,
        workers: int | None = 1,
        executor: Executor | None = None,
    ) -> None:
        self.protocol = protocol
        self.codec = codec
        self.route = list(route)
        self.workers = workers
        self.executor = executor

    def encode(
        self,
        values: npt.ArrayLike,
        *,
        rng: RNGLike,
        epoch: int,
        crowd_id: int = 0,
    ) -> Any:
        """Every user's reports for hop 0 (one report per message).

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).
            epoch: the epoch bound into every layer.
            crowd_id: the crowd id of every report.

        Returns:
            The reports, in the codec's representation.

        Raises:
            ParameterError: values outside the protocol's input domain, or an ``rng`` that
                is not :data:`~protocols.RNGLike`.
        """
        rng = as_generator(rng)
        return self.seal_messages(
            self.messages(values, rng=rng), epoch=epoch, crowd_id=crowd_id, first_hop=0
        )

    def messages(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Every user's messages: randomized, then split into Split-Mix shares if asked.

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The protocol's messages (rows, or share rows under Split-Mix).

        Raises:
            ParameterError: values outside the protocol's input domain, or an ``rng`` that
                is not :data:`~protocols.RNGLike`.
        """
        rng = as_generator(rng)
        return split_messages(self.protocol, self.protocol.randomize(values, rng=rng))

    def seal_messages(
        self, messages: npt.NDArray[Any], *, epoch: int, crowd_id: int, first_hop: int
    ) -> Any:
        """Encode, pad and seal ``messages`` into reports for hop ``first_hop`` onwards.

        Args:
            messages: protocol messages (:meth:`messages`, or a shuffler's fakes).
            epoch: the epoch bound into every layer.
            crowd_id: the crowd id of every report.
            first_hop: global index of the first hop the reports go to.

        Returns:
            One report per message, as a client sends them: onion, a 1-D object array of
            ``bytes``; ideal, the rows (:meth:`~esa._codec.HopCodec.wire_view`).
        """
        records = self.seal_records(messages, epoch=epoch, crowd_id=crowd_id, first_hop=first_hop)
        return self.codec.wire_view(records)

    def seal_records(
        self, messages: npt.NDArray[Any], *, epoch: int, crowd_id: int, first_hop: int
    ) -> npt.NDArray[np.uint8]:
        """:meth:`seal_messages` as fixed-width records: one report per row of a ``uint8``
        matrix, what the hops pass each other (its bytes cost the ciphertext, nothing more).

        Args:
            messages: protocol messages (:meth:`messages`, or a shuffler's fakes).
            epoch: the epoch bound into every layer.
            crowd_id: the crowd id of every report.
            first_hop: global index of the first hop the reports go to.

        Returns:
            The ``(k, L)`` records.
        """
        rows = self.protocol.encode(messages)
        payloads = crypto.pad_rows(rows, self.protocol.message_size)
        crowds = np.full(payloads.shape[0], crowd_id, dtype=np.uint64)
        records: npt.NDArray[np.uint8] = self.codec.seal(
            payloads,
            crowds,
            epoch=epoch,
            route=self.route[first_hop:],
            first_hop=first_hop,
            workers=self.workers,
            executor=self.executor,
        )
        return records


class Shuffler:
    """One shuffler: drop invalid and replayed reports, peel, threshold, add fakes, permute.

    Args:
        hop: 0-based index of this shuffler in the chain.
        codec: the report format.
        key: this shuffler's X25519 layer key (``None`` only for the ideal codec).
        route: public layer keys of every hop (needed to encrypt fakes for the hops after
            this one; the entries up to ``hop`` are unused).
        protocol: the protocol, for its uniform fake-message sampler.
        threshold: a crowd with fewer than ``threshold`` reports is held, not released.
        threshold_noise: ε_t of a noisy threshold (``None``, the default: the plain one): a
            crowd of c reports is released iff c + Z ≥ ``threshold``, Z ~ DLap(e^{−ε_t})
            drawn per crowd per epoch; the decision is ε_t-DP per report
            (:class:`esa._threshold.NoisyThreshold`). Needs ``threshold`` >= 1.
        threshold_rng: generator for Z in a reproducible simulation, or a seed for one
            (:data:`~protocols.RNGLike`); ``None`` (the default, and what a live party uses)
            draws Z from the OS CSPRNG, not from a numpy generator.
        fake_reports: n_r uniform fake reports added to each released crowd (MURS).
        fake_rng: generator for the fakes' *values* in a reproducible simulation, or a seed
            for one (:data:`~protocols.RNGLike`), kept for every batch; ``None`` (the
            default, and what a live party uses) draws them from the OS CSPRNG, not from a
            numpy generator.
        replay_protection: test-only switch; ``False`` lets replays through.
        workers: processes for peeling/wrapping (``None``: all cores).
        channel: which of the protocol's chains this shuffler belongs to (RSum_RM: one chain
            per precision); its fakes look like that chain's traffic.
        executor: where the peeling and the fakes' wrapping run, chunk by chunk (default:
            the local pool of ``workers`` processes).

    Raises:
        ConfigError: a hop outside [0, codec.layers − 2], a route not of ``codec.layers``
            keys, a negative or non-integer threshold, fake count, channel or worker count,
            an onion codec without a key, or a ``threshold_noise`` not a finite number > 0
            or given with threshold 0.
        ParameterError: a ``fake_rng`` or ``threshold_rng`` that is not
            :data:`~protocols.RNGLike`.
    """

    def __init__(
        self,
        *,
        hop: int,
        codec: HopCodec,
        key: crypto.LayerPrivateKey | None,
        route: Sequence[bytes],
        protocol: ShuffleProtocol,
        threshold: int = 0,
        fake_reports: int = 0,
        fake_rng: RNGLike = None,
        replay_protection: bool = True,
        workers: int | None = 1,
        channel: int = 0,
        threshold_noise: float | None = None,
        threshold_rng: RNGLike = None,
        executor: Executor | None = None,
    ) -> None:
        # The codec's last layer is the analyzer's: a shuffler at or past it would find
        # every honest report of the wrong size and drop them all as invalid.
        hop = check_integer(hop, f"shuffler hop (of {codec.layers} layers)", 0, codec.layers - 2)
        self.threshold = check_integer(threshold, "threshold", 0)
        eps_t = check_threshold_epsilon(threshold_noise)
        self.noisy = None if eps_t is None else NoisyThreshold(self.threshold, eps_t)
        # None keeps its meaning here (the OS CSPRNG, per draw); a seed becomes one generator.
        self.threshold_rng = None if threshold_rng is None else as_generator(threshold_rng)
        self.fake_reports = check_integer(fake_reports, "fake_reports", 0)
        self.channel = check_integer(channel, "channel", 0, protocol.channels - 1)
        self.workers = check_workers(workers)
        if codec.mode == "onion" and key is None:
            raise ConfigError(f"shuffler {hop}: onion mode needs the shuffler's layer key")
        if len(route) != codec.layers:
            raise ConfigError(
                f"shuffler {hop}: route must list {codec.layers} hops' keys (every shuffler's "
                f"and the analyzer's), got {len(route)}"
            )
        self.hop = hop
        self.codec = codec
        self.key = key
        self.route = list(route)
        self.protocol = protocol
        self.fake_rng = None if fake_rng is None else as_generator(fake_rng)
        self.replay_protection = replay_protection
        self.held: list[Any] = []
        self._seen: dict[int, ReplayCache] = {}
        self.executor = executor
        self._fake_encoder = Encoder(
            protocol, codec, self.route, workers=self.workers, executor=executor
        )

    def process(self, reports: Any, *, epoch: int) -> tuple[Any, HopCounters]:
        """Handle one batch of ``epoch``; returns the permuted output and the counters.

        A crowd smaller than the threshold is held back (:attr:`held`) and not forwarded; every
        other crowd gets the shuffler's fakes.

        Args:
            reports: the batch, as received.
            epoch: the epoch every layer must be bound to.

        Returns:
            ``(out, counters)``: the forwarded reports in a uniformly random order, and the hop's
            counters.
        """
        counters = HopCounters(hop=self.hop, role="shuffler", received=len(reports))
        seen = self._replay_cache(epoch) if self.replay_protection else None
        opened = self.codec.open(
            reports,
            key=self.key,
            epoch=epoch,
            hop=self.hop,
            seen=seen,
            workers=self.workers,
            executor=self.executor,
        )
        counters.invalid, counters.replayed = opened.invalid, opened.replayed
        if seen is not None:
            seen.add(opened.replay_keys)
        # Metadata is gone by construction: only the peeled reports and their crowd ids
        # survive; arrival order is destroyed by the permutation below.
        parts = []
        crowds = distinct_sorted(opened.crowd_ids)
        for crowd in crowds:
            if crowds.size == 1:  # the usual single-crowd batch: no index, no copy
                members, size = opened.forward, self.codec.count(opened.forward)
            else:
                index = np.flatnonzero(opened.crowd_ids == crowd)
                members, size = self.codec.take(opened.forward, index), int(index.size)
            if not self._releases(size, counters):
                counters.held += size
                self.held.append(members)
                continue
            parts.append(members)
            if self.fake_reports:
                fakes = self._fakes(self.fake_reports, epoch=epoch, crowd_id=int(crowd))
                parts.append(fakes)
                counters.fakes_added += self.codec.count(fakes)
        if not parts:
            return self.codec.concat([self.codec.take(opened.forward, np.arange(0))]), counters
        # One chunk of the permuted output at a time: no joined copy of the parts.
        total = sum(self.codec.count(p) for p in parts)
        # Half a word per report where it fits: 0.4 GB instead of 0.8 at 10^8 reports.
        order = crypto.secure_permutation(total, dtype=np.uint32 if total <= 2**32 else np.int64)
        out = self.codec.permute(parts, order)
        counters.forwarded = self.codec.count(out)
        return out, counters

    def process_tally(self, tally: MessageTally) -> tuple[MessageTally, HopCounters]:
        """:meth:`process` for the ``tally`` representation (one crowd, ideal channel).

        A tally summarizes the multiset a permutation leaves, so there is nothing to peel,
        replay or permute; the threshold and the fakes apply exactly as to reports.

        Args:
            tally: the summary of the messages received.

        Returns:
            ``(tally, counters)``: the summary with the fakes added (empty if below the
            threshold), and the hop's counters.
        """
        counters = HopCounters(hop=self.hop, role="shuffler", received=tally.messages)
        if not self._releases(tally.messages, counters):
            counters.held = tally.messages
            return tally.empty_like(), counters
        if self.fake_reports:
            rng = self.fake_rng if self.fake_rng is not None else crypto.csprng_generator()
            fakes = self.protocol.tally_fakes(self.fake_reports, rng=rng)
            tally = tally + fakes
            counters.fakes_added = fakes.messages  # in reports: a fake value's shares
        counters.forwarded = tally.messages
        return tally, counters

    def _releases(self, size: int, counters: HopCounters) -> bool:
        """Whether a crowd of ``size`` reports is released: ``size >= threshold``, or with a
        noisy threshold size + Z >= threshold (fresh Z; ``counters`` record that it was
        noisy, not Z)."""
        if self.noisy is None:
            return size >= self.threshold
        counters.noisy_threshold = True
        return self.noisy.releases(size, rng=self.threshold_rng)

    def _fakes(self, count: int, *, epoch: int, crowd_id: int) -> Any:
        """n_r uniform fakes, encrypted for the hops after this one like a user's report."""
        rng = self.fake_rng if self.fake_rng is not None else crypto.csprng_generator()
        fakes = self.protocol.sample_channel_fakes(count, channel=self.channel, rng=rng)
        messages = split_messages(self.protocol, fakes)
        return self._fake_encoder.seal_records(
            messages, epoch=epoch, crowd_id=crowd_id, first_hop=self.hop + 1
        )

    def _replay_cache(self, epoch: int) -> ReplayCache:
        # One cache per epoch, every epoch kept: keeping only the latest one let a batch of
        # epoch 7, then one of epoch 6, then the first again through twice (its reports
        # authenticate for epoch 7, and epoch 7's cache was gone). The memory is that of
        # the keys this object accepted; the services make one Shuffler per epoch.
        cache = self._seen.get(epoch)
        if cache is None:
            cache = self._seen[epoch] = self.codec.new_replay_cache()
        return cache


@dataclass(slots=True)
class AnalyzerOutput:
    estimate: Estimate
    messages: npt.NDArray[Any]
    counters: HopCounters
    extra: dict[str, Any] = field(default_factory=dict)


def check_shares(
    protocol: ShuffleProtocol, estimate: Estimate, received: int, n_users: int, n_fakes: int
) -> Estimate:
    """The estimate if every Split-Mix share arrived, else a lost one (NaN, std ∞).

    A Split-Mix protocol sends a fixed number of shares per user and per fake value, and its
    estimator sums them mod q: one share lost on the way (dropped as malformed, replayed,
    held) or one injected leaves that sum uniform on Z_q, so no estimate survives and none
    may be reported as if it did. ``extra`` says how many shares were expected and arrived.
    """
    spec = protocol.share_spec
    assert spec is not None
    expected = round(protocol.messages_per_user * n_users) + spec.shares * n_fakes
    extra = {**estimate.extra, "shares_expected": expected, "shares_received": received}
    if received == expected:
        return replace(estimate, extra={**extra, "complete": True})
    return lost_estimate(replace(estimate, extra=extra))


def lost_estimate(estimate: Estimate, **why: Any) -> Estimate:
    """``estimate`` marked as lost: values NaN, std ∞, ``complete`` False, plus ``why``.

    For a run whose reports did not all reach the estimator in a way it cannot correct
    for: the number it would compute is not an estimate of anything."""
    return Estimate(
        values=np.full(estimate.values.shape, np.nan),
        expected_std=np.full(estimate.expected_std.shape, np.inf),
        messages_used=estimate.messages_used,
        extra={**estimate.extra, **why, "complete": False},
    )


class Analyzer:
    """Peel the last layer, decode, drop malformed messages, estimate (removing fakes)."""

    def __init__(
        self,
        *,
        hop: int,
        codec: HopCodec,
        key: crypto.LayerPrivateKey | None,
        protocol: ShuffleProtocol,
        replay_protection: bool = True,
        workers: int | None = 1,
        executor: Executor | None = None,
    ) -> None:
        if codec.mode == "onion" and key is None:
            raise ConfigError("analyzer: onion mode needs the analyzer's layer key")
        # The analyzer peels the codec's last layer; at any other hop every honest report
        # would have the wrong size and be dropped as invalid.
        last = codec.layers - 1
        self.hop = check_integer(
            hop, f"analyzer hop (the last of {codec.layers} layers)", last, last
        )
        self.codec = codec
        self.key = key
        self.protocol = protocol
        self.replay_protection = replay_protection
        self.workers = check_workers(workers)
        self.executor = executor

    def process(self, reports: Any, *, epoch: int, n_users: int, n_fakes: int) -> AnalyzerOutput:
        """Peel the last layer, decode the messages and estimate from them.

        Reports that fail to open, unpad or decode are counted as invalid and dropped.

        Args:
            reports: the batch the last shuffler forwarded.
            epoch: the epoch every layer must be bound to.
            n_users: the number of users, as the estimator needs it.
            n_fakes: the fake values the shufflers added, which the estimator removes.

        Returns:
            The estimate, the decoded valid messages and the hop's counters.
        """
        counters = HopCounters(hop=self.hop, role="analyzer", received=len(reports))
        opened = self.codec.open(
            reports,
            key=self.key,
            epoch=epoch,
            hop=self.hop,
            seen=self.codec.new_replay_cache() if self.replay_protection else None,
            workers=self.workers,
            executor=self.executor,
        )
        counters.invalid, counters.replayed = opened.invalid, opened.replayed
        forward = opened.forward
        del opened  # its replay keys: a word per report
        padded, malformed = self.codec.payload_rows(forward)
        # A chunk at a time: unpadding and decoding 10^8 payloads at once would hold
        # several copies of them. The valid messages go straight into one array (joining
        # the chunks' would hold them twice, a word per report each at 10^8).
        messages: npt.NDArray[Any] | None = None
        filled = 0
        for s in chunks(padded.shape[0], DECODE_ROWS) if padded.shape[0] else [slice(0, 0)]:
            payloads, ok = crypto.unpad_rows(padded[s], self.protocol.message_size)
            decoded, valid = self.protocol.decode(np.ascontiguousarray(payloads))
            valid = valid & ok
            malformed += int((~valid).sum())
            kept = decoded[valid]
            if messages is None:
                messages = np.empty((padded.shape[0], *kept.shape[1:]), dtype=kept.dtype)
            elif kept.dtype != messages.dtype:  # as joining them would: the wider dtype
                messages = messages.astype(np.result_type(messages, kept))
            messages[filled : filled + kept.shape[0]] = kept
            filled += kept.shape[0]
            release(padded)
        assert messages is not None
        messages = messages[:filled]
        counters.invalid += malformed
        counters.forwarded = int(messages.shape[0])  # messages that reached the estimator
        estimate = self.protocol.estimate(messages, n=n_users, n_fakes=n_fakes)
        if self.protocol.share_spec is not None:
            estimate = check_shares(self.protocol, estimate, messages.shape[0], n_users, n_fakes)
        return AnalyzerOutput(estimate=estimate, messages=messages, counters=counters)

    def process_tally(self, tally: MessageTally, *, n_users: int, n_fakes: int) -> AnalyzerOutput:
        """:meth:`process` for the ``tally`` representation: estimate from the summary.

        Args:
            tally: the summary the last shuffler forwarded.
            n_users: the number of users, as the estimator needs it.
            n_fakes: the fake values the shufflers added, which the estimator removes.

        Returns:
            The estimate, no messages, and the hop's counters.
        """
        counters = HopCounters(
            hop=self.hop, role="analyzer", received=tally.messages, forwarded=tally.messages
        )
        estimate = self.protocol.estimate_tally(tally, n=n_users, n_fakes=n_fakes)
        if self.protocol.share_spec is not None:
            estimate = check_shares(self.protocol, estimate, tally.messages, n_users, n_fakes)
        return AnalyzerOutput(estimate=estimate, messages=np.empty(0), counters=counters)
