"""k-ary randomized response in the shuffle model: ``Hist_KR`` and ``Cnt_RR``.

Randomizer (survey §2.3.2; Balle et al. arXiv 1903.02837 Alg. 1): with probability λ a user
sends a value drawn uniformly from [k], otherwise its true value. It is ε_l-LDP for
λ = k/(e^{ε_l}+k−1), i.e. it keeps the value w.p. p = e^{ε_l}/(e^{ε_l}+k−1) and sends each
other value w.p. q = 1/(e^{ε_l}+k−1).

Estimator with n_f uniform fakes in the shuffled multiset (counts C_j):
    E[C_j] = (1−λ) x_j + λ n/k + n_f/k   ⇒   x̂_j = (C_j − λ n/k − n_f/k) / (1−λ),
which is unbiased. Its variance, summing the independent Bernoulli trials of users and
fakes, is
    Var[x̂_j] = (x_j p(1−p) + (n−x_j) q(1−q) + n_f (1/k)(1−1/k)) / (1−λ)²
(Wang et al. USENIX Sec'17 eq. (3) for n_f = 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._amplification import BOUNDS, krr_lambda, largest_local, tightest_central
from ._base import (
    CountNoise,
    Estimate,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import BoundNotApplicable, ParameterError
from ._registry import ProtocolSpec, register_protocol

__all__ = ["CntRR", "HistKR", "uint_codec_size"]


def uint_codec_size(domain: int) -> int:
    """Bytes of the big-endian unsigned encoding of a value in [0, domain)."""
    return max(1, (int(domain - 1).bit_length() + 7) // 8)


def encode_uints(values: npt.NDArray[Any], size: int) -> npt.NDArray[np.uint8]:
    """Vectorized big-endian encoding of non-negative ints to ``(k, size)`` bytes."""
    v = np.asarray(values, dtype=">u8").reshape(-1, 1).view(np.uint8).reshape(-1, 8)
    return np.ascontiguousarray(v[:, 8 - size :])


def decode_uints(rows: npt.NDArray[np.uint8], size: int) -> npt.NDArray[np.int64]:
    """Inverse of :func:`encode_uints`."""
    rows = np.asarray(rows, dtype=np.uint8).reshape(-1, size)
    padded = np.zeros((rows.shape[0], 8), dtype=np.uint8)
    padded[:, 8 - size :] = rows
    return padded.view(">u8").reshape(-1).astype(np.int64)


def sum_mod(values: npt.NDArray[np.int64], q: int) -> int:
    """Σ values mod q without overflow (int64 when the total fits, else in chunks)."""
    v = np.asarray(values, dtype=np.int64).reshape(-1) % q
    chunk = max(1, (1 << 62) // max(q, 1))
    total = 0
    for start in range(0, v.size, chunk):
        total = (total + int(v[start : start + chunk].sum())) % q
    return total


def zero_sum_values(count: int, q: int, *, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``count`` values uniform on Z_q subject to a total of 0 mod q (Split-Mix fakes that
    leave every sum unchanged; ``count`` = 1 gives the value 0)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    out = rng.integers(0, q, size=count, dtype=np.int64)
    out[-1] = (-sum_mod(out[:-1], q)) % q
    return out


class ModularMessages:
    """Wire format and fakes of a protocol whose messages are values of Z_q (Split-Mix).

    Mixed in before :class:`~protocols.ShuffleProtocol` by protocols that set ``q`` (the
    modulus) and ``_size`` (:func:`uint_codec_size` of q): values travel big-endian, a value
    ≥ q is invalid, and fakes sum to 0 mod q (:func:`zero_sum_values`) so no sum moves.
    """

    q: int
    _size: int

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        v = decode_uints(rows, self._size)
        return v, v < self.q

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        """``count`` values uniform on Z_q whose total is 0 mod q: they leave sums unchanged."""
        return zero_sum_values(check_n(count, "count", 0), self.q, rng=rng)


def encode_bits(messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """One-byte messages of 0/1 protocols as ``(k, 1)`` rows."""
    return np.asarray(messages, dtype=np.uint8).reshape(-1, 1).copy()


def decode_bits(rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """Inverse of :func:`encode_bits`, with the mask of rows holding 0 or 1."""
    b = np.asarray(rows, dtype=np.uint8).reshape(-1, 1)[:, 0]
    return b.copy(), b <= 1


@dataclass(frozen=True, slots=True)
class _KRRParams:
    k: int
    epsilon_local: float
    n: int
    delta: float
    fake_reports: int
    bound: str
    epsilon_central: float


class HistKR(ShuffleProtocol):
    """``Hist_KR``: histogram over [d] by k-ary randomized response + shuffling.

    Privacy (survey Thm 4, Balle et al. Crypto'19 Thm 3.1, or the tightest registered
    bound for the ``krr`` family): ε_l is chosen as the largest local ε whose shuffle of n
    reports is (ε_c, δ)-DP. One message per user of ``ceil(log256 d)`` bytes.
    """

    name: ClassVar[str] = "hist_kr"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    family: ClassVar[str] = "krr"

    def __init__(
        self,
        *,
        domain: int,
        epsilon_local: float,
        n: int,
        delta: float,
        fake_reports: int = 0,
        bound: str | None = None,
    ) -> None:
        k = check_n(domain, "domain", 2)
        eps_l = check_epsilon(epsilon_local, "epsilon_local")
        n = check_n(n)
        delta = check_delta(delta)
        fakes = check_n(fake_reports, "fake_reports", 0)
        if bound is None:
            eps_c, bound_name = tightest_central(
                epsilon_local=eps_l, n=n, delta=delta, family=self.family, k=k
            )
        else:
            b = _lookup_bound(bound, self.family)
            eps_c, bound_name = b.epsilon_central(epsilon_local=eps_l, n=n, delta=delta, k=k), bound
        self._p = _KRRParams(k, eps_l, n, delta, fakes, bound_name, eps_c)
        self._lam = krr_lambda(eps_l, k)
        self._size = uint_codec_size(k)

    @classmethod
    def from_central(
        cls,
        *,
        domain: int,
        epsilon_central: float,
        n: int,
        delta: float,
        fake_reports: int = 0,
        bound: str | None = None,
    ) -> HistKR:
        """Configure for a target ε_c: the largest ε_l any applicable bound allows."""
        k = check_n(domain, "domain", 2)
        if bound is None:
            eps_l, bound = largest_local(
                epsilon_central=epsilon_central, n=n, delta=delta, family=cls.family, k=k
            )
        else:
            eps_l = _lookup_bound(bound, cls.family).epsilon_local(
                epsilon_central=epsilon_central, n=n, delta=delta, k=k
            )
        return cls(
            domain=k, epsilon_local=eps_l, n=n, delta=delta, fake_reports=fake_reports, bound=bound
        )

    # --- parameters -------------------------------------------------------------------
    @property
    def domain(self) -> int:
        return self._p.k

    @property
    def epsilon_local(self) -> float:
        return self._p.epsilon_local

    @property
    def uniform_probability(self) -> float:
        """λ: probability that a user's message is uniform rather than its true value."""
        return self._lam

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        return 1.0

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._p.epsilon_central,
            epsilon_local=self._p.epsilon_local,
            delta=self._p.delta,
            bound=self._p.bound,
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"{type(self).__name__}(domain={p.k}, epsilon_local={p.epsilon_local:.6g}, "
            f"n={p.n}, delta={p.delta:g}, bound={p.bound!r})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        x = self.validate_values(values).astype(np.int64, copy=False)
        uniform = np.asarray(rng.random(x.shape[0]) < self._lam)
        out = x.copy()
        out[uniform] = rng.integers(0, self._p.k, size=int(uniform.sum()))
        return out

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        values = decode_uints(rows, self._size)
        return values, values < self._p.k

    def sample_fakes(self, count: int, *, rng: np.random.Generator) -> npt.NDArray[Any]:
        return rng.integers(0, self._p.k, size=check_n(count, "count", 0))

    # --- analyzer ------------------------------------------------------------------------
    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        k, lam = self._p.k, self._lam
        counts = np.bincount(np.asarray(messages, dtype=np.int64), minlength=k)[:k]
        est = (counts - lam * n / k - n_fakes / k) / (1.0 - lam)
        return Estimate(
            values=est.astype(np.float64),
            expected_std=np.sqrt(self.variance(np.clip(est, 0, n), n=n, n_fakes=n_fakes)),
            messages_used=int(counts.sum()),
        )

    def variance(
        self, counts: npt.ArrayLike, *, n: int, n_fakes: int = 0
    ) -> npt.NDArray[np.float64]:
        """Exact variance of :meth:`estimate` per bin, given the true counts."""
        k, lam = self._p.k, self._lam
        x = np.asarray(counts, dtype=np.float64)
        p = 1.0 - lam + lam / k
        q = lam / k
        var = x * p * (1 - p) + (n - x) * q * (1 - q) + n_fakes * (1 / k) * (1 - 1 / k)
        return np.asarray(var / (1.0 - lam) ** 2, dtype=np.float64)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


