"""Real summation with pure privacy: ``RSum_PURE`` (Ghazi et al., ITC'20, arXiv 2002.01919).

Binary digits of the rounded value, the ``Cnt_PURE`` counter on each digit position (survey
§4.3, table 8). By default ε is split over the digits by a Lagrange optimum
(``allocation="optimal"``); ``allocation="tuned"`` also lets each digit's counter send more
messages and choose its noise scale from a finer grid (see RSumPURE).
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    TALLY_BLOCK,
    Estimate,
    HonestUsersBound,
    InputKind,
    MessageTally,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._cnt_pure import (
    CERTIFY_WORK,
    FINE_SCALES,
    MAX_TAU,
    SCALES,
    CounterCalibration,
    PureBitCounter,
    check_tau,
    default_tau,
    product_lower_epsilon,
    pure_bound_name,
    pure_count_laws,
)
from ._errors import ParameterError
from ._messages import (
    randomized_round,
)
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from ._rsum import (
    _check_reals,
    _opt_int,
)

__all__ = [
    "MAX_PURE_BITS",
    "PRECISION_TOLERANCE",
    "PURE_VARIANCE_EXPONENT",
    "TUNED_TAU_FACTOR",
    "TUNED_VARIANCE_EXPONENT",
    "RSumPURE",
    "default_precision",
    "optimal_precision",
    "optimal_shares",
    "tuned_tau",
]


# ---------------------------------------------------------------------------------------
# RSum_PURE — Ghazi et al. (ITC'20, arXiv 2002.01919): binary digits, Cnt_PURE per digit
# ---------------------------------------------------------------------------------------

#: Most binary digits RSum_PURE accepts (x·(2^p − 1) must stay exact in a double).
MAX_PURE_BITS = 48


def default_precision(n: int) -> int:
    """p = ⌈½ log₂ n⌉ + 1: RSum_PURE's default number of binary digits (see RSumPURE)."""
    return math.ceil(0.5 * math.log2(max(check_n(n), 2))) + 1


#: a in the planning model Var ĉ(ε) ≈ V₁ ε^{−a} of one ``Cnt_PURE`` digit counter: the
#: least-squares slope of the calibrated counter's variance at n = 10⁵ over ε ∈ [0.12, 1]
#: (std 3.38, 7.05, 12.2, 18.8, 30.0 at ε = 1, 0.5, 0.3, 0.2, 0.12; std ∝ ε^{−1.04}).
PURE_VARIANCE_EXPONENT = 2.1

#: V₁ of that model: the fit's variance at ε = 1 (11.8; the counter's own is 11.4, std 3.38).
_PURE_UNIT_VARIANCE = 12.0


#: RSum_PURE's allocations of ε over its digits (see :class:`RSumPURE`); "optimal" is the default.
ALLOCATIONS = ("tuned", "optimal", "even", "weighted")

#: Most τ_j of the "tuned" allocation, in units of :func:`~protocols._cnt_pure.default_tau`
#: (n, ε_j) (see :func:`tuned_tau`): enough messages for ω to reach far with little weight
#: on its wide part (a mixed ω of w = 0.003 at n = 10⁵).
TUNED_TAU_FACTOR = 4

#: a and V₁ of the "tuned" digits' counters (τ up to :data:`TUNED_TAU_FACTOR` times
#: ``default_tau``, Δ from :data:`~protocols._cnt_pure.FINE_SCALES`), fitted at n = 10⁵
#: (see RSumPURE).
TUNED_VARIANCE_EXPONENT = 1.8
_TUNED_UNIT_VARIANCE = 9.0


