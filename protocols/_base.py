"""The protocol interface every shuffle-model mechanism implements.

A protocol supplies, for its mechanism: the client randomizer (vectorized over users), the
encoding of its messages to fixed-size bytes and back, the uniform fake-message sampler MURS
shufflers need, the estimator (which removes the expected contribution of fakes), and its
privacy accounting. The roles in :mod:`esa` only ever talk to this interface, so adding a
protocol never touches the shuffler or the crypto.

Messages are numpy arrays whose first axis indexes messages (one row per message, any
number of messages per user); the byte encoding is an ``(k, message_size)`` ``uint8`` array.
"""

from __future__ import annotations

import abc
import enum
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from ._errors import NeedsPositiveDelta, ParameterError
from ._random import RNGLike, as_generator

__all__ = [
    "Calibration",
    "CountNoise",
    "Estimate",
    "HonestUsersBound",
    "InputKind",
    "MessageTally",
    "PrivacyGuarantee",
    "RandomizerFamily",
    "ShareSpec",
    "ShuffleProtocol",
    "check_delta",
    "check_epsilon",
    "check_gamma",
    "check_n",
]


class InputKind(enum.Enum):
    """What a user's value is, so simulations can generate data and check inputs."""

    BINARY = "binary"  # values in {0, 1}
    CATEGORICAL = "categorical"  # values in [0, d), 0-based
    REAL01 = "real01"  # values in [0, 1]
    REAL_PM1 = "real_pm1"  # values in [-1, 1]
    SET = "set"  # boolean membership rows, shape (n, d)


@dataclass(frozen=True, slots=True)
class RandomizerFamily:
    """The family of a protocol's local randomizer, as the accountants and the audit take it.

    Attributes:
        kind: ``"krr"`` (k-ary randomized response: the k-RR accountants apply and uniform
            fakes are counted exactly) or ``"generic"`` (any ε_l-LDP randomizer: generic
            bounds, fakes not counted).
        k: domain of the k-RR randomizer; for ``"generic"``, max(2, the protocol's domain).
        note: how the protocol comes to be accounted this way ("" for a declared k-RR).
    """

    kind: Literal["krr", "generic"]
    k: int
    note: str = ""


@dataclass(frozen=True, slots=True)
class PrivacyGuarantee:
    """The (ε, δ) a protocol's configuration gives, and the theorem that proves it.

    Attributes:
        epsilon_central: ε of the shuffled output against the analyzer (no collusion).
        epsilon_local: ε of one user's messages if every shuffler colludes (pure LDP), or
            ``inf`` when the messages alone give no local guarantee (e.g. Split-Mix shares).
        delta: δ of the central guarantee.
        bound: name of the theorem or accountant that gives ``epsilon_central``.
    """

    epsilon_central: float
    epsilon_local: float
    delta: float
    bound: str


@dataclass(frozen=True, slots=True)
class Calibration:
    """The run a protocol's :attr:`~ShuffleProtocol.privacy` was calibrated for.

    Attributes:
        n: honest users the guarantee counts on.
        fake_reports_total: uniform fake values (over every shuffler) it counts on.
        shufflers: shufflers of the calibration (``None`` when the protocol was configured
            without one, e.g. by its constructor).
    """

    n: int
    fake_reports_total: int
    shufflers: int | None = None


@dataclass(frozen=True, slots=True)
class HonestUsersBound:
    """What :meth:`ShuffleProtocol.honest_users_bound` knows for a number of honest users.

    Attributes:
        epsilon_upper: a proven upper bound on the victim's ε.
        bound: the accountant's name.

    A lower bound is stated at a δ, so it comes from ``honest_users_lower`` instead (the
    protocols that have one: Cnt_SGM, Cnt_PURE, RSum_PURE; see :mod:`protocols.accounting`).
    """

    epsilon_upper: float
    bound: str