class CntRR(HistKR):
    """``Cnt_RR``: counting the users with bit 1 by binary randomized response (Cheu et al.).

    The randomizer outputs a uniform bit w.p. λ = 2/(e^{ε_l}+1), else the true bit; the
    estimator is the k = 2 case of :class:`HistKR`, reported as the count of ones. Privacy:
    survey Thm 3 (Cheu et al. Eurocrypt'19) or Thm 4 with k = 2, whichever is tighter.
    """

    name: ClassVar[str] = "cnt_rr"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(
        self,
        *,
        epsilon_local: float,
        n: int,
        delta: float,
        fake_reports: int = 0,
        bound: str | None = None,
        domain: int = 2,
    ) -> None:
        if domain != 2:
            raise ParameterError(f"cnt_rr counts bits: domain must be 2, got {domain}")
        super().__init__(
            domain=2,
            epsilon_local=epsilon_local,
            n=n,
            delta=delta,
            fake_reports=fake_reports,
            bound=bound,
        )

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        hist = super().estimate(messages, n=n, n_fakes=n_fakes)
        return Estimate(
            values=hist.values[1:],
            expected_std=hist.expected_std[1:],
            messages_used=hist.messages_used,
        )

    @property
    def count_noise(self) -> CountNoise:
        """A user holding 0 sends 1 with probability p = λ/2, so its error term is
        (I − p)/(1 − λ), I ~ Ber(p); a user holding 1 sends 0 with that probability: the
        mirror image. Central moments of Ber(p): p(1−p), p(1−p)(1−2p), p(1−p)(1−3p(1−p))."""
        p = self.uniform_probability / 2.0
        s = 1.0 - self.uniform_probability
        pq = p * (1.0 - p)
        return CountNoise(
            variance=pq / s**2,
            third=pq * (1.0 - 2.0 * p) / s**3,
            fourth=pq * (1.0 - 3.0 * pq) / s**4,
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return super().truth(values)[1:]


def _lookup_bound(name: str, family: str) -> Any:
    try:
        bound = BOUNDS[name]
    except KeyError:
        raise ParameterError(
            f"unknown bound {name!r}; choose one of: {', '.join(sorted(BOUNDS))}"
        ) from None
    if not bound.applies_to(family):
        raise BoundNotApplicable(f"bound {name!r} does not cover {family} randomizers")
    return bound


@register_protocol("hist_kr")
def _build_hist_kr(spec: ProtocolSpec) -> ShuffleProtocol:
    return HistKR.from_central(
        domain=spec.domain,
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        fake_reports=spec.fake_reports,
        bound=spec.bound,
    )


@register_protocol("cnt_rr")
def _build_cnt_rr(spec: ProtocolSpec) -> ShuffleProtocol:
    eps_l, bound = (
        largest_local(epsilon_central=spec.epsilon, n=spec.n, delta=spec.delta, family="krr", k=2)
        if spec.bound is None
        else (
            _lookup_bound(spec.bound, "krr").epsilon_local(
                epsilon_central=spec.epsilon, n=spec.n, delta=spec.delta, k=2
            ),
            spec.bound,
        )
    )
    return CntRR(
        epsilon_local=eps_l,
        n=spec.n,
        delta=spec.delta,
        fake_reports=spec.fake_reports,
        bound=bound,
    )