def tuned_tau(n: int, epsilon: float) -> int:
    """τ of a "tuned" digit at ε_j: f·(τ_d − 1) + 1, τ_d = :func:`~protocols._cnt_pure.default_tau`
    (n, ε_j), f the largest factor ≤ :data:`TUNED_TAU_FACTOR` (at least 1) that keeps the
    digit's whole crowd of ⌈(n − 1)/2⌉ same-bit users within what the exact accountant
    convolves (:func:`~protocols._cnt_pure.certify_cap`): past it the counter is certified
    for a capped crowd, its λ larger than the crowd needs, and more messages would cost
    more noise than they save.

    Args:
        n: the number of users.
        epsilon: the digit's ε_j.

    Returns:
        τ (odd).
    """
    base = default_tau(n, epsilon) - 1
    crowd = max(check_n(n) // 2, 1)  # ⌈(n − 1)/2⌉
    fits = (CERTIFY_WORK // crowd - 1) // max(base, 1)
    factor = max(1, min(TUNED_TAU_FACTOR, fits))
    return min(factor * base + 1, MAX_TAU)


def optimal_shares(bits: int, a: float = PURE_VARIANCE_EXPONENT) -> tuple[float, ...]:
    """Digit j's share of ε, ∝ 4^{j/(a+1)}, summing to 1 (see RSumPURE, "optimal").

    Args:
        bits: the number p of digits.
        a: the exponent of the variance model Var(ε) ∝ ε^{−a}.

    Returns:
        The p shares, lowest digit first.
    """
    w = [4.0 ** (j / (a + 1.0)) for j in range(check_n(bits, "bits"))]
    total = sum(w)
    return tuple(v / total for v in w)


#: :func:`optimal_precision` takes the fewest digits whose model MSE is within this
#: fraction of the least (1 % in std): the MSE is flat near its minimum, while every
#: extra digit is a counter at a smaller ε_j, with more messages (τ_j ∝ 1/ε_j) and a
#: slower calibration.
PRECISION_TOLERANCE = 0.02


def optimal_precision(
    n: int,
    epsilon: float,
    *,
    a: float = PURE_VARIANCE_EXPONENT,
    unit_variance: float = _PURE_UNIT_VARIANCE,
) -> int:
    """The fewest digits p ≤ :func:`default_precision` whose model MSE of the optimal
    allocation, V₁ ε^{−a} W_p^{a+1}/(2^p − 1)² + n/(4(2^p − 1)²), W_p = Σ_{j<p} 4^{j/(a+1)},
    is within :data:`PRECISION_TOLERANCE` of the least over p.

    Args:
        n: the number of users.
        epsilon: the total ε.
        a: the exponent of the counter's variance law V₁ ε^{−a}.
        unit_variance: V₁, the counter's variance at ε = 1.

    Returns:
        The number of binary digits.
    """
    n, eps = check_n(n), check_epsilon(epsilon)
    mse = []
    for p in range(1, default_precision(n) + 1):
        w = sum(4.0 ** (j / (a + 1.0)) for j in range(p))
        mse.append((unit_variance * eps**-a * w ** (a + 1.0) + n / 4.0) / ((1 << p) - 1) ** 2)
    least = min(mse)
    return next(p for p, v in enumerate(mse, 1) if v <= (1.0 + PRECISION_TOLERANCE) * least)


class RSumPURE(ShuffleProtocol):
    """``RSum_PURE``: p binary digits, the ``Cnt_PURE`` mechanism on each digit position.

    User i rounds x_i to v_i = R_{2^p−1}(x_i) ∈ {0, …, 2^p − 1} (unbiased) and, for each digit
    position j (weight 2^j), runs the ``Cnt_PURE`` randomizer on its bit b_ij at ε_j, sending
    τ_j messages (j, bit), Σ_j ε_j = ε (see the allocation below). A user changes at most p
    digit counts, so basic composition makes the whole ε-DP with δ = 0. Estimate
    Σ_j 2^j ĉ_j / (2^p − 1): unbiased, variance Σ_j 4^j Var ĉ_j / (2^p − 1)² +
    Σ f(1−f)/(2^p − 1)².

    Parameters. The paper sends O_ε(log³ n) messages: O(log n) digits, each a binary
    summation at ε/p with O_{ε/p}(log n) messages. Under the even split p = ⌈½ log₂ n⌉ + 1,
    the fewest digits whose rounding stays O(1) (2^p − 1 ≥ √n, so its std is ≤ ½), and
    τ_j = :func:`~protocols._cnt_pure.default_tau` (n, ε_j) = 2⌈log₂ n / ε_j⌉ + 1 per digit.
    The survey (§4.3) reads p = 2 log₂ n; that many digits split ε finer and cost more
    messages for a larger error, so it is not the default (``precision`` and ``messages``
    override p and τ). Each digit's counter is calibrated as :mod:`protocols._cnt_pure`
    says (its noise law ω and λ from the exact central ε of the same-digit crowd). At large
    n it runs as a tally with ``--crypto ideal`` (per position: messages and ones).

    Allocation of ε over the digits (``allocation``). ``"optimal"`` gives
    digit j the share ε_j = ε·4^{j/(a+1)}/Σ_k 4^{k/(a+1)}, a = :data:`PURE_VARIANCE_EXPONENT`
    = 2.1, and, unless ``precision`` is set, the fewest digits p whose model MSE is within
    2 % of the least (:func:`optimal_precision`): the Lagrange condition of
    min Σ_j 4^j V(ε_j) under Σ_j ε_j = ε for the counter's law V(ε) ≈ V₁ ε^{−a} (the
    least-squares fit of its exact variance at n = 10⁵ over ε ∈ [0.12, 1], std ∝ ε^{−1.04};
    the fit is this project's), closed form, with minimum V₁ ε^{−a} W_p^{a+1}/(2^p − 1)²,
    W_p = Σ_{j<p} 4^{j/(a+1)}. Fewer digits help: the rounding adds only
    n/(4(2^p − 1)²), while each digit takes a share of ε (p = 4 at n = 10⁴ and 6 at
    n = 10⁵, ε = 1, against 8 and 10 for the even split). ``"even"`` gives every digit ε/p.
    Exact std at ε = 1, uniform values (:meth:`variance`): the optimal allocation's is
    6.59 at n = 10⁴ (550 one-bit messages per user; 6.51 measured over 2 000 seeded
    tallies), 2.05× the ``Cnt_PURE`` counter's (3.21), and 7.70 at n = 10⁵ (2 086
    messages, ≈ 90 s of calibration CPU; 7.88 measured over 1 000 seeded tallies, mean
    error −0.3 ± 0.25), 2.28× the counter's (3.38)
    and 1.53× the counter's with the truncated DLap alone (5.02). With these digit
    counters (τ_j = ``default_tau``) no split of ε and no p reaches 2× the counter at
    n = 10⁵: the best is 2.3× for the model and for the counter's variance interpolated
    between its exact points (ε = 0.12 … 1); 2× would need a variance falling no faster
    than ε^{−1.88} at the same V₁.

    ``"tuned"`` (opt-in) changes the digits' counters, not the composition: each digit
    sends more messages, τ_j = :func:`tuned_tau` (up to :data:`TUNED_TAU_FACTOR` = 4 times
    ``default_tau`` (n, ε_j), as far as the accountant still certifies the digit's whole
    crowd), and its calibration also chooses the truncated DLap's scale Δ from the finer
    grid :data:`~protocols._cnt_pure.FINE_SCALES` (1, 1.1, 1.2, 1.3, 1.5, 2, 3). With
    more messages ω reaches further, so a mixed ω with less weight on its wide part is
    certifiable and the counter's noise falls: at n = 10⁵, std 2.99 at ε = 1, 5.54 at 0.5,
    8.79 at 0.3, 12.7 at 0.2 and 20.7 at 0.12 (w = 0.003), against 3.38, 7.05, 12.2,
    18.8 and 30.0 with ``default_tau``. The shares and p are the Lagrange optimum above
    refitted to that law, a = :data:`TUNED_VARIANCE_EXPONENT` = 1.8 and V₁ = 9 (the fit is
    this project's). Every digit's central ε is still the exact computation of
    :mod:`protocols._cnt_pure` for its own (λ, τ, ω), so the guarantee is the same basic
    composition Σ_j ε_j = ε, δ = 0: nothing is claimed beyond what the accountant computes.
    Exact std at ε = 1, uniform values: 5.28 at n = 10⁴ (p = 5, 4 261 messages per user,
    ≈ 140 s of calibration CPU), 1.64× the ``Cnt_PURE`` counter's (3.21), and 5.72 at
    n = 10⁵ (p = 7, 6 651 messages, ≈ 10 CPU-minutes), **1.69× the counter's (3.38)** and
    1.14× the counter's with the truncated DLap alone (5.02), against 6.59 and 7.70 for
    ``"optimal"``; at n = 2 000, 4.78 against 5.51.

    It costs messages (τ_j ∝ 1/ε_j, times up to 4) and calibration time (a larger τ
    makes each exact evaluation slower). At n = 10⁶ the whole crowd (5·10⁵ same-bit users)
    is within the accountant's reach only at τ ≤ 128, so :func:`tuned_tau` leaves every
    digit at ``default_tau`` there and only the finer Δ grid and the refitted shares
    remain.

    Fewer, many-level digits, each fed to one counter as virtual users (a digit value
    v ∈ {0, …, k} as k virtual users of which v hold 1, ε_j/k per virtual user by group
    privacy), would spread the weights 4^j less unevenly, but they are not offered: a
    k-level digit has n·k virtual users at ε_j/k, hence τ ≈ k·``default_tau`` and a crowd
    of nk/2 same-bit users, k² times the accountant's work of a binary digit, beyond
    :func:`~protocols._cnt_pure.certify_cap` from n ≈ 10⁵ on; certified for a capped
    crowd, λ is larger than the crowd needs and the noise variance grows like nk/cap.
    Whatever the allocation, the collusion audit's lower bound at δ
    (:meth:`honest_users_lower`) is the exact ε(δ) of the product of the digits' pairs (up
    to p·10⁻³).

    ``"weighted"`` gives digit j the share ε_j = ε·2^{2j/3}/Σ_k 2^{2k/3}: the estimate's
    variance is Σ_j 4^j Var_j(ε_j)/(2^p − 1)², and if Var_j(ε_j) = C/ε_j² (the law
    of a Laplace-like counter) the Lagrange condition 4^j C/ε_j³ = const under Σ ε_j = ε gives
    exactly these shares, with variance C (Σ_j 2^{2j/3})³/(ε² (2^p − 1)²) — bounded in p
    (at most 2.22² C/ε²), where the even split's grows like p²·C/ε². Its privacy is the
    same basic composition (Σ_j ε_j = ε, each digit's counter calibrated to its ε_j), so
    the guarantee is as sound. It costs more messages (τ_j ∝ 1/ε_j: the low digits get
    small shares) and one calibration per digit.
    """

    name: ClassVar[str] = "rsum_pure"
    input_kind: ClassVar[InputKind] = InputKind.REAL01

    def __init__(
        self,
        *,
        epsilon: float,
        n: int,
        precision: int | None = None,
        messages: int | None = None,
        allocation: str = "optimal",
    ) -> None:
        self._eps = check_epsilon(epsilon)
        if allocation not in ALLOCATIONS:
            raise ParameterError(
                "rsum_pure: allocation must be one of "
                f"{', '.join(repr(a) for a in ALLOCATIONS)}, got {allocation!r}"
            )
        self.allocation = allocation
        self._n = n = check_n(n)
        tuned = allocation == "tuned"
        law = (
            (TUNED_VARIANCE_EXPONENT, _TUNED_UNIT_VARIANCE)
            if tuned
            else (PURE_VARIANCE_EXPONENT, _PURE_UNIT_VARIANCE)
        )
        if precision is not None:
            bits = precision
        elif allocation in ("optimal", "tuned"):
            bits = optimal_precision(n, self._eps, a=law[0], unit_variance=law[1])
        else:
            bits = default_precision(n)
        self.bits = check_n(bits, "precision (binary digits)", 1)
        if self.bits > MAX_PURE_BITS:
            raise ParameterError(
                f"rsum_pure: precision must be <= {MAX_PURE_BITS} binary digits, got {self.bits}"
            )
        self.scale = (1 << self.bits) - 1
        if allocation == "even":
            shares = [1.0] * self.bits
        elif allocation in ("optimal", "tuned"):
            shares = list(optimal_shares(self.bits, law[0]))
        else:
            shares = [2.0 ** (2.0 * j / 3.0) for j in range(self.bits)]
        total = sum(shares)
        #: ε_j of each digit position j (Σ_j ε_j = ε: basic composition).
        self.digit_epsilons: tuple[float, ...] = tuple(self._eps * w / total for w in shares)
        self._taus = tuple(
            check_tau(
                messages
                if messages is not None
                else tuned_tau(n, e)
                if tuned
                else default_tau(n, e)
            )
            for e in self.digit_epsilons
        )
        self._tau = self._taus[-1]
        #: The noise scales Δ each digit's calibration chooses from.
        self.scales: tuple[float, ...] = FINE_SCALES if tuned else SCALES

    @functools.cached_property
    def counters(self) -> tuple[PureBitCounter, ...]:
        """Digit j's calibrated counter (at ε_j), derived on first use (up to a minute per
        distinct ε_j at n = 10^6), so listing the protocol or its message count costs
        nothing."""
        made: dict[tuple[float, int], PureBitCounter] = {}
        out = []
        for e, t in zip(self.digit_epsilons, self._taus, strict=True):
            if (e, t) not in made:
                made[(e, t)] = PureBitCounter.derive(
                    epsilon=e, tau=t, honest_users=self._n, scales=self.scales
                )
            out.append(made[(e, t)])
        return tuple(out)

    def calibrations(self) -> tuple[CounterCalibration, ...]:
        """The digits' distinct counter calibrations that :attr:`counters` would compute,
        not yet computed, the costliest first.

        Each can be computed on its own, in any process (``CounterCalibration.compute``),
        and installed (``install``) in the process that reads :attr:`counters` before it
        first does: the counters then take those results instead of computing them one
        after the other, and are the same, bit for bit. This lets a pool of processes share
        one protocol's calibrations, which otherwise run in the process that builds it.

        Returns:
            One calibration per distinct digit counter that needs computing (none where
            only the local bound applies).
        """
        wanted = {
            CounterCalibration.of(epsilon=e, tau=t, honest_users=self._n, scales=self.scales)
            for e, t in zip(self.digit_epsilons, self._taus, strict=True)
        }
        return tuple(
            sorted((c for c in wanted if c.others > 0), key=lambda c: (-c.work, c.epsilon))
        )

    @property
    def bit(self) -> PureBitCounter:
        """Each digit's calibrated counter (at ε/p) under the even allocation.

        Raises:
            ParameterError: the allocation is not ``"even"`` (see :attr:`counters`).
        """
        if self.allocation != "even":
            raise ParameterError(
                f"rsum_pure: the {self.allocation} allocation has one counter per digit"
            )
        return self.counters[0]

    @property
    def domain(self) -> int:
        return self.scale + 1

    @property
    def message_size(self) -> int:
        return 2

    @property
    def messages_per_user(self) -> float:
        return float(sum(self._taus))

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self._eps,
            epsilon_local=sum(c.epsilon_local for c in self.counters),
            delta=0.0,
            bound=f"basic_composition[{self.bits}] x {pure_bound_name(self.counters[-1], 1.0)}"
            + (
                ""
                if self.allocation == "even"
                else f" ({self.allocation} allocation, top digit shown)"
            ),
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Each digit's exact accountant (``Cnt_PURE``), composed over the p digits (pure:
        an upper bound at every δ; no lower bound, see :meth:`honest_users_lower`); under the
        weighted and optimal allocations the sum of the digits' bounds.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound, or ``None``.
        """
        if self.allocation == "even":
            return self.bit.honest_users_bound(honest_others, digits=self.bits)
        parts = [c.honest_users_bound(honest_others) for c in self.counters]
        if any(b is None for b in parts):
            return None
        return HonestUsersBound(
            sum(b.epsilon_upper for b in parts if b is not None),
            f"basic_composition[{self.bits}] x cnt_pure_exact_central "
            f"({self.allocation} allocation)",
        )

    def honest_users_lower(
        self, honest_others: int, *, fakes: int = 0, delta: float
    ) -> tuple[float, str] | None:
        """A lower bound on ε at δ: the victim's value 0 against 1 flips every digit, the
        honest others hold 0; the p digit counts are independent given the fakes per digit
        (each at most ``fakes``, and fewer fakes only help the analyzer), so the exact ε(δ)
        of the product of the digits' pairs, each digit with all ``fakes``, is a lower
        bound (up to p·10⁻³): :meth:`PureBitCounter.honest_users_lower` composed p-fold
        when the digits are identical (the even split), else
        :func:`~protocols._cnt_pure.product_lower_epsilon` over the digits' own pairs.

        Args:
            honest_others: the honest users besides the victim.
            fakes: the fake values the adversary cannot tell apart.
            delta: δ.

        Returns:
            ``(epsilon, pair)``: the lower bound and a description of the neighbouring pair, or
            ``None`` where a digit's laws are too wide to compute directly.
        """
        if self.allocation == "even":
            return self.bit.honest_users_lower(
                honest_others, fakes=fakes, delta=delta, digits=self.bits
            )
        h = check_n(honest_others, "honest others", 0)
        f = check_n(fakes, "fakes", 0)
        d = check_delta(delta, pure=True)  # a lower bound holds at δ = 0 too
        pairs = []
        for c in self.counters:
            laws = pure_count_laws(lam=c.lam, tau=c.tau, omega=c.omega, others=h, fakes=f)
            if laws is None:
                return None
            pairs.append(laws)
        crowd = f"all {h} honest others hold 0" if h else "no honest other user"
        return (
            product_lower_epsilon(pairs, d),
            f"{crowd}, {f} honest fakes per digit, the victim's value flips all "
            f"{self.bits} digits ({self.allocation} allocation)",
        )

    def __repr__(self) -> str:
        return (
            f"RSumPURE(epsilon={self._eps:g}, n={self._n}, bits={self.bits}, "
            f"allocation={self.allocation}, tau={self.counters[-1].tau}, "
            f"lam={self.counters[-1].lam:.6g})"
        )

    def _digits(self, x: npt.NDArray[np.float64], *, rng: np.random.Generator) -> Any:
        v = randomized_round(x, self.scale, rng=rng)
        return (v[:, None] >> np.arange(self.bits)[None, :]) & 1

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = _check_reals(self, values)
        digits = self._digits(x, rng=rng)
        parts = []
        for j, counter in enumerate(self.counters):
            ones = int(counter.ones(digits[:, j], rng=rng).sum())
            block = np.zeros((x.size * counter.tau, 2), dtype=np.int64)
            block[:, 0] = j
            block[:ones, 1] = 1
            parts.append(block)
        return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return np.asarray(messages, dtype=np.int64).reshape(-1, 2).astype(np.uint8)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        r = np.asarray(rows, dtype=np.uint8).reshape(-1, 2).astype(np.int64)
        return r, (r[:, 0] < self.bits) & (r[:, 1] <= 1)

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        out = np.empty((count, 2), dtype=np.int64)
        out[:, 0] = rng.integers(0, self.bits, size=count)
        out[:, 1] = rng.integers(0, 2, size=count)
        return out

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Per digit position j: (messages received, ones among them), flattened.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        received = np.bincount(msgs[:, 0], minlength=self.bits)[: self.bits]
        ones = np.bincount(msgs[:, 0], weights=msgs[:, 1], minlength=self.bits)[: self.bits]
        counts = np.stack([received, ones.astype(np.int64)], axis=1).reshape(-1)
        return MessageTally(counts.astype(np.int64), int(msgs.shape[0]))

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """Each user's number of ones per position is drawn (as :meth:`randomize` does);
        only the p·τ messages per user are never written out.

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = _check_reals(self, values)
        ones = np.zeros(self.bits, dtype=np.int64)
        for s in range(0, x.size, TALLY_BLOCK):
            digits = self._digits(x[s : s + TALLY_BLOCK], rng=rng)
            for j, counter in enumerate(self.counters):
                ones[j] += int(counter.ones(digits[:, j], rng=rng).sum())
        received = np.array([x.size * c.tau for c in self.counters], dtype=np.int64)
        counts = np.stack([received, ones], axis=1).reshape(-1)
        return MessageTally(counts, int(received.sum()))

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        cells = rng.multinomial(count, np.full(2 * self.bits, 1.0 / (2 * self.bits)))
        per = cells.reshape(self.bits, 2)  # (position, bit) uniform, as sample_fakes
        counts = np.stack([per.sum(axis=1), per[:, 1]], axis=1).reshape(-1)
        return MessageTally(counts.astype(np.int64), count)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        """Σ_j 2^j ĉ_j/(2^p − 1), with a plug-in of the exact noise variance.

        Each digit's counter variance depends on the data only through its count of ones,
        estimated by ĉ_j (clipped to [0, n]); the rounding's Σf(1−f)/(2^p − 1)² is stated by
        its bound n/(4(2^p − 1)²), the analyzer not seeing the values' fractional parts.
        ``extra`` holds both parts (``"noise_variance"``, ``"rounding_variance_bound"``).

        Args:
            tally: the tally of the received messages.
            n: the number of users.
            n_fakes: the fake values among the messages.

        Returns:
            The estimate.
        """
        per = tally.counts.reshape(self.bits, 2)
        total, var = 0.0, 0.0
        for j, counter in enumerate(self.counters):
            received, ones = int(per[j, 0]), int(per[j, 1])
            c_hat = counter.debias(ones, n=n, received=received)
            total += (1 << j) * c_hat
            fakes = max(received - n * counter.tau, 0)
            count = min(max(c_hat, 0.0), float(n))
            var += 4.0**j * counter.variance(n=n, count=count, fakes=fakes) / self.scale**2
        rounding = n / 4.0 / self.scale**2
        return Estimate(
            values=np.array([total / self.scale]),
            expected_std=np.array([math.sqrt(var + rounding)]),
            messages_used=tally.messages,
            extra={
                "bits": self.bits,
                "noise_variance": var,
                "rounding_variance_bound": rounding,
            },
        )

    def variance(self, values: npt.ArrayLike, *, n_fakes: int = 0) -> float:
        """Exact variance for these inputs (``n_fakes`` fake bits per digit position).

        Args:
            values: the users' values.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimate.
        """
        x = _check_reals(self, values)
        scaled = x * self.scale
        fl = np.floor(scaled).astype(np.int64)
        f = scaled - fl
        var = float(np.sum(f * (1 - f)))
        for j, counter in enumerate(self.counters):
            # E Σ b_ij over the rounding: the digit of ⌊·⌋ or of ⌊·⌋ + 1.
            lo_bit = (fl >> j) & 1
            hi_bit = ((fl + 1) >> j) & 1
            count = float(np.sum((1 - f) * lo_bit + f * hi_bit))
            var += 4.0**j * counter.variance(n=x.size, count=count, fakes=n_fakes)
        return var / self.scale**2

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.array([float(_check_reals(self, values).sum())])


@register_protocol("rsum_pure")
def _build_rsum_pure(spec: ProtocolSpec) -> ShuffleProtocol:
    return RSumPURE(
        epsilon=spec.epsilon,
        n=spec.n,
        precision=_opt_int(spec, "precision"),
        messages=_opt_int(spec, "messages"),
        allocation=str(spec.options.get("allocation", "optimal")),
    )
