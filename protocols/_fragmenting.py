"""Report fragmenting and attribute fragmenting (Erlingsson et al., arXiv 2001.03618).

Both wrap a configured *single-message* protocol and turn it into a multi-message one in
which every message is its own unlinkable report (survey §4.2, last two paragraphs).

**Report fragmenting** (:class:`ReportFragmenting`). As in RAPPOR, a user first applies a
permanent k-ary randomized response with a "backstop" ε_lb to its value, x̃ = kRR_{ε_lb}(x),
and then sends ω fragments, each the inner protocol's randomizer (configured with ε_lf)
applied afresh to x̃. Privacy:

* local: all ω reports of one user are a randomized function of x̃, so they are ε_lb-LDP
  (post-processing); they are also ω·ε_lf-LDP (composition of ω ε_lf randomizers of x̃,
  whose likelihood ratio bounds carry over to x by averaging over x̃). Hence
  ε_l = min(ε_lb, ω·ε_lf), and any single report is min(ε_lb, ε_lf)-LDP.
* central: every user's fragments depend on its data only through x̃_i and all fragments
  are shuffled together, so the shuffled multiset of fragments is a post-processing of the
  shuffled multiset {x̃_i}: it is as private as shuffling n k-RR reports at ε_lb, i.e.
  ε_c = tightest k-RR amplification bound at (ε_lb, n, δ) (survey Thm 2–4).

On reals (a single-message inner on [0, 1] that rounds to a grid, i.e. ``rsum_kr``) the
backstop is the same k-RR on the inner's grid after unbiased rounding
(:class:`RealReportFragmenting`).

Estimator: the inner estimator applied to all ω·n fragments estimates ω·hist(x̃) (it is
unbiased for it); dividing by ω and undoing the backstop, E[hist(x̃)_j] = (1−λ_b) h_j + λ_b n/k,
    ĥ_j = (h̃_j/ω − λ_b n/k) / (1 − λ_b),   λ_b = k/(e^{ε_lb} + k − 1),
is unbiased whenever the inner estimator is. Its variance (fragments of one user are
independent given x̃) is
    Var[ĥ_j] = (h_j p_b(1−p_b) + (n−h_j) q_b(1−q_b) + Var_inner[h̃_j]/ω²) / (1−λ_b)²,
p_b = 1 − λ_b + λ_b/k, q_b = λ_b/k.

**Attribute fragmenting** (:class:`AttributeFragmenting`). A user's record has t attributes;
attribute a is randomized by its own single-message protocol and sent as its own report
labeled a (ideally through its own shuffler). The analyzer runs each attribute's estimator
on its reports. Privacy by basic composition over the attributes a neighbour may change:
ε = Σ_a ε_a (central and local), δ = Σ_a δ_a. Its special case (survey §4.2):
:class:`OneHotFragmenting`, one-hot encoding of x ∈ [d] with a binary protocol (e.g. Cnt_RR)
per bit: changing x changes exactly two bits, so ε = 2·ε_bit and δ = 2·δ_bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Calibration,
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._krr import HistKR, krr_run_guarantee
from ._messages import decode_uints, encode_uints, randomized_round, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import (
    ProtocolSpec,
    build_protocol,
    integer_option,
    number_option,
    register_protocol,
    register_wrapper,
)
from .accounting import krr_lambda, largest_local, tightest_central

__all__ = [
    "AttributeFragmenting",
    "OneHotFragmenting",
    "RealReportFragmenting",
    "ReportFragmenting",
    "report_fragmented",
]


def is_single_message(protocol: ShuffleProtocol) -> bool:
    """Whether ``protocol`` sends one unshared message per user: what the fragmenting
    wrappers (and ``--option report_fragments``) take."""
    return protocol.share_spec is None and protocol.messages_per_user == 1


def _check_single_message(inner: ShuffleProtocol, what: str) -> None:
    if not isinstance(inner, ShuffleProtocol):
        raise ParameterError(f"{what}: inner must be a ShuffleProtocol, got {type(inner)!r}")
    if not is_single_message(inner):
        raise ParameterError(
            f"{what}: inner protocol {inner.name!r} must send exactly one message per user "
            f"(messages_per_user={inner.messages_per_user}, share_spec={inner.share_spec})"
        )


class ReportFragmenting(ShuffleProtocol):
    """ω fragments of a permanently randomized value, each through ``inner`` (see module doc).

    Args:
        inner: single-message protocol on BINARY or CATEGORICAL values whose estimator
            returns per-value counts (d entries) or, for BINARY, the count of ones. Its
            randomizer plays the role of the per-fragment ε_lf randomizer.
        fragments: ω ≥ 1 reports per user.
        epsilon_backstop: ε_lb of the permanent k-RR on the input domain.
        epsilon_fragment: ε_lf of ``inner``'s randomizer (for the stated local guarantee).
        n: number of users (for the central bound).
        delta: δ of the central bound.
        bound: force an amplification bound by name (default: the tightest k-RR bound).

    For one run (:meth:`privacy_for_run`): the same k-RR bound forward at the fixed ε_lb and
    the run's honest users (ε_lb itself where it does not apply there), capped at the
    local min(ε_lb, ω·ε_lf); fakes are not counted.
    """

    name: ClassVar[str] = "report_fragmenting"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    _inner_kinds: ClassVar[tuple[InputKind, ...]] = (InputKind.BINARY, InputKind.CATEGORICAL)

    def __init__(
        self,
        inner: ShuffleProtocol,
        *,
        fragments: int,
        epsilon_backstop: float,
        epsilon_fragment: float,
        n: int,
        delta: float,
        bound: str | None = None,
    ) -> None:
        _check_single_message(inner, "report fragmenting")
        if inner.input_kind not in self._inner_kinds:
            kinds = " or ".join(k.name for k in self._inner_kinds)
            raise ParameterError(
                f"{type(self).__name__} needs a {kinds} inner protocol, "
                f"got {inner.name!r} on {inner.input_kind.value}"
            )
        self._inner = inner
        self._omega = check_n(fragments, "fragments", 1)
        self._eps_lb = check_epsilon(epsilon_backstop, "epsilon_backstop")
        self._eps_lf = check_epsilon(epsilon_fragment, "epsilon_fragment")
        self._n = check_n(n)
        self._delta = check_delta(delta)
        self._k = inner.domain
        self._binary = inner.input_kind is InputKind.BINARY
        self._lam = krr_lambda(self._eps_lb, self._k)
        self._eps_c, self._bound = tightest_central(
            epsilon_local=self._eps_lb,
            n=self._n,
            delta=self._delta,
            family="krr",
            k=self._k,
            bound=bound,
        )
        self.record_calibration(Calibration(self._n, 0))

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """The backstop's k-RR bound at the run's users (class docstring).

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).
        """
        n_users = check_n(n_users, "n_users", 0)
        check_n(fake_reports_total, "fake_reports_total", 0)
        run = krr_run_guarantee(
            epsilon_local=self._eps_lb,
            n_users=n_users,
            delta=self._delta,
            k=self._k,
            bound=self._bound,
            note=" on the eps_lb backstop (post-processing)",
        )
        local = min(self._eps_lb, self._omega * self._eps_lf)
        return PrivacyGuarantee(min(run.epsilon_central, local), local, run.delta, run.bound)

    @property
    def inner(self) -> ShuffleProtocol:
        return self._inner

    @property
    def fragments(self) -> int:
        return self._omega

    @property
    def domain(self) -> int:
        return self._k

    @property
    def message_size(self) -> int:
        return self._inner.message_size

    @property
    def messages_per_user(self) -> float:
        return float(self._omega)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._eps_c,
            epsilon_local=min(self._eps_lb, self._omega * self._eps_lf),
            delta=self._delta,
            bound=f"{self._bound} on the eps_lb backstop (post-processing)",
        )

    @property
    def epsilon_per_report(self) -> float:
        """min(ε_lb, ε_lf): what one report alone reveals about x."""
        return min(self._eps_lb, self._eps_lf)

    def __repr__(self) -> str:
        return (
            f"ReportFragmenting({self._inner!r}, fragments={self._omega}, "
            f"epsilon_backstop={self._eps_lb:.6g}, epsilon_fragment={self._eps_lf:.6g})"
        )

    def validate_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        return self._inner.validate_values(values)

    def backstop(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """The permanent k-RR x̃ (a real client memoizes it across collections).

        Args:
            values: one value per user.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The users' backstop values.
        """
        rng = as_generator(rng)
        return self._permanent_rr(self.validate_values(values), rng=rng)

    def _permanent_rr(
        self, levels: npt.ArrayLike, *, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """k-RR at ε_lb over [k]: each level replaced by a uniform one with probability λ_b."""
        out = np.array(levels, dtype=np.int64)
        uniform = np.asarray(rng.random(out.shape[0]) < self._lam)
        out[uniform] = rng.integers(0, self._k, size=int(np.count_nonzero(uniform)))
        return out

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x_tilde = self.backstop(values, rng=rng)
        return self._inner.randomize(np.repeat(x_tilde, self._omega), rng=rng)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return self._inner.encode(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return self._inner.decode(rows)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return self._inner.sample_fakes(count, rng=rng)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        inner = self._inner.estimate(messages, n=n * self._omega, n_fakes=n_fakes)
        lam, k = self._lam, self._k
        est = (inner.values / self._omega - lam * n / k) / (1.0 - lam)
        var = self.variance(np.clip(est, 0, n), n=n, inner_std=inner.expected_std)
        return Estimate(
            values=np.asarray(est, dtype=np.float64),
            expected_std=np.sqrt(var),
            messages_used=inner.messages_used,
            extra={"fragments": self._omega, "inner": self._inner.name},
        )

    def variance(
        self, counts: npt.ArrayLike, *, n: int, inner_std: npt.ArrayLike
    ) -> npt.NDArray[np.float64]:
        """Var[ĥ_j] given true counts and the inner estimator's std on ω·n fragments.

        Args:
            counts: the true counts of the k values.
            n: the number of users.
            inner_std: the inner estimator's std per value.

        Returns:
            The k variances.
        """
        lam, k = self._lam, self._k
        h = np.asarray(counts, dtype=np.float64)
        p = 1.0 - lam + lam / k
        q = lam / k
        backstop = h * p * (1 - p) + (n - h) * q * (1 - q)
        inner_var = np.asarray(inner_std, dtype=np.float64) ** 2 / self._omega**2
        return np.asarray((backstop + inner_var) / (1.0 - lam) ** 2, dtype=np.float64)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self._inner.truth(values)


class RealReportFragmenting(ReportFragmenting):
    """Report fragmenting of a single-message protocol on reals in [0, 1] (``rsum_kr``).

    The inner protocol rounds to the grid {0, 1/(L−1), …, 1} with L = ``inner.domain``
    levels. The permanent backstop is the same on that grid: v = R_{L−1}(x) (unbiased
    randomized rounding), then L-ary RR at ε_lb, x̃ = ṽ/(L−1); each of the ω fragments is
    the inner randomizer applied to x̃ (which is on the grid, so the inner rounding leaves
    it as is). The privacy argument is the categorical one: every fragment depends on x only
    through ṽ, and ṽ is an ε_lb L-RR report of a randomized function of x (a mixture, which
    the k-RR amplification bound covers by joint convexity), so ε_c is the k-RR bound at
    (ε_lb, n, δ, L) and a user's reports are min(ε_lb, ω·ε_lf)-LDP.

    Estimator: the inner estimate on the ω·n fragments, S̃, estimates ω Σ x̃; with
    E x̃ = (1 − λ_b)x + λ_b/2,

        ŝ = (S̃/ω − λ_b n/2) / (1 − λ_b)   (unbiased).

    Stated variance (a bound, like ``rsum_kr``'s): per user

        Var x̃ ≤ λ_b(c₂ − λ_b/4) + (1 − λ_b)/(4(L−1)²),  c₂ = (2L−1)/(6(L−1)),

    the maximum over x (reached at x ∈ {0, 1} but for the rounding term), so

        Var ŝ ≤ (n·that + Var S̃/ω²) / (1 − λ_b)².
    """

    input_kind: ClassVar[InputKind] = InputKind.REAL01
    _inner_kinds: ClassVar[tuple[InputKind, ...]] = (InputKind.REAL01,)

    def backstop(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """x̃ = L-RR_{ε_lb}(R_{L−1}(x))/(L − 1) (a real client memoizes it).

        Args:
            values: one value in [0, 1] per user.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The users' backstop values x̃, on the grid.
        """
        rng = as_generator(rng)
        top = self._k - 1
        levels = randomized_round(self.validate_values(values), top, rng=rng)
        return np.asarray(self._permanent_rr(levels, rng=rng) / top, dtype=np.float64)

    def per_user_variance_bound(self) -> float:
        """max over x ∈ [0, 1] of Var x̃ (see class doc).

        Returns:
            The bound.
        """
        lam, top = self._lam, self._k - 1
        c2 = (2.0 * self._k - 1.0) / (6.0 * top)
        return lam * (c2 - lam / 4.0) + (1.0 - lam) / (4.0 * top * top)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        inner = self._inner.estimate(messages, n=n * self._omega, n_fakes=n_fakes)
        lam = self._lam
        est = (float(inner.values[0]) / self._omega - lam * n / 2.0) / (1.0 - lam)
        inner_var = float(inner.expected_std[0]) ** 2 / self._omega**2
        var = (n * self.per_user_variance_bound() + inner_var) / (1.0 - lam) ** 2
        return Estimate(
            values=np.array([est]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=inner.messages_used,
            extra={"fragments": self._omega, "inner": self._inner.name, "variance_is_bound": True},
        )


class AttributeFragmenting(ShuffleProtocol):
    """Attribute a of each record through its own single-message protocol, labeled a.

    Values are an ``(n, t)`` integer array, column a valid for ``inners[a]`` (so t binary
    attributes are exactly the SET input kind). Messages are rows ``(a, inner message)``;
    every inner protocol must emit integer (1-D) messages. Estimates are the inner
    estimates concatenated in attribute order. Privacy: basic composition, Σ_a ε_a.
    """

    name: ClassVar[str] = "attribute_fragmenting"
    input_kind: ClassVar[InputKind] = InputKind.SET

    def __init__(self, inners: Sequence[ShuffleProtocol]) -> None:
        inners = list(inners)
        if not inners:
            raise ParameterError("attribute fragmenting needs at least one attribute protocol")
        for inner in inners:
            _check_single_message(inner, "attribute fragmenting")
            if inner.input_kind not in (InputKind.BINARY, InputKind.CATEGORICAL):
                raise ParameterError(
                    f"attribute fragmenting: attribute protocol {inner.name!r} must take "
                    f"BINARY or CATEGORICAL values, got {inner.input_kind.value}"
                )
        self._inners = inners
        self._label_size = uint_codec_size(len(inners))
        self._body = max(p.message_size for p in inners)

    @property
    def inners(self) -> list[ShuffleProtocol]:
        return list(self._inners)

    @property
    def domain(self) -> int:
        return len(self._inners)

    @property
    def message_size(self) -> int:
        return self._label_size + self._body

    @property
    def messages_per_user(self) -> float:
        return float(len(self._inners))

    @property
    def privacy(self) -> PrivacyGuarantee:
        return self._composed(self._inners)

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """Basic composition of every attribute protocol's guarantee for the run.

        Every user sends one report per attribute, so each attribute's protocol shuffled
        ``n_users`` honest reports; the fakes are spread over the attributes at random, so
        none is counted (each attribute protocol is asked with 0 fakes). ``None`` if any
        attribute's guarantee for the run is unknown.

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).
        """
        n_users = check_n(n_users, "n_users", 0)
        check_n(fake_reports_total, "fake_reports_total", 0)
        runs = [p.privacy_for_run(n_users, 0) for p in self._inners]
        if any(r is None for r in runs):
            return None
        return self._compose([r for r in runs if r is not None])

    @staticmethod
    def _composed(parts: Sequence[ShuffleProtocol]) -> PrivacyGuarantee:
        return AttributeFragmenting._compose([p.privacy for p in parts])

    @staticmethod
    def _compose(privs: Sequence[PrivacyGuarantee]) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=sum(g.epsilon_central for g in privs),
            epsilon_local=sum(g.epsilon_local for g in privs),
            delta=min(1.0, sum(g.delta for g in privs)),
            bound="basic composition over attributes of "
            + ", ".join(sorted({g.bound for g in privs})),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inners!r})"

    def _columns(self, values: npt.ArrayLike) -> list[npt.NDArray[Any]]:
        arr = np.asarray(values)
        t = len(self._inners)
        if arr.ndim != 2 or arr.shape[1] != t:
            raise ParameterError(f"{self.name}: values must be an (n, {t}) array, got {arr.shape}")
        # Each column goes to its inner protocol's own check as it is (2.5 or NaN refused
        # there, not truncated here); only a boolean column (a one-hot row) becomes 0/1.
        return [
            inner.validate_values(
                arr[:, a].astype(np.int64) if arr.dtype.kind == "b" else arr[:, a]
            )
            for a, inner in enumerate(self._inners)
        ]

    def validate_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        return np.stack(self._columns(values), axis=1)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        """Every attribute protocol's messages, each labeled with its attribute's index.

        Args:
            values: the users' ``(n, attributes)`` values.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            ``(attribute, message)`` rows, attribute by attribute.

        Raises:
            ParameterError: an attribute protocol emits messages that are not 1-D integers.
        """
        rng = as_generator(rng)
        parts = []
        for a, (inner, col) in enumerate(zip(self._inners, self._columns(values), strict=True)):
            msgs = np.asarray(inner.randomize(col, rng=rng))
            if msgs.ndim != 1 or not np.issubdtype(msgs.dtype, np.integer):
                raise ParameterError(
                    f"{self.name}: attribute protocol {inner.name!r} emits {msgs.dtype} "
                    f"messages of shape {msgs.shape}; only 1-D integer messages can be labeled"
                )
            parts.append(np.stack([np.full(msgs.size, a, dtype=np.int64), msgs], axis=1))
        return np.concatenate(parts)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        out = np.zeros((msgs.shape[0], self.message_size), dtype=np.uint8)
        out[:, : self._label_size] = encode_uints(msgs[:, 0], self._label_size)
        for a, inner in enumerate(self._inners):
            sel = msgs[:, 0] == a
            size = inner.message_size
            out[sel, self._label_size : self._label_size + size] = inner.encode(msgs[sel, 1])
        return out

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        labels = decode_uints(rows[:, : self._label_size], self._label_size)
        values = np.zeros(rows.shape[0], dtype=np.int64)
        valid = np.zeros(rows.shape[0], dtype=bool)
        for a, inner in enumerate(self._inners):
            sel = np.flatnonzero(labels == a)
            body = rows[sel, self._label_size :]
            size = inner.message_size
            decoded, ok = inner.decode(np.ascontiguousarray(body[:, :size]))
            # Padding must be zero: an honest encoder never sets it.
            ok = ok & ~body[:, size:].any(axis=1)
            values[sel] = np.asarray(decoded, dtype=np.int64)
            valid[sel] = ok
        return np.stack([labels, values], axis=1), valid

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        labels = rng.integers(0, len(self._inners), size=count)
        values = np.zeros(count, dtype=np.int64)
        for a, inner in enumerate(self._inners):
            sel = labels == a
            values[sel] = np.asarray(inner.sample_fakes(int(sel.sum()), rng=rng), dtype=np.int64)
        return np.stack([labels.astype(np.int64), values], axis=1)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        values, stds, used = [], [], 0
        for a, inner in enumerate(self._inners):
            mine = msgs[msgs[:, 0] == a, 1]
            # Every user sends exactly one report per attribute: the excess are fakes.
            fakes = max(0, mine.size - n)
            est = inner.estimate(mine, n=n, n_fakes=fakes)
            values.append(est.values)
            stds.append(est.expected_std)
            used += est.messages_used
        return Estimate(
            values=np.concatenate(values).astype(np.float64),
            expected_std=np.concatenate(stds).astype(np.float64),
            messages_used=used,
            extra={"attributes": len(self._inners)},
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        cols = self._columns(values)
        return np.concatenate(
            [inner.truth(c) for inner, c in zip(self._inners, cols, strict=True)]
        ).astype(np.float64)


class OneHotFragmenting(AttributeFragmenting):
    """x ∈ [d] one-hot encoded, each bit through ``inner`` (a BINARY single-message protocol).

    Survey §4.2: "one-hot encode the value and perturb and shuffle each bit with Cnt_RR".
    Changing x changes two bits, so the guarantee is twice the per-bit one. The estimate is
    the d per-value counts (each inner estimates its bit's count of ones).
    """

    name: ClassVar[str] = "onehot_fragmenting"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL

    def __init__(self, inner: ShuffleProtocol, *, domain: int) -> None:
        d = check_n(domain, "domain", 2)
        if inner.input_kind is not InputKind.BINARY:
            raise ParameterError(
                f"one-hot fragmenting needs a BINARY per-bit protocol, got {inner.name!r}"
            )
        super().__init__([inner] * d)
        self._d = d

    @property
    def privacy(self) -> PrivacyGuarantee:
        return self._doubled(self._inners[0].privacy)

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """Twice the per-bit protocol's guarantee for ``n_users`` (fakes not counted: they
        are spread over the bits); ``None`` if that is unknown.

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).
        """
        n_users = check_n(n_users, "n_users", 0)
        check_n(fake_reports_total, "fake_reports_total", 0)
        g = self._inners[0].privacy_for_run(n_users, 0)
        return None if g is None else self._doubled(g)

    @staticmethod
    def _doubled(g: PrivacyGuarantee) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=2.0 * g.epsilon_central,
            epsilon_local=2.0 * g.epsilon_local,
            delta=min(1.0, 2.0 * g.delta),
            bound=f"2 x {g.bound} (one-hot: two bits change)",
        )

    def __repr__(self) -> str:
        return f"OneHotFragmenting({self._inners[0]!r}, domain={self._d})"

    def _columns(self, values: npt.ArrayLike) -> list[npt.NDArray[Any]]:
        x = ShuffleProtocol.validate_values(self, values).astype(np.int64, copy=False)
        onehot = np.zeros((x.shape[0], self._d), dtype=np.int64)
        onehot[np.arange(x.shape[0]), x] = 1
        return [onehot[:, j] for j in range(self._d)]

    def validate_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        return ShuffleProtocol.validate_values(self, values)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.bincount(x, minlength=self._d).astype(np.float64)


class HistKRFrag(ReportFragmenting):
    """Report fragmenting of ``Hist_KR``, as registered (``hist_kr_frag``)."""

    name: ClassVar[str] = "hist_kr_frag"


class HistRRAttr(OneHotFragmenting):
    """One-hot attribute fragmenting with ``Cnt_RR`` per bin, as registered (``hist_rr_attr``)."""

    name: ClassVar[str] = "hist_rr_attr"


_FRAGMENTED: dict[str, type[ReportFragmenting]] = {}


def report_fragmented(
    inner: ShuffleProtocol, spec: ProtocolSpec, fragments: float
) -> ReportFragmenting:
    """``--option report_fragments=ω`` on any single-message protocol (BINARY, CATEGORICAL,
    or REAL01 on a grid of ``inner.domain`` levels: :class:`RealReportFragmenting`).

    The permanent backstop ε_lb is the largest k-RR ε whose shuffled reports meet the target
    (ε_c, δ) for n users by themselves (the fragments are post-processing of the backstop
    values, module doc); each of the ω fragments is ``inner``'s randomizer, configured as
    usual, at its own ε_l (= ε_lf). Stated: central ε_c from the backstop, local
    min(ε_lb, ω·ε_lf) for a user's ω reports, min(ε_lb, ε_lf) for one report. The result is
    named ``<inner>+report_fragments``.

    Raises:
        ParameterError: ω is not a positive integer, or ``inner`` is multi-message or
            shared (Split-Mix).
    """
    if not float(fragments).is_integer() or fragments < 1:
        raise ParameterError(f"report_fragments must be a positive integer, got {fragments!r}")
    _check_single_message(inner, "report fragmenting")
    base = RealReportFragmenting if inner.input_kind is InputKind.REAL01 else ReportFragmenting
    k = inner.domain
    eps_lb, bound = largest_local(
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        family="krr",
        k=k,
        bound=spec.bound,
    )
    cls = _FRAGMENTED.get(inner.name)
    if cls is None:
        cls = type(
            f"ReportFragmented[{inner.name}]",
            (base,),
            {"name": f"{inner.name}+report_fragments"},
        )
        _FRAGMENTED[inner.name] = cls
    return cls(
        inner,
        fragments=int(fragments),
        epsilon_backstop=eps_lb,
        epsilon_fragment=inner.privacy.epsilon_local,
        n=spec.n,
        delta=spec.delta,
        bound=bound,
    )


def _wrap_report_fragments(protocol: ShuffleProtocol, spec: ProtocolSpec) -> ShuffleProtocol:
    return report_fragmented(protocol, spec, number_option(spec, "report_fragments", 0.0))


def _takes_report_fragments(protocol: ShuffleProtocol) -> bool:
    return isinstance(protocol, ReportFragmenting) or is_single_message(protocol)


# ``--option report_fragments=ω`` on every protocol it applies to (Erlingsson et al.): the
# protocol is configured as usual, then wrapped.
register_wrapper("report_fragments", _wrap_report_fragments, applies_to=_takes_report_fragments)


@register_protocol("hist_kr_frag")
def _build_hist_kr_frag(spec: ProtocolSpec) -> ShuffleProtocol:
    """Report fragmenting of Hist_KR: backstop ε_lb meets the target ε_c by itself.

    Options: ``fragments`` ω (default 4), ``epsilon_fragment`` ε_lf (default ε_lb/ω, so the
    ω reports together are ε_lb-LDP and each alone ε_lb/ω-LDP).
    """
    omega = integer_option(spec, "fragments", 4, minimum=1)
    eps_lb, bound = largest_local(
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        family="krr",
        k=spec.domain,
        bound=spec.bound,
    )
    eps_lf = number_option(spec, "epsilon_fragment", eps_lb / omega)
    inner = HistKR(
        domain=spec.domain,
        epsilon_local=eps_lf,
        n=spec.n * max(omega, 1),
        delta=spec.delta,
        total_fakes=spec.total_fake_reports,
    )
    return HistKRFrag(
        inner,
        fragments=omega,
        epsilon_backstop=eps_lb,
        epsilon_fragment=eps_lf,
        n=spec.n,
        delta=spec.delta,
        bound=bound,
    )


@register_protocol("hist_rr_attr")
def _build_hist_rr_attr(spec: ProtocolSpec) -> ShuffleProtocol:
    """One-hot attribute fragmenting with Cnt_RR per bit at (ε_c/2, δ/2): total (ε_c, δ)."""
    if spec.domain > 4096:
        raise ParameterError(
            f"hist_rr_attr sends one report per bin: domain={spec.domain} exceeds 4096"
        )
    inner = build_protocol(
        "cnt_rr", ProtocolSpec(epsilon=spec.epsilon / 2.0, delta=spec.delta / 2.0, n=spec.n)
    )
    proto = HistRRAttr(inner, domain=spec.domain)
    if not math.isfinite(proto.privacy.epsilon_central):
        raise ParameterError("hist_rr_attr: per-bit bound gave no finite central epsilon")
    return proto
