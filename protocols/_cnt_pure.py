"""``Cnt_PURE``: pure-DP binary counting with τ one-bit messages per user.

Ghazi, Golowich, Kumar, Manurangsi, Pagh, Velingker, "Pure Differentially Private Summation
from Anonymous Messages" (ITC'20, arXiv 2002.01919), as summarized in survey §4.1. Every
user sends exactly τ bits (τ odd, m = (τ−1)/2):
    with probability 1 − λ: m + x ones and m + 1 − x zeros        (input-dependent),
    with probability λ:     z ones and τ − z zeros, z ~ ω          (input-independent),
where ω is the survey's "truncated DLap(τ/2, Δ/ε)": z = clip(m + B + η, 0, τ) with
B ~ Ber(1/2) and η ~ SG(e^{−ε}) (Δ = 1; m + B is the integer centring at τ/2), symmetric
about τ/2 so E z = τ/2. The analyzer sees only C, the number of ones, and estimates
    ĉ = (C − (1−λ) n m − λ n τ/2 − f/2) / (1 − λ),
with f = (received bits) − nτ uniform fake bits: unbiased, with exact variance
    Var ĉ = [Σ_i Var o_i + f/4] / (1−λ)²,  E o = (1−λ)(m+x) + λτ/2,
    E o² = (1−λ)(m+x)² + λ E z².

DEVIATION FROM THE PAPER — READ THIS. The survey lost every formula of this protocol (τ, λ
and the condition for ε-DP) and the paper was not available offline. We could not
re-derive the paper's amplified pure guarantee: for a mixture randomizer like this one, pure
DP of the shuffled count hinges on the extreme tails of the other users' sum, which is
exactly what the lost conditions control. So this module calibrates λ to a guarantee we can
prove: the local one. One user's output is its number of ones o, whose laws under x = 0 and
x = 1 differ only at o = m and o = m + 1, so the randomizer is ε_l-LDP with
    ε_l = ln(1 + (1 − λ) / (λ ω(m))),   i.e.   λ = 1 / (1 + ω(m)(e^ε − 1)),
and the shuffled view is ε-DP with δ = 0 whatever the other users do (robust for every γ).
The price is accuracy: the error is O(√n/ε) like local randomized response, not the paper's
O_ε(1). τ = 2⌈log₂ n⌉ + 1 follows the paper's "O(log n) one-bit messages per user"
(``messages`` overrides it); it does not change the guarantee.
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
    MessageTally,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_epsilon,
    check_n,
)
from ._cnt_robust import check_gamma
from ._errors import ParameterError
from ._krr import decode_bits, encode_bits
from ._noise import symmetric_geometric
from ._registry import ProtocolSpec, register_protocol

__all__ = ["CntPURE", "PureBitCounter", "default_tau"]

#: Largest number of messages per user (τ) accepted.
MAX_TAU = 1023


def default_tau(n: int) -> int:
    """τ = 2⌈log₂ n⌉ + 1 (odd, ≥ 3)."""
    return 2 * max(1, math.ceil(math.log2(max(check_n(n), 2)))) + 1


@dataclass(frozen=True, slots=True)
class PureBitCounter:
    """The per-bit mechanism of ``Cnt_PURE`` (see module doc), without any codec.

    Attributes:
        epsilon: pure ε of one user's τ bits (and so of the shuffled count).
        tau: τ, odd number of bits each user sends.
        lam: λ = 1/(1 + ω(m)(e^ε − 1)), probability of the input-independent branch.
        alpha: e^{−ε}, the SG parameter of ω.
        omega: ω as a probability vector over {0, …, τ}.
    """

    epsilon: float
    tau: int
    lam: float
    alpha: float
    omega: tuple[float, ...]

    @classmethod
    def derive(cls, *, epsilon: float, tau: int) -> PureBitCounter:
        eps = check_epsilon(epsilon)
        t = check_n(tau, "messages (tau)", 1)
        if t % 2 == 0 or t > MAX_TAU:
            raise ParameterError(f"tau must be odd and <= {MAX_TAU}, got {t}")
        alpha = math.exp(-eps)
        omega = _omega(t, alpha)
        m = (t - 1) // 2
        lam = 1.0 / (1.0 + omega[m] * math.expm1(eps))
        return cls(eps, t, lam, alpha, tuple(float(w) for w in omega))

    @property
    def m(self) -> int:
        return (self.tau - 1) // 2

    @property
    def z_second_moment(self) -> float:
        k = np.arange(self.tau + 1, dtype=np.float64)
        return float(np.dot(np.asarray(self.omega), k * k))

    def ones(self, x: npt.NDArray[np.int64], *, rng: np.random.Generator) -> Any:
        """Number of ones each user sends (vectorized)."""
        o = self.m + np.asarray(x, dtype=np.int64)
        noisy = np.flatnonzero(rng.random(o.shape[0]) < self.lam)
        b = (rng.random(noisy.size) < 0.5).astype(np.int64)
        eta = np.asarray(symmetric_geometric(self.alpha, noisy.size, rng=rng), dtype=np.int64)
        o[noisy] = np.clip(self.m + b + eta, 0, self.tau)
        return o

    def debias(self, ones: int, *, n: int, received: int) -> float:
        fakes = received - n * self.tau
        lam, m, t = self.lam, self.m, self.tau
        return (ones - (1 - lam) * n * m - lam * n * t / 2.0 - fakes / 2.0) / (1.0 - lam)

    def variance(self, *, n: int, count: float, fakes: int) -> float:
        """Exact Var of :meth:`debias` for ``count`` ones among n users and ``fakes`` bits."""
        lam, m, t = self.lam, self.m, self.tau
        ez2 = self.z_second_moment

        def var_o(x: int) -> float:
            mean = (1 - lam) * (m + x) + lam * t / 2.0
            return (1 - lam) * (m + x) ** 2 + lam * ez2 - mean * mean

        total = count * var_o(1) + (n - count) * var_o(0) + fakes / 4.0
        return total / (1.0 - lam) ** 2


def _omega(tau: int, alpha: float) -> npt.NDArray[np.float64]:
    """Law of clip(m + B + η, 0, τ): B ~ Ber(1/2), η ~ SG(α), exactly (tails summed)."""
    m = (tau - 1) // 2
    c = (1.0 - alpha) / (1.0 + alpha)
    out = np.zeros(tau + 1)
    for b in (0, 1):
        centre = m + b
        for o in range(1, tau):
            out[o] += 0.5 * c * alpha ** abs(o - centre)
        # P[η ≤ −centre] and P[η ≥ τ − centre]: geometric tails c α^k / (1 − α).
        out[0] += 0.5 * c * alpha**centre / (1.0 - alpha)
        out[tau] += 0.5 * c * alpha ** (tau - centre) / (1.0 - alpha)
    return np.asarray(out / out.sum(), dtype=np.float64)


class CntPURE(ShuffleProtocol):
    """``Cnt_PURE``: τ bits per user, pure ε-DP (local calibration; see module doc)."""

    name: ClassVar[str] = "cnt_pure"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(
        self, *, epsilon: float, n: int, messages: int | None = None, gamma: float = 1.0
    ) -> None:
        self._n = check_n(n)
        self._gamma = check_gamma(gamma)
        self.bit = PureBitCounter.derive(
            epsilon=epsilon, tau=default_tau(n) if messages is None else messages
        )

    @property
    def domain(self) -> int:
        return 2

    @property
    def message_size(self) -> int:
        return 1

    @property
    def messages_per_user(self) -> float:
        return float(self.bit.tau)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self.bit.epsilon,
            epsilon_local=self.bit.epsilon,
            delta=0.0,
            bound="cnt_pure_local_pure (local calibration; robust for any gamma)",
        )

    def __repr__(self) -> str:
        b = self.bit
        return f"CntPURE(epsilon={b.epsilon:g}, n={self._n}, tau={b.tau}, lam={b.lam:.6g})"

    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = self.validate_values(values).astype(np.int64, copy=False)
        ones = int(self.bit.ones(x, rng=rng).sum())
        out = np.zeros(x.size * self.bit.tau, dtype=np.uint8)
        out[:ones] = 1
        return out

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        return decode_bits(rows)

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        return (rng.random(check_n(count, "count", 0)) < 0.5).astype(np.uint8)

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """The number of ones (all the estimator reads besides the message count)."""
        m = np.asarray(messages).reshape(-1)
        return MessageTally(np.array([np.count_nonzero(m == 1)], dtype=np.int64), int(m.size))

    def tally_users(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> MessageTally:
        """Each user's number of ones is drawn as :meth:`randomize` does; the nτ one-bit
        messages are never written out."""
        x = self.validate_values(values).astype(np.int64, copy=False)
        ones = int(self.bit.ones(x, rng=rng).sum())
        return MessageTally(np.array([ones], dtype=np.int64), int(x.size) * self.bit.tau)

    def tally_fakes(self, count: int, *, rng: np.random.Generator) -> MessageTally:
        count = check_n(count, "count", 0)
        return MessageTally(np.array([rng.binomial(count, 0.5)], dtype=np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        est = self.bit.debias(int(tally.counts[0]), n=n, received=tally.messages)
        fakes = max(tally.messages - n * self.bit.tau, 0)
        var = self.bit.variance(n=n, count=min(max(est, 0.0), float(n)), fakes=fakes)
        return Estimate(
            values=np.array([est]),
            expected_std=np.array([math.sqrt(var)]),
            messages_used=tally.messages,
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        x = self.validate_values(values)
        return self.bit.variance(n=x.size, count=float(x.sum()), fakes=n_fakes)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(x.sum())])


@register_protocol("cnt_pure")
def _build_cnt_pure(spec: ProtocolSpec) -> ShuffleProtocol:
    messages = spec.options.get("messages")
    return CntPURE(
        epsilon=spec.epsilon,
        n=spec.n,
        messages=None if messages is None else int(messages),
        gamma=check_gamma(spec.options.get("gamma", 1.0)),
    )
