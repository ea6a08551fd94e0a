"""``Cnt_2M``: binary counting with at most two messages per user (Balcer & Cheu, ITC'20).

Balcer & Cheu, "Separating Local & Shuffled Differential Privacy via Histograms" (arXiv
1911.06879, §3, the binary-sum protocol P^{zsum}_{ε,δ} that their histogram protocol runs
once per bin; survey §4.1, table 6). Every message is the constant "1".

Randomizer R(x), x ∈ {0, 1}:
    p = 1 − 50 ln(2/δ) / (ε² n),   z ~ Ber(p),   send x + z copies of "1".
Analyzer: with c* = number of "1"s received (fakes removed: every fake is a "1"),
    output c* − p·n  if c* > n,  else 0.
Shuffled, the count of "1"s is Σx + Bin(n, p) = Σx + n − Bin(n, 1 − p): Bin(n, 1 − p) is
(ε, δ, 1)-smooth (their binomial-smoothness lemma, with (1 − p)·n = 50 ln(2/δ)/ε²), so the
view is (ε, δ)-DP for ε, δ ∈ (0, 1] and n ≥ 100 ln(2/δ)/ε² (the validity range of the
theorem, enforced here). The user sends nothing locally private: ε_local = ∞.

Accuracy: Σx = 0 gives c* ≤ n and the output 0 exactly. Otherwise the output is biased
towards 0 (the truncation), which is why the paper proves an error bound rather than
unbiasedness. When c* > n the output is Σx + (Bin(n,p) − pn), unbiased with variance
n p (1 − p). With probability ≥ 1 − β, Bernstein's inequality gives |Bin(n,p) − pn| ≤ t,
    t = √(2 n p (1−p) ln(2/β)) + (2/3) ln(2/β),
and both branches then have |error| ≤ (1 − p) n + t (:meth:`Cnt2M.error_bound`): the paper's
O(log(1/δ)/ε²) additive error, since (1 − p) n = 50 ln(2/δ)/ε².

Colluding users (:meth:`Cnt2M.honest_users_bound`). A colluding user's messages are known to
the analyzer, a fixed offset like the other users' inputs in the worst case, so with h honest
users (the victim included) the view is Σx + Bin(h, p) up to that offset and the victim's
input shifts it by one. Its exact ε(δ) (both hockey-stick directions of the shift of
Bin(h, p), computed on the binomial's support) is the honest-users bound, floored at the
configured ε so the colluders' rows never print less than the no-collusion one (any number
above a valid bound is one). Bin(h + 1, p) is Bin(h, p) plus an independent bit, so the bound
only grows as h falls.

The paper's text was not available offline; p, the validity range and the histogram's 2(ε, δ)
were cross-checked against a public reading of it (github.com/abiswas3/differentialprivacy,
ShufflePrivacy/Readme.md: R^zsum with 1 − p = 50 ln(2/δ)/(ε²n), valid for ε, δ ∈ [0, 1]
and n ≥ 100 ln(2/δ)/ε², from the binomial-smoothness lemma with α = ε/√5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    HonestUsersBound,
    InputKind,
    PrivacyGuarantee,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import ParameterError
from ._messages import encode_bits
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from .accounting import binomial_window, epsilon_for_pair

__all__ = ["Cnt2M", "Cnt2MParams"]

#: The only message of the protocol, as a byte.
ONE: int = 1


@dataclass(frozen=True, slots=True)
class Cnt2MParams:
    """Parameters of ``Cnt_2M`` (Balcer & Cheu arXiv 1911.06879, binary sum P^{zsum}).

    p = 1 − 50 ln(2/δ)/(ε² n) is the probability of the extra "1"; valid for ε ∈ (0, 1],
    δ ∈ (0, 1) and n ≥ 100 ln(2/δ)/ε² (which makes p ≥ 1/2). The guarantee is (ε, δ)-DP of
    the shuffled messages; at most 2 messages per user, 1 + p expected for a user holding 1.

    Attributes:
        epsilon: ε of the shuffled output.
        delta: δ of the shuffled output.
        n: number of users.
        p: probability that a user sends the extra "1".
    """

    epsilon: float
    delta: float
    n: int
    p: float

    @classmethod
    def derive(cls, *, epsilon: float, delta: float, n: int) -> Cnt2MParams:
        eps = check_epsilon(epsilon)
        d = check_delta(delta)
        n = check_n(n)
        if eps > 1.0:
            raise ParameterError(f"cnt_2m: the theorem holds for epsilon <= 1, got {eps:g}")
        n_min = 100.0 * math.log(2.0 / d) / eps**2
        if n < n_min:
            raise ParameterError(
                f"cnt_2m: needs n >= 100 ln(2/δ)/ε² = {math.ceil(n_min)} at epsilon={eps:g}, "
                f"delta={d:g}; got n={n}"
            )
        p = 1.0 - 50.0 * math.log(2.0 / d) / (eps**2 * n)
        return cls(epsilon=eps, delta=d, n=n, p=p)


class Cnt2M(ShuffleProtocol):
    """``Cnt_2M``: each user sends x + Ber(p) copies of the message "1" (see module doc)."""

    name: ClassVar[str] = "cnt_2m"
    input_kind: ClassVar[InputKind] = InputKind.BINARY

    def __init__(self, *, epsilon: float, delta: float, n: int) -> None:
        self.params = Cnt2MParams.derive(epsilon=epsilon, delta=delta, n=n)

    @property
    def domain(self) -> int:
        return 2

    @property
    def message_size(self) -> int:
        return 1

    @property
    def messages_per_user(self) -> float:
        """Expected messages of a user holding 1 (1 + p); the paper's bound is "at most 2"."""
        return 1.0 + self.params.p

    @property
    def max_messages_per_user(self) -> int:
        return 2

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=self.params.epsilon,
            epsilon_local=math.inf,
            delta=self.params.delta,
            bound="balcer_cheu20_zsum (arXiv 1911.06879 §3, binomial smoothness)",
        )

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the exact ε at the protocol's δ of the shift of Bin(h, p), floored at ε.

        h = ``honest_others`` + 1 honest users send Σx + Bin(h, p) ones beside the colluders'
        known messages; the victim's input moves that count by one (module docstring).

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound (``inf`` when the victim's extra "1" is certain to show, p = 1).
        """
        h = check_n(honest_others, "honest others", 0) + 1
        p = self.params
        _, pmf = binomial_window(h, p.p)
        with np.errstate(divide="ignore"):
            law = np.log(np.concatenate([pmf, [0.0]]))  # Σx + Bin(h, p), victim holds 0
            shifted = np.log(np.concatenate([[0.0], pmf]))  # victim holds 1
        exact = epsilon_for_pair(law, shifted, p.delta)
        return HonestUsersBound(
            max(p.epsilon, exact), f"cnt_2m_binomial_exact (shift of Bin({h}, {p.p:.6g}))"
        )

    def __repr__(self) -> str:
        p = self.params
        return f"Cnt2M(epsilon={p.epsilon:g}, delta={p.delta:g}, n={p.n}, p={p.p:.6g})"

    # --- client ----------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.int64, copy=False)
        z = np.asarray(rng.random(x.shape[0]) < self.params.p)
        count = int(x.sum()) + int(np.count_nonzero(z))
        return np.full(count, ONE, dtype=np.uint8)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_bits(messages)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        values = np.asarray(rows, dtype=np.uint8).reshape(-1, 1)[:, 0]
        return values.copy(), values == ONE

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)  # checked, though nothing is drawn:
        # the message space is the single message "1": uniform over it is constant.
        return np.full(check_n(count, "count", 0), ONE, dtype=np.uint8)

    # --- analyzer ----------------------------------------------------------------------
    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        p = self.params.p
        c_star = int(np.count_nonzero(np.asarray(messages) == ONE)) - int(n_fakes)
        truncated = c_star <= n
        value = 0.0 if truncated else c_star - p * n
        # Truncated, the output 0 errs by the count itself; its unbiased estimate c* − pn
        # enters the stated std (as in Hist_MM), so the std never hides the truncation.
        bias = max(c_star - p * n, 0.0) if truncated else 0.0
        return Estimate(
            values=np.array([value], dtype=np.float64),
            expected_std=np.array([math.sqrt(n * p * (1.0 - p) + bias**2)], dtype=np.float64),
            messages_used=int(np.asarray(messages).shape[0]),
            extra={"truncated": bool(truncated), "c_star": c_star},
        )

    def error_bound(self, beta: float) -> float:
        """``|estimate − Σx|`` ≤ this with probability ≥ 1 − β (Bernstein; see module doc).

        Args:
            beta: the failure probability β, in (0, 1).

        Returns:
            The error bound.

        Raises:
            ParameterError: β outside (0, 1).
        """
        b = float(beta)
        if not 0.0 < b < 1.0:
            raise ParameterError(f"beta must lie in (0, 1), got {beta!r}")
        p, n = self.params.p, self.params.n
        log_term = math.log(2.0 / b)
        t = math.sqrt(2.0 * n * p * (1.0 - p) * log_term) + 2.0 / 3.0 * log_term
        return (1.0 - p) * n + t

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(x.sum())], dtype=np.float64)


@register_protocol("cnt_2m")
def _build_cnt_2m(spec: ProtocolSpec) -> ShuffleProtocol:
    # Like cnt_rr, a counting protocol ignores spec.domain (its domain is {0, 1}).
    return Cnt2M(epsilon=spec.epsilon, delta=spec.delta, n=spec.n)