@dataclass(frozen=True, slots=True)
class CountNoise:
    """The law of a counter's error, one user at a time (:meth:`ShuffleProtocol.count_noise`).

    The count estimate's error is ĉ − c = Σ_i d_i over the n users, the d_i independent with
    mean 0. A user holding 0 contributes d with the central moments below; a user holding 1
    contributes −d in law (the mirror image), so the even moments of the error do not depend
    on the data and its third cumulant is (n − 2c)·``third``.

    Attributes:
        variance: E d².
        third: E d³ (0 for a symmetric law).
        fourth: E d⁴.
    """

    variance: float
    third: float
    fourth: float

    def moments(self, n: int, count: float) -> tuple[float, float, float]:
        """(E e², E e³, E e⁴) of the error e = Σ_i d_i of n users of whom ``count`` hold 1."""
        v = self.variance
        return (
            n * v,
            (n - 2.0 * count) * self.third,
            n * self.fourth + 3.0 * n * (n - 1.0) * v * v,
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """An estimator's output.

    Attributes:
        values: the estimates (one entry for counts and sums, d entries for histograms).
        expected_std: the closed-form standard deviation of each entry, same shape.
        messages_used: how many decoded messages went into the estimate.
        extra: protocol-specific diagnostics (JSON-serializable scalars).
    """

    values: npt.NDArray[np.float64]
    expected_std: npt.NDArray[np.float64]
    messages_used: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShareSpec:
    """Split-Mix secret sharing a protocol asks the encoder to apply (Ishai et al. FOCS'06).

    ``protocols`` cannot import ``crypto``; a protocol that needs Split-Mix declares it here.
    Its :meth:`ShuffleProtocol.randomize` then returns values in Z_q, either as a 1-D integer
    array or as a 2-D array whose last column is the value and whose other columns are labels.
    The encoder splits each value into ``shares`` uniform shares summing to it mod ``modulus``
    (labels copied onto every share), each sent as its own report; ``encode``/``decode`` and
    ``estimate`` then work on share messages, and the estimator sums shares mod ``modulus``.

    Attributes:
        modulus: q >= 2.
        shares: m >= 2 shares per value.
    """

    modulus: int
    shares: int

    def __post_init__(self) -> None:
        check_n(self.modulus, "modulus", 2)
        check_n(self.shares, "shares", 2)

    @staticmethod
    def shares_for(*, sigma: float, modulus: int, users: int) -> int:
        """Shares per value that make the shuffled shares 2^{−σ}-close to their sum.

        Balle, Bell, Gascón, Nissim's analysis of Split-Mix ("Private Summation in the
        Multi-Message Shuffle Model", CCS'20, arXiv 2002.00817; first as "Improved
        Summation from Shuffling", arXiv 1909.11225): with
        ``users`` ≥ 3 honest users each splitting a value of Z_q into m shares, the shuffled
        multiset is 2^{−σ}-close in total variation to one determined by the sum alone when

            m ≥ (2σ + log₂ q)/(log₂ users − log₂ e) + 1

        (at least 2).

        Args:
            sigma: the statistical security parameter σ.
            modulus: the share modulus q.
            users: the honest users, at least 3.

        Returns:
            The number of shares m, at least 2.

        Raises:
            ParameterError: fewer than 3 users.
        """
        users = check_n(users, "users", 3)
        need = (2.0 * sigma + math.log2(modulus)) / (math.log2(users) - math.log2(math.e)) + 1
        return max(2, math.ceil(need))


@dataclass(frozen=True, slots=True)
class MessageTally:
    """An additive summary of a multiset of messages: everything a protocol's estimator reads.

    A shuffler's output is, by definition, a uniformly random ordering of a multiset; an
    analyzer whose estimate is a function of additive per-message statistics (row counts,
    cell counts) sees exactly the information in this summary. Protocols that can say so
    (:meth:`ShuffleProtocol.tally`) may run through the ``ideal`` pipeline as tallies
    instead of one report per message — how 10^8–10^11-message runs fit one machine.

    Attributes:
        counts: protocol-defined ``int64`` counts; tallies of one protocol add elementwise.
        messages: how many messages are summarized.
    """

    counts: npt.NDArray[np.int64]
    messages: int

    def __add__(self, other: MessageTally) -> MessageTally:
        if self.counts.shape != other.counts.shape:
            raise ParameterError(
                f"tallies of different shapes: {self.counts.shape} and {other.counts.shape}"
            )
        return MessageTally(self.counts + other.counts, self.messages + other.messages)

    def empty_like(self) -> MessageTally:
        """The tally of no message, same shape.

        Returns:
            A tally of zeros of this one's shape, and no message.
        """
        return MessageTally(np.zeros_like(self.counts), 0)


#: Users per block when a tally is built from drawn true messages; the default
#: :meth:`ShuffleProtocol.tally_users` sizes its blocks to about ``TALLY_MESSAGES`` messages.
TALLY_BLOCK = 1 << 16
TALLY_MESSAGES = 1 << 20


class ShuffleProtocol(abc.ABC):
    """One shuffle-model mechanism, configured: randomizer, codec, fakes, estimator, privacy.

    Subclasses validate every parameter at construction; applying a configured protocol to
    valid data never fails in a data-dependent way.
    """

    name: ClassVar[str]
    input_kind: ClassVar[InputKind]
    #: Randomizer family the amplification bounds are chosen for: ``"krr"`` (k-ary
    #: randomized response over :attr:`domain`) or ``"generic"`` (any ε_l-LDP randomizer).
    family: ClassVar[str] = "generic"
    #: Split-Mix the encoder applies to this protocol's randomized values (None: no sharing).
    share_spec: ShareSpec | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Every estimator takes the same (n, n_fakes) and divides by or debiases with them: a
        # wrong one gives a silently wrong estimate, so they are checked here for every
        # protocol (including later ones) instead of in each module.
        for attr in ("estimate", "estimate_tally"):
            method = cls.__dict__.get(attr)
            if callable(method) and not getattr(method, "_checks_counts", False):
                setattr(cls, attr, _checking_counts(method))

    def randomizer_family(self) -> RandomizerFamily:
        """How an audit accounts this protocol's randomizer: a declared ``family = "krr"`` is
        k-RR over the domain; anything else is generic (override where the randomizer is
        k-RR on something else, as local hashing is on hashed values).

        Returns:
            The family and domain an audit accounts the randomizer with (and, for a generic one,
            why).
        """
        if self.family == "krr":
            return RandomizerFamily("krr", self.domain)
        return RandomizerFamily(
            "generic",
            max(2, self.domain),
            f"{self.name} declares no randomizer family: generic ε_l-LDP bounds, fakes not counted",
        )

    @property
    @abc.abstractmethod
    def domain(self) -> int:
        """Size of the input domain (2 for counting, d for histograms, buckets for sums)."""

    @property
    @abc.abstractmethod
    def message_size(self) -> int:
        """Bytes in one encoded message; every message of the protocol has this length."""

    @property
    @abc.abstractmethod
    def messages_per_user(self) -> float:
        """Expected number of messages one user sends; where it depends on the user's value,
        the largest over values (Cnt_2M: 1 + p for a user holding 1, while a user holding 0
        sends p), so it bounds what any dataset sends on average."""

    @property
    @abc.abstractmethod
    def privacy(self) -> PrivacyGuarantee:
        """The guarantee of this configuration (no collusion)."""

    # --- the guarantee of one run ----------------------------------------------------------
    @property
    def calibration(self) -> Calibration | None:
        """The run :attr:`privacy` was calibrated for, or ``None`` when it is not known.

        :func:`protocols.build_protocol` records its spec's (n, total fakes, shufflers);
        protocols whose constructors take n record it themselves."""
        found = self.__dict__.get("_calibration")
        return found if isinstance(found, Calibration) else None

    def record_calibration(self, calibration: Calibration) -> None:
        """Record the run :attr:`privacy` was calibrated for (see :attr:`calibration`).

        Args:
            calibration: the users, total fakes and shufflers the guarantee was computed for.

        Raises:
            ParameterError: ``calibration`` is not a :class:`Calibration`.
        """
        if not isinstance(calibration, Calibration):
            raise ParameterError(f"calibration must be a Calibration, got {calibration!r}")
        self.__dict__["_calibration"] = calibration

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """The guarantee of THIS configured randomizer (its fixed ε_l and parameters) when
        ``n_users`` honest users' reports and ``fake_reports_total`` uniform fake values are
        shuffled together; ``None`` when it is not known.

        Default: :attr:`privacy` when the run has at least the calibrated users and fakes,
        else ``None``. Sound by post-processing: a run with more honest users or more fakes
        than calibrated shuffles the calibrated multiset together with further reports that
        are independent of the victim's data (the extra users' reports are drawn from their
        own values, the fakes from the uniform law), so its output is a randomized function
        of the calibrated run's output (add the independent reports, then shuffle), and a
        randomized function of an (ε, δ)-DP output is (ε, δ)-DP. Fewer users or fewer fakes
        are a different mechanism, whose guarantee this default does not know.

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).

        Raises:
            ParameterError: a count is not an integer >= 0.
        """
        n_users = check_n(n_users, "n_users", 0)
        fakes = check_n(fake_reports_total, "fake_reports_total", 0)
        calibration = self.calibration
        if calibration is None:
            return None
        if n_users >= calibration.n and fakes >= calibration.fake_reports_total:
            return self.privacy
        return None

    @abc.abstractmethod
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Run every user's local randomizer; returns the messages (first axis = message).

        Args:
            values: one value per user (:meth:`validate_values` states the kinds).
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The messages of every user.
        """

    @abc.abstractmethod
    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        """Encode messages to a ``(k, message_size)`` ``uint8`` array.

        Args:
            messages: the messages (:meth:`randomize`'s, or fakes).

        Returns:
            One row of :attr:`message_size` bytes per message.
        """

    @abc.abstractmethod
    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """Decode ``(k, message_size)`` bytes to messages plus a mask of the valid rows.

        Invalid rows (bytes no honest encoder produces) are reported in the mask, never
        raised: one malicious user must not take the batch down.

        Args:
            rows: the ``(k, message_size)`` payloads the analyzer received.

        Returns:
            ``(messages, valid)``: the decoded messages (one per row) and the mask of valid rows.
        """

    @abc.abstractmethod
    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Draw ``count`` fake messages uniformly over the message space (MURS).

        Args:
            count: the number of fakes.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The fake messages.
        """

    @abc.abstractmethod
    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        """Estimate the statistic from the shuffled messages of ``n`` users + ``n_fakes``.

        Args:
            messages: the decoded valid messages, in any order.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate and its closed-form standard deviation.
        """

    @abc.abstractmethod
    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The exact statistic the estimator targets, computed from the raw values.

        Args:
            values: one value per user.

        Returns:
            The statistic, shaped as the estimate's values.
        """

    def categorical_counts(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The exact histogram of 0-based categorical values over [0, :attr:`domain`): the
        :meth:`truth` of every histogram protocol.

        Args:
            values: one value in [0, domain) per user.

        Returns:
            The :attr:`domain` counts.
        """
        x = self.validate_values(values)
        return np.bincount(x, minlength=self.domain).astype(np.float64)

    # --- optional: error law and own accountant ---------------------------------------------
    @property
    def count_noise(self) -> CountNoise | None:
        """For a counting protocol whose error is a sum of independent per-user terms with
        the mirror symmetry of :class:`CountNoise`, that per-user law (no fakes); ``None``
        (the default) otherwise. Uniformity testers need its fourth moment."""
        return None

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """The protocol's own accountant when only ``honest_others`` users besides the victim
        run the randomizer honestly (the others' messages are known to the analyzer), at
        least one shuffler is honest, and no fake is counted; ``None`` (the default) when it
        has none and the collusion audit uses the generic ε_l-LDP bounds.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        return None

    # --- optional: the tally representation (see MessageTally) ---------------------------
    @property
    def supports_tally(self) -> bool:
        """True when :meth:`estimate` reads the messages only through :meth:`tally`.

        A Split-Mix protocol's messages are the encoder's shares, not what :meth:`randomize`
        returns, so the default samplers (which tally randomized values) do not apply: it
        supports tallies only if it draws the tally of the shares itself
        (:meth:`tally_users` and :meth:`tally_fakes`, fakes counted in values).
        """
        cls = type(self)
        if cls.tally is ShuffleProtocol.tally:
            return False
        return self.share_spec is None or (
            cls.tally_users is not ShuffleProtocol.tally_users
            and cls.tally_fakes is not ShuffleProtocol.tally_fakes
        )

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """The additive summary of decoded ``messages`` the estimator reads.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.

        Raises:
            ParameterError: the protocol's estimator is not a function of such a summary.
        """
        raise ParameterError(f"{self.name}: no message tally (its estimator reads messages)")

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        """:meth:`estimate` from the tally of the received messages.

        Args:
            tally: the tally of the received messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate.

        Raises:
            ParameterError: the protocol's estimator is not a function of a tally.
        """
        raise ParameterError(f"{self.name}: no message tally (its estimator reads messages)")

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """The tally of every user's messages, drawn without materializing them all.

        Equal in distribution to ``tally(randomize(values))``. The default randomizes block
        by block; protocols with a direct sampler of the summary override it.

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally.
        """
        rng = as_generator(rng)
        x = self.validate_values(values)
        block = max(1, int(TALLY_MESSAGES // max(self.messages_per_user, 1.0)))
        parts = [
            self.tally(self.randomize(x[s : s + block], rng=rng))
            for s in range(0, max(x.shape[0], 1), block)
        ]
        return _sum_tallies(parts)

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        """The tally of ``count`` uniform fakes; equal in distribution to
        ``tally(sample_fakes(count))``.

        Args:
            count: the number of fake values.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            Their tally.
        """
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        parts = [
            self.tally(self.sample_fakes(min(TALLY_MESSAGES, count - s), rng=rng))
            for s in range(0, max(count, 1), TALLY_MESSAGES)
        ]
        return _sum_tallies(parts)

    @property
    def channels(self) -> int:
        """Independent shuffler chains the messages are split across (1 for most protocols;
        e.g. ``RSum_RM`` sends each precision through its own shuffler)."""
        return 1

    def channel_of(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The channel in [0, :attr:`channels`) of each message.

        Args:
            messages: the messages.

        Returns:
            One channel index per message.
        """
        return np.zeros(np.asarray(messages).shape[0], dtype=np.int64)

    def sample_channel_fakes(self, count: int, *, channel: int, rng: RNGLike) -> npt.NDArray[Any]:
        """``count`` fakes for the shuffler chain of ``channel``: uniform over the messages
        that chain carries (a fake must look like that chain's honest traffic). With one
        channel this is :meth:`sample_fakes`.

        Args:
            count: the number of fakes.
            channel: the chain, in [0, channels).
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The fake messages.

        Raises:
            ParameterError: ``channel`` out of range.
        """
        rng = as_generator(rng)
        if not 0 <= channel < self.channels:
            raise ParameterError(
                f"{self.name}: channel must lie in [0, {self.channels}), got {channel}"
            )
        return self.sample_fakes(count, rng=rng)

    def validate_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        """Check users' values against :attr:`input_kind` and return them as an array.

        Args:
            values: one value per user.

        Returns:
            The values as an array (floats for the REAL kinds, booleans for SET).

        Raises:
            ParameterError: not a 1-D array (``(n, domain)`` for SET) of numbers of the kind's
                range, quoting the first bad value: BINARY and CATEGORICAL take integers
                (not bools, not floats), the REAL kinds finite integers or floats (not NaN,
                not strings), SET booleans or 0/1 numbers.
        """
        arr = np.asarray(values)
        kind = self.input_kind
        if kind in (InputKind.BINARY, InputKind.CATEGORICAL):
            hi = 2 if kind is InputKind.BINARY else self.domain
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
                raise ParameterError(
                    f"{self.name}: values must be a 1-D integer array, got {arr.dtype} {arr.shape}"
                )
            if arr.size and (arr.min() < 0 or arr.max() >= hi):
                raise ParameterError(
                    f"{self.name}: values must lie in [0, {hi}); got range "
                    f"[{arr.min()}, {arr.max()}] (inputs are 0-based)"
                )
        elif kind in (InputKind.REAL01, InputKind.REAL_PM1):
            lo = 0.0 if kind is InputKind.REAL01 else -1.0
            if arr.ndim != 1 or arr.dtype.kind not in "iuf":
                raise ParameterError(
                    f"{self.name}: values must be a 1-D array of numbers in [{lo}, 1], "
                    f"got {arr.dtype} {arr.shape}"
                )
            arr = arr.astype(np.float64, copy=False)
            # Written so that NaN is out of range too (every comparison with NaN is False).
            bad = np.flatnonzero(~((arr >= lo) & (arr <= 1.0)))
            if bad.size:
                raise ParameterError(
                    f"{self.name}: values must lie in [{lo}, 1], got {arr[bad[0]].item()!r} "
                    f"at index {int(bad[0])}"
                )
        elif kind is InputKind.SET:
            if arr.ndim != 2 or arr.shape[1] != self.domain or arr.dtype.kind not in "biuf":
                raise ParameterError(
                    f"{self.name}: values must be an (n, {self.domain}) boolean array, "
                    f"got {arr.dtype} {arr.shape}"
                )
            if arr.dtype.kind != "b" and np.any((arr != 0) & (arr != 1)):
                raise ParameterError(f"{self.name}: set membership values must be 0 or 1")
            arr = arr.astype(bool, copy=False)
        return arr


def _checking_counts(method: Callable[..., Estimate]) -> Callable[..., Estimate]:
    """``method`` (an ``estimate`` or ``estimate_tally``) with its ``n`` (a positive integer)
    and ``n_fakes`` (a non-negative integer) checked and passed on as ints."""

    @functools.wraps(method)
    def checked(
        self: ShuffleProtocol, messages: Any, *, n: int, n_fakes: int, **kw: Any
    ) -> Estimate:
        n = check_n(n, "n", 1)
        n_fakes = check_n(n_fakes, "n_fakes", 0)
        return method(self, messages, n=n, n_fakes=n_fakes, **kw)

    checked._checks_counts = True  # type: ignore[attr-defined]
    return checked


def _sum_tallies(parts: list[MessageTally]) -> MessageTally:
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


#: The largest ε any mechanism takes: e^ε must be a finite double (e^709.78 is the last).
MAX_EPSILON = 700.0
#: The smallest: below, e^ε − 1 (in every randomizer's probabilities) keeps fewer than ten
#: significant digits, and under 1.1e-16 it is 0, a division by zero.
MIN_EPSILON = 1e-6


def _real(value: Any, name: str) -> float:
    """``value`` as a float if it is a real number (not a bool, a string or None)."""
    if not isinstance(value, (str, bytes, bool, np.bool_)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise ParameterError(f"{name} must be a number, got {value!r}")


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """Return ``epsilon`` as float if it lies in [:data:`MIN_EPSILON`, :data:`MAX_EPSILON`],
    else raise ParameterError (outside, e^ε − 1 or e^ε leaves double precision's range)."""
    eps = _real(epsilon, name)
    if not np.isfinite(eps) or eps <= 0:
        raise ParameterError(f"{name} must be a finite number > 0, got {epsilon!r}")
    if eps < MIN_EPSILON:
        raise ParameterError(
            f"{name} must be >= {MIN_EPSILON:g} (e^{name} - 1 loses its precision below), "
            f"got {eps:g}"
        )
    if eps > MAX_EPSILON:
        raise ParameterError(
            f"{name} must be <= {MAX_EPSILON:g} (e^{name} must be a finite number), got {eps:g}"
        )
    return eps


#: Why a guarantee needs δ > 0, where its caller gives no reason of its own.
APPROXIMATE_DP = "its guarantee is approximate DP"


def check_delta(
    delta: float,
    name: str = "delta",
    *,
    pure: bool = False,
    who: str | None = None,
    why: str = APPROXIMATE_DP,
) -> float:
    """Return ``delta`` as float if it lies in (0, 1), or in [0, 1) when ``pure``.

    Args:
        delta: the δ to check.
        name: its name in messages.
        pure: the caller's guarantee is pure DP, so δ = 0 is a valid request.
        who: the protocol or bound asking (named in the refusal of δ = 0).
        why: why it needs δ > 0 (``"its amplification bounds are approximate DP"``).

    Raises:
        NeedsPositiveDelta: δ = 0 and not ``pure`` ("hist_kr needs delta > 0: ...").
        ParameterError: δ outside [0, 1), or NaN.
    """
    d = _real(delta, name)
    if d == 0.0 and not pure:
        raise NeedsPositiveDelta(
            f"{who} needs {name} > 0: {why}"
            if who
            else f"{name} = 0 (pure DP) is not proven here: {why}; give {name} in (0, 1)",
            why,
        )
    if not 0.0 <= d < 1.0:  # false for NaN
        raise ParameterError(f"{name} must lie in {'[0, 1)' if pure else '(0, 1)'}, got {delta!r}")
    return d


def check_n(n: int, name: str = "n", minimum: int = 1) -> int:
    """Return ``n`` as int if it is an integer >= ``minimum`` (an int, a numpy integer or an
    integral float; not a bool, a string, NaN or ±inf), else raise ParameterError."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, float, np.integer, np.floating)):
        ok = False
    elif isinstance(n, (float, np.floating)):
        ok = math.isfinite(n) and float(n).is_integer() and n >= minimum
    else:
        ok = n >= minimum
    if not ok:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {n!r}")
    return int(n)


def check_gamma(gamma: float) -> float:
    """Return γ, the fraction of honest users a robust protocol is private for, as float if it
    lies in (0, 1], else raise ParameterError."""
    g = float(gamma)
    if not 0.0 < g <= 1.0:
        raise ParameterError(f"gamma (fraction of honest users) must lie in (0, 1], got {gamma!r}")
    return g
