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

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Calibration,
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
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from .accounting import krr_lambda, largest_local, tightest_central

__all__ = ["CntRR", "HistKR"]


@dataclass(frozen=True, slots=True)
class _KRRParams:
    k: int
    epsilon_local: float
    n: int
    delta: float
    total_fakes: int
    bound: str
    epsilon_central: float


class HistKR(ShuffleProtocol):
    """``Hist_KR``: histogram over [d] by k-ary randomized response + shuffling.

    Privacy (survey Thm 4, Balle et al. Crypto'19 Thm 3.1, or the tightest registered
    bound for the ``krr`` family): ε_l is chosen as the largest local ε whose shuffle of n
    reports is (ε_c, δ)-DP. One message per user of ``ceil(log256 d)`` bytes.

    ``total_fakes`` (uniform fakes over every shuffler) is recorded as the calibration; the
    k-RR bounds do not count fakes (more uniform reports only help, by post-processing).

    For one run (:meth:`privacy_for_run`): the bound of the calibration evaluated forward
    at the fixed ε_l and the run's honest users; where it does not apply there, or gives no
    less than ε_l, ε_l itself (pure, δ = 0: the local guarantee holds whatever the shuffle
    did). Fakes are not counted.
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
        total_fakes: int = 0,
        bound: str | None = None,
    ) -> None:
        k = check_n(domain, "domain", 2)
        eps_l = check_epsilon(epsilon_local, "epsilon_local")
        n = check_n(n)
        delta = check_delta(delta, why="its amplification bounds are approximate DP")
        fakes = check_n(total_fakes, "total_fakes", 0)
        eps_c, bound_name = tightest_central(
            epsilon_local=eps_l, n=n, delta=delta, family=self.family, k=k, bound=bound
        )
        self._p = _KRRParams(k, eps_l, n, delta, fakes, bound_name, eps_c)
        self._lam = krr_lambda(eps_l, k)
        self._size = uint_codec_size(k)
        self.record_calibration(Calibration(n, fakes))

    @classmethod
    def from_central(
        cls,
        *,
        domain: int,
        epsilon_central: float,
        n: int,
        delta: float,
        total_fakes: int = 0,
        bound: str | None = None,
    ) -> HistKR:
        """Configure for a target ε_c: the largest ε_l any applicable bound allows.

        Args:
            domain: the number k of bins, at least 2.
            epsilon_central: the target ε_c.
            n: the number of users.
            delta: the target δ.
            total_fakes: the uniform fake reports of every shuffler together.
            bound: force this registered amplification bound.

        Returns:
            The configured protocol.
        """
        k = check_n(domain, "domain", 2)
        eps_l, chosen = largest_local(
            epsilon_central=epsilon_central, n=n, delta=delta, family=cls.family, k=k, bound=bound
        )
        return cls(
            domain=k,
            epsilon_local=eps_l,
            n=n,
            delta=delta,
            total_fakes=total_fakes,
            bound=chosen,
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

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """The k-RR bound forward at the fixed ε_l and ``n_users`` (class docstring).

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).
        """
        n_users = check_n(n_users, "n_users", 0)
        check_n(fake_reports_total, "fake_reports_total", 0)
        p = self._p
        return krr_run_guarantee(
            epsilon_local=p.epsilon_local,
            n_users=n_users,
            delta=p.delta,
            k=p.k,
            family=self.family,
            bound=p.bound,
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"{type(self).__name__}(domain={p.k}, epsilon_local={p.epsilon_local:.6g}, "
            f"n={p.n}, delta={p.delta:g}, bound={p.bound!r})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
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

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
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
        """Exact variance of :meth:`estimate` per bin, given the true counts.

        Args:
            counts: the true counts of the d values.
            n: the number of users.
            n_fakes: the fake reports among the messages.

        Returns:
            The d variances.
        """
        k, lam = self._p.k, self._lam
        x = np.asarray(counts, dtype=np.float64)
        p = 1.0 - lam + lam / k
        q = lam / k
        var = x * p * (1 - p) + (n - x) * q * (1 - q) + n_fakes * (1 / k) * (1 - 1 / k)
        return np.asarray(var / (1.0 - lam) ** 2, dtype=np.float64)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


def krr_run_guarantee(
    *,
    epsilon_local: float,
    n_users: int,
    delta: float,
    k: int,
    family: str = "krr",
    bound: str | None = None,
    note: str = "",
) -> PrivacyGuarantee:
    """The guarantee of shuffling ``n_users`` k-RR reports at a fixed ε_l.

    The bound (``bound``: the one the protocol was calibrated with; None: the tightest
    registered one for ``family``) is evaluated forward at ``n_users``; where it does not
    apply there, or proves no less than ε_l, the local guarantee (ε_l, 0) is stated
    instead: it holds whatever the shuffle did.

    Args:
        epsilon_local: ε_l of every report.
        n_users: honest users whose reports were shuffled (0 allowed).
        delta: δ of the central guarantee.
        k: domain of the randomized response.
        family: randomizer family for the bound registry.
        bound: force this registered bound (None: the tightest).
        note: appended to the bound's name (e.g. what it is applied to).

    Returns:
        The smaller of the bound's forward value and ε_l, with its δ and name.
    """
    local = PrivacyGuarantee(
        epsilon_central=epsilon_local,
        epsilon_local=epsilon_local,
        delta=0.0,
        bound=f"local guarantee eps_l (k-RR bound does not apply at n={n_users})",
    )
    if n_users < 1:
        return local
    try:
        eps_c, name = tightest_central(
            epsilon_local=epsilon_local, n=n_users, delta=delta, family=family, k=k, bound=bound
        )
    except BoundNotApplicable:
        return local
    if not eps_c < epsilon_local:
        return replace(local, bound=f"local guarantee eps_l ({name} gives no less)")
    return PrivacyGuarantee(
        epsilon_central=eps_c,
        epsilon_local=epsilon_local,
        delta=delta,
        bound=name + note,
    )


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
        total_fakes: int = 0,
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
            total_fakes=total_fakes,
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


@register_protocol("hist_kr")
def _build_hist_kr(spec: ProtocolSpec) -> ShuffleProtocol:
    return HistKR.from_central(
        domain=spec.domain,
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        total_fakes=spec.total_fake_reports,
        bound=spec.bound,
    )


@register_protocol("cnt_rr")
def _build_cnt_rr(spec: ProtocolSpec) -> ShuffleProtocol:
    eps_l, bound = largest_local(
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        family=CntRR.family,
        k=2,
        bound=spec.bound,
    )
    return CntRR(
        epsilon_local=eps_l,
        n=spec.n,
        delta=spec.delta,
        total_fakes=spec.total_fake_reports,
        bound=bound,
    )
