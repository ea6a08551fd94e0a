"""Uniformity testing in the shuffle model: ``PUT`` (pure) and ``AUT`` (approximate).

Balcer, Cheu, Joseph, Mao (SODA'21, arXiv 2004.09481) §4, as summarized in survey §4.4.3:
each user one-hot encodes its sample x_i ∈ [k] and runs a robust shuffle-private *counter*
on every coordinate, each message labeled with its coordinate; the analyzer estimates every
count c_j and computes a chi-square-type statistic from them (survey: "from these counts
[Acharya, Daskalakis, Kamath NeurIPS'15] and the Poisson parameter m compute z; if z < τ the
distribution is uniform"). PUT uses the pure counter ``Cnt_SGM`` (robust ε-DP), AUT the
approximate counter ``Cnt_BN`` (robust (ε, δ)-DP); both are looked up in the protocol
registry, so this module composes whatever counters are registered.

The paper's text beyond its abstract was not available to us; the statistic below and its
thresholds are derived here, and the paper's headline is what we check against: a robust
approximate shuffle-private tester with sample complexity Õ(k^{2/3}) (and an Ω(k^{2/3})
lower bound for robust *pure* testers).

Privacy: a user changing its sample changes two coordinates, so each coordinate's counter
is configured at (ε/2, δ/2) and the labeled union is (ε, δ)-DP by basic composition (and
(2ε', 2δ', γ)-robust when the counter is (ε', δ', γ)-robust). :attr:`privacy` is always
twice what the counter's own ``privacy`` proves, so PUT states only what ``cnt_sgm`` can
prove for its reconstruction (see that module), which may exceed the target ε.

Statistic. With n samples, λ = n/k, noisy counts ĉ_j = c_j + η_j whose noise has (estimated)
variance σ_j² (the counter's ``expected_std``²):
    Z = Σ_j ((ĉ_j − λ)² − σ_j²) / λ − (k − 1).
For n i.i.d. samples from p, E[Σ_j (c_j − λ)²] = n(1 − Σp_j²) + n²‖p − u‖², so
    E[Z] = 0 under the uniform u,   E[Z] = (n − 1) k ‖p − u‖₂² ≥ 4(n − 1)α²
when TV(p, u) ≥ α (Cauchy–Schwarz: ‖p − u‖₂² ≥ 4α²/k). Noise-free, Z is Pearson's
chi-square minus its mean. The test rejects uniformity iff Z > τ = 2(n − 1)α² (midpoint).

Null variance (Gaussian approximation of the noise, Pearson variance 2(k − 1)):
    Var₀[Z] ≈ 2(k − 1) + Σ_j (4σ_j² λ + 2σ_j⁴) / λ²,
so Chebyshev bounds the type I error by Var₀/τ². With per-bin noise σ² (σ = O(1/ε) for the
robust counters, independent of n), Var₀ ≤ β τ² = 4β n²α⁴ holds once
    n ≳ √k/α²  +  k^{2/3} σ^{2/3}/α^{4/3}  +  k^{3/4} σ/α
(the three terms of Var₀: Pearson, noise × sampling, noise²). The middle term is the
k^{2/3}/(α^{4/3} ε^{2/3}) of the paper's headline (and of the pan-private tester of Amin,
Joseph, Mao, COLT'20); the last term, k^{3/4}/(αε), comes from testing all k coordinates
directly. Reaching Õ(k^{2/3}) in every regime needs the domain to be merged into fewer
groups before testing, as the pan-private tester does; this module tests the k coordinates
as the survey describes and does not do that merge. :func:`null_variance` and
:func:`uniformity_min_samples` compute the bound for a given σ².
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._krr import decode_uints, encode_uints, uint_codec_size
from ._registry import ProtocolSpec, build_protocol, protocol_names, register_protocol

__all__ = ["UniformityDecision", "UniformityTester", "null_variance", "uniformity_min_samples"]

#: Largest domain: every user runs one counter per value.
MAX_DOMAIN = 1 << 16


def null_variance(n: int, k: int, noise_var: npt.ArrayLike) -> float:
    """Var₀[Z] ≈ 2(k − 1) + Σ_j (4σ_j²λ + 2σ_j⁴)/λ² with λ = n/k (module docstring)."""
    lam = n / k
    s2 = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), (k,))
    return float(2.0 * (k - 1) + np.sum((4.0 * s2 * lam + 2.0 * s2**2) / lam**2))


def uniformity_min_samples(k: int, alpha: float, beta: float, noise_var: float) -> int:
    """Smallest n whose Chebyshev type I bound Var₀/τ² is ≤ β, for constant noise σ².

    Args:
        k: domain size.
        alpha: distance (total variation) the tester must detect.
        beta: allowed type I error.
        noise_var: per-bin noise variance σ² of the counter (assumed independent of n).
    """
    k = check_n(k, "k", 2)
    _check_alpha_beta(alpha, beta)

    def ok(n: int) -> bool:
        tau = 2.0 * (n - 1) * alpha**2
        return null_variance(n, k, noise_var) <= beta * tau * tau

    hi = 2
    while not ok(hi):
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _check_alpha_beta(alpha: float, beta: float) -> None:
    if not 0.0 < float(alpha) <= 1.0:
        raise ParameterError(f"alpha (TV distance to detect) must lie in (0, 1], got {alpha!r}")
    if not 0.0 < float(beta) < 1.0:
        raise ParameterError(f"beta (error probability) must lie in (0, 1), got {beta!r}")


@dataclass(frozen=True, slots=True)
class UniformityDecision:
    """The tester's output.

    Attributes:
        statistic: Z (module docstring).
        threshold: τ = 2(n − 1)α².
        uniform: the decision, Z ≤ τ.
        null_std: √Var₀[Z], the statistic's standard deviation under uniformity.
        type_i_bound: Chebyshev bound min(1, Var₀/τ²) on the false-rejection probability.
    """

    statistic: float
    threshold: float
    uniform: bool
    null_std: float
    type_i_bound: float


class UniformityTester(ShuffleProtocol):
    """One-hot + a registered counter per value + the centered chi-square statistic.

    Args:
        counter: registered name of a BINARY counting protocol (``cnt_sgm`` for PUT,
            ``cnt_bn`` for AUT; any counter works, e.g. ``cnt_rr`` in tests).
        domain: k.
        epsilon: total ε of the test (each coordinate's counter gets ε/2).
        delta: total δ (each counter gets δ/2).
        n: number of users (samples).
        alpha: total-variation distance to detect.
        beta: target error probability (used by :attr:`sample_complexity`).
    """

    name: ClassVar[str] = "uniformity"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL

    def __init__(
        self,
        *,
        counter: str,
        domain: int,
        epsilon: float,
        delta: float,
        n: int,
        alpha: float = 0.25,
        beta: float = 1.0 / 3.0,
        fake_reports: int = 0,
    ) -> None:
        k = check_n(domain, "domain", 2)
        if k > MAX_DOMAIN:
            raise ParameterError(f"{self.name}: domain={k} exceeds {MAX_DOMAIN}")
        eps = check_epsilon(epsilon)
        delta = check_delta(delta)
        n = check_n(n, "n", 2)
        _check_alpha_beta(alpha, beta)
        if counter not in protocol_names():
            raise ParameterError(
                f"{self.name}: counter {counter!r} is not registered; "
                f"choose one of: {', '.join(protocol_names())}"
            )
        inner = build_protocol(
            counter,
            ProtocolSpec(
                epsilon=eps / 2.0, delta=delta / 2.0, n=n, domain=2, fake_reports=fake_reports
            ),
        )
        if inner.input_kind is not InputKind.BINARY:
            raise ParameterError(f"{self.name}: {counter!r} is not a counting (BINARY) protocol")
        self._counter = inner
        self._k, self._eps, self._delta, self._n = k, eps, delta, n
        self._alpha, self._beta = float(alpha), float(beta)
        self._label_size = uint_codec_size(k)
        self.share_spec = inner.share_spec

    # --- parameters -------------------------------------------------------------------
    @property
    def counter(self) -> ShuffleProtocol:
        return self._counter

    @property
    def domain(self) -> int:
        return self._k

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def message_size(self) -> int:
        return self._label_size + self._counter.message_size

    @property
    def messages_per_user(self) -> float:
        return self._k * self._counter.messages_per_user

    @property
    def privacy(self) -> PrivacyGuarantee:
        g = self._counter.privacy
        return PrivacyGuarantee(
            epsilon_central=2.0 * g.epsilon_central,
            epsilon_local=2.0 * g.epsilon_local,
            delta=min(1.0, 2.0 * g.delta),
            bound=f"2 x {self._counter.name} ({g.bound}); one-hot: two coordinates change",
        )

    def threshold(self, n: int) -> float:
        """τ = 2(n − 1)α²: half the smallest mean of Z at TV distance α."""
        return 2.0 * (n - 1) * self._alpha**2

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(counter={self._counter.name!r}, domain={self._k}, "
            f"epsilon={self._eps:.6g}, delta={self._delta:g}, n={self._n}, alpha={self._alpha})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = self.validate_values(values).astype(np.int64, copy=False)
        parts = []
        # A loop over the k coordinates (each vectorized over users), not over users.
        for j in range(self._k):
            msgs = np.asarray(self._counter.randomize((x == j).astype(np.int64), rng=rng))
            parts.append(self._label(j, msgs))
        return np.concatenate(parts)

    @staticmethod
    def _as_rows(body: npt.NDArray[Any]) -> npt.NDArray[Any]:
        # reshape(k, -1) cannot infer the width of zero rows: give 1-D bodies one column.
        return body[:, None] if body.ndim == 1 else body.reshape(body.shape[0], -1)

    @classmethod
    def _label(cls, j: int, msgs: npt.NDArray[Any]) -> npt.NDArray[Any]:
        body = cls._as_rows(msgs)
        labels = np.full((body.shape[0], 1), j, dtype=body.dtype)
        return np.concatenate([labels, body], axis=1)

    def _unlabel(self, messages: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        msgs = np.asarray(messages)
        labels = msgs[:, 0].astype(np.int64)
        body = msgs[:, 1:]
        if body.shape[1] == 1:
            body = body[:, 0]
        return labels, body

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        labels, body = self._unlabel(messages)
        out = np.empty((labels.size, self.message_size), dtype=np.uint8)
        out[:, : self._label_size] = encode_uints(labels, self._label_size)
        out[:, self._label_size :] = self._counter.encode(body)
        return out

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        labels = decode_uints(rows[:, : self._label_size], self._label_size)
        body, ok = self._counter.decode(np.ascontiguousarray(rows[:, self._label_size :]))
        return self._label_all(labels, np.asarray(body)), ok & (labels < self._k)

    @classmethod
    def _label_all(cls, labels: npt.NDArray[Any], body: npt.NDArray[Any]) -> npt.NDArray[Any]:
        body2 = cls._as_rows(body)
        return np.concatenate([labels.reshape(-1, 1).astype(body2.dtype), body2], axis=1)

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        count = check_n(count, "count", 0)
        labels = rng.integers(0, self._k, size=count)
        body = np.asarray(self._counter.sample_fakes(count, rng=rng))
        return self._label_all(labels, body)

    # --- analyzer ------------------------------------------------------------------------
    def counts(
        self, messages: npt.NDArray[Any], *, n: int, n_fakes: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per-value count estimates ĉ_j and their standard deviations σ_j."""
        labels, body = self._unlabel(messages)
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(self._k + 1))
        # Fakes carry uniform labels; the counter's estimator is affine in its fake count,
        # so interpolating between floor and ceil of n_f/k keeps it unbiased.
        per = n_fakes / self._k
        lo, w = math.floor(per), per - math.floor(per)
        est = np.empty(self._k)
        std = np.empty(self._k)
        for j in range(self._k):
            mine = body[order[bounds[j] : bounds[j + 1]]]
            e_lo = self._counter.estimate(mine, n=n, n_fakes=lo)
            if w > 0:
                e_hi = self._counter.estimate(mine, n=n, n_fakes=lo + 1)
                est[j] = (1 - w) * e_lo.values[0] + w * e_hi.values[0]
                std[j] = (1 - w) * e_lo.expected_std[0] + w * e_hi.expected_std[0]
            else:
                est[j], std[j] = e_lo.values[0], e_lo.expected_std[0]
        return est, std

    def statistic(self, counts: npt.ArrayLike, noise_var: npt.ArrayLike, *, n: int) -> float:
        """Z = Σ_j ((ĉ_j − λ)² − σ_j²)/λ − (k − 1), λ = n/k."""
        lam = n / self._k
        c = np.asarray(counts, dtype=np.float64)
        s2 = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), c.shape)
        return float(np.sum((c - lam) ** 2 - s2) / lam - (self._k - 1))

    def test(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> UniformityDecision:
        """Run the test on the shuffled messages of n users (+ n_fakes fakes)."""
        est, std = self.counts(messages, n=n, n_fakes=n_fakes)
        z = self.statistic(est, std**2, n=n)
        tau = self.threshold(n)
        var0 = null_variance(n, self._k, std**2)
        return UniformityDecision(
            statistic=z,
            threshold=tau,
            uniform=bool(z <= tau),
            null_std=math.sqrt(var0),
            type_i_bound=min(1.0, var0 / tau**2),
        )

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        dec = self.test(messages, n=n, n_fakes=n_fakes)
        return Estimate(
            values=np.array([dec.statistic]),
            expected_std=np.array([dec.null_std]),
            messages_used=int(np.asarray(messages).shape[0]),
            extra={
                "uniform": dec.uniform,
                "threshold": dec.threshold,
                "type_i_bound": dec.type_i_bound,
                "alpha": self._alpha,
            },
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The noiseless statistic Z computed on the exact counts."""
        x = self.validate_values(values)
        c = np.bincount(x, minlength=self._k)
        return np.array([self.statistic(c, 0.0, n=x.shape[0])])


def _build(counter: str, spec: ProtocolSpec) -> ShuffleProtocol:
    return UniformityTester(
        counter=counter,
        domain=spec.domain,
        epsilon=spec.epsilon,
        delta=spec.delta,
        n=spec.n,
        alpha=float(spec.options.get("alpha", 0.25)),
        beta=float(spec.options.get("beta", 1.0 / 3.0)),
        fake_reports=spec.fake_reports,
    )


@register_protocol("put")
def _build_put(spec: ProtocolSpec) -> ShuffleProtocol:
    """``PUT``: one-hot + ``Cnt_SGM`` per value (robust pure shuffle privacy)."""
    return _build("cnt_sgm", spec)


@register_protocol("aut")
def _build_aut(spec: ProtocolSpec) -> ShuffleProtocol:
    """``AUT``: one-hot + ``Cnt_BN`` per value (robust approximate shuffle privacy)."""
    return _build("cnt_bn", spec)
