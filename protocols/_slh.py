"""``SLH`` and ``MURS``: local hashing in the shuffle model, with shuffler-injected fakes.

Wang, Ding, Xu, Huang, Hong, Zhou, Li, Jha, "Improving Utility and Security of the
Shuffler-based Differential Privacy", VLDB'20 (arXiv 1908.11515); survey §4.2.

Randomizer (OLH-style local hashing, Wang et al. USENIX Sec'17 §4.4, with the survey's SLH
parameters): each user draws a fresh hash function H from a universal family [d] → [d'] and
reports (H, y) where y = H(x) with probability p' and each other value of [d'] with
probability (1 − p')/(d' − 1), where (survey §4.2, SLH paragraph)

    d' = ⌊e^{ε_l/2} + 1⌉,   p' = e^{ε_l} / (e^{ε_l} + d' − 1)   (= e^{ε_l/2}/(e^{ε_l/2}+1)
                                                                  before rounding d').

The report is ε_l-LDP (p'/q' = e^{ε_l}).

Hash family: the project's vectorized universal hash (``protocols.lh_hash``). H is
carried in the message as a 64-bit seed s, (a, b) are two SplitMix64 outputs of s, and
    H_s(v) = ⌊(((a·v + b) mod 2^64) >> 32) · d' / 2^32⌋,
Dietzfelbinger's multiply-add-shift (2-independent on 32-bit inputs) followed by Lemire's
range reduction: uint64 arithmetic with wrap-around, no modulo, no per-user Python code.

Privacy (survey Thm 4 = Balle et al. Crypto'19 Thm 3.1 applied to the d'-ary randomized
response on hashed values, with the n_r uniform fakes of MURS added to the blanket, as in the
MURS analysis; the authors' reference code ``murs/analysis.py::blanket_naive_fn`` computes the
same first term). Let
    β = (n − 1) / (e^{ε_l} + d' − 1) + n_r / d'
be the expected number of blanket messages per hashed value. Then the shuffled reports are
(ε_c, δ)-DP with
    ε_c = max{ √(14 ln(2/δ) / β),  27 / β }       valid for ε_c ≤ 1.
For SLH n_r = 0, which is exactly Thm 4 with k = d'. For MURS the same formula with only
the fakes of the one honest shuffler (and the honest users) gives the guarantee when the other
shufflers collude: :meth:`SLH.epsilon_central_for`.
Caveat: the authors' reference code also carries an OLH-specific variant with 4·14 in place of
14 (ε_c doubled, ``blanket_naive_olh``); the survey only says "by Thm 4", which is what this
module implements. The paper's own statement could not be read here; the tests check that the
claim is never below the exact ε of shuffled d'-RR (``protocols.krr_exact_epsilon``), and
that accounting OLH as d'-RR is safe where it can be computed: the exact ε(δ) of the shuffled
(H, y) reports (ideal hashing, every dataset of the others) is never above that of shuffled
d'-RR for n ≤ 8, d ≤ 4, d' ∈ {2, 3} (tests/test_olh_shuffle_exact.py). The reason it holds
there: a report's likelihood depends on x only through the set H⁻¹(y), and for the victim's
pair (a, b) a hash with H(a) = H(b) gives one law under both inputs, so collisions only add
cover; a collision-free family makes OLH d'-RR relabelled, with equal curves. The inequality
in general is not proven: the shuffled (H, y) pairs are not a post-processing of shuffled
d'-RR reports, since one per-message map would have to turn d'-RR of some z_i into the
report of every other user's x_i under every hash, which exists only when the hashes agree
up to a relabelling of [d'].

Estimator (unbiased; Wang et al. USENIX Sec'17 eq. for OLH with n_f uniform fakes). For every
value v let C_v = #{reports i : H_i(v) = y_i}. A user holding v matches w.p. p'; a user holding
u ≠ v matches w.p. exactly 1/d' (2-independence); a fake (uniform seed, uniform y) w.p. 1/d'.
Hence
    ĉ_v = (C_v − (n + n_f)/d') / (p' − 1/d'),
    Var[ĉ_v] = (c_v p'(1 − p') + (n − c_v + n_f)(1/d')(1 − 1/d')) / (p' − 1/d')².

Cost. The aggregation is the n·d hash evaluations the estimator needs; it runs over blocks of
users (``protocols.lh_support_counts``: one multiply, add and compare per cell, O(block·d)
memory), never an n×d matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from ._base import (
    Calibration,
    Estimate,
    InputKind,
    PrivacyGuarantee,
    RandomizerFamily,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._errors import BoundNotApplicable, ParameterError
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from .ldp import lh_hash, lh_support_counts

__all__ = ["MURS", "SLH", "SLHParams", "murs_epsilon_central"]

_SEED_BYTES: Final = 8


def murs_epsilon_central(
    *, epsilon_local: float, g: int, n: int, delta: float, n_fakes: int
) -> float:
    """ε_c of the blanket bound (module docstring), or raise BoundNotApplicable if > 1."""
    beta = (n - 1) / (math.exp(epsilon_local) + g - 1) + n_fakes / g
    if beta <= 0:
        raise BoundNotApplicable("murs blanket bound needs n >= 2 or at least one fake report")
    eps_c = max(math.sqrt(14.0 * math.log(2.0 / delta) / beta), 27.0 / beta)
    if eps_c > 1.0:
        raise BoundNotApplicable(
            f"survey Thm 4 (blanket) holds for epsilon_central <= 1 only; epsilon_local="
            f"{epsilon_local:g}, d'={g}, n={n}, n_r={n_fakes} would need {eps_c:.4g}"
        )
    return eps_c


def _hash_range(epsilon_local: float) -> int:
    """d' = ⌊e^{ε_l/2} + 1⌉ (survey §4.2), at least 2."""
    return max(2, round(math.exp(epsilon_local / 2.0) + 1.0))


@dataclass(frozen=True, slots=True)
class SLHParams:
    """Configuration of ``SLH``/``MURS`` (formulas in the module docstring).

    Attributes:
        domain: d, inputs in [0, d).
        epsilon_local: ε_l of one report (the local guarantee if every shuffler colludes).
        g: d' = ⌊e^{ε_l/2} + 1⌉, the hash range (survey §4.2).
        p: p' = e^{ε_l}/(e^{ε_l} + d' − 1), probability of reporting H(x).
        n: number of users.
        delta: δ.
        total_fakes: n_r, uniform fakes over every shuffler (0 for SLH).
        epsilon_central: ε_c = max{√(14 ln(2/δ)/β), 27/β}, β = (n−1)/(e^{ε_l}+d'−1) + n_r/d'.
    """

    domain: int
    epsilon_local: float
    g: int
    p: float
    n: int
    delta: float
    total_fakes: int
    epsilon_central: float


class SLH(ShuffleProtocol):
    """``SLH``: OLH-style local hashing + one shuffler (Wang et al. VLDB'20; survey §4.2).

    One message per user: (64-bit hash seed, y ∈ [d']). Construct from ε_l, or from a target
    ε_c with :meth:`from_central` (the largest ε_l whose blanket bound meets ε_c).

    For one run (:meth:`privacy_for_run`): the same blanket bound at the fixed ε_l and d'
    with the run's honest users and the fakes actually added; where it does not hold there
    (ε_c > 1), or gives no less than ε_l, the local guarantee ε_l (pure, δ = 0).
    """

    name: ClassVar[str] = "slh"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    bound_name: ClassVar[str] = (
        "survey Thm 4 (Balle et al. Crypto'19 Thm 3.1) on d'-ary RR of hashed values; "
        "Wang et al. VLDB'20 (arXiv 1908.11515)"
    )

    def __init__(
        self,
        *,
        domain: int,
        epsilon_local: float,
        n: int,
        delta: float,
        total_fakes: int = 0,
    ) -> None:
        d = check_n(domain, "domain", 2)
        if d > 1 << 32:
            raise ParameterError(f"{self.name}: domain must be <= 2^32 (32-bit hash), got {d}")
        eps_l = check_epsilon(epsilon_local, "epsilon_local")
        n = check_n(n, "n", 2)
        delta = check_delta(delta, why="its blanket bound (survey Thm 4) is approximate DP")
        fakes = check_n(total_fakes, "total_fakes", 0)
        g = _hash_range(eps_l)
        e = math.exp(eps_l)
        eps_c = murs_epsilon_central(epsilon_local=eps_l, g=g, n=n, delta=delta, n_fakes=fakes)
        self._p = SLHParams(d, eps_l, g, e / (e + g - 1), n, delta, fakes, eps_c)
        self._y_size = uint_codec_size(g)
        self.record_calibration(Calibration(n, fakes))

    @classmethod
    def from_central(
        cls, *, domain: int, epsilon_central: float, n: int, delta: float, total_fakes: int = 0
    ) -> SLH:
        """The largest ε_l whose blanket bound gives ``epsilon_central`` (bisection).

        ε_c(ε_l) is non-decreasing (β decreases as e^{ε_l} and d' grow), so the largest
        admissible ε_l is found by bracketing; the rounding of d' makes it a step function,
        hence bisection on the predicate rather than root finding on a smooth curve.

        Args:
            domain: the number d of values.
            epsilon_central: the target ε_c, at most 1.
            n: the number of users.
            delta: the target δ.
            total_fakes: the uniform fake reports of every shuffler together.

        Returns:
            The configured protocol.

        Raises:
            ParameterError: ε_c > 1 (outside Thm 4), or n too small to reach ε_c at all.
        """
        target = check_epsilon(epsilon_central, "epsilon_central")
        n = check_n(n, "n", 2)
        delta = check_delta(delta, why="its blanket bound (survey Thm 4) is approximate DP")
        fakes = check_n(total_fakes, "total_fakes", 0)
        if target > 1.0:
            raise ParameterError(
                f"{cls.name}: survey Thm 4 holds for epsilon_central <= 1, got {target:g}"
            )

        def eps_c(eps_l: float) -> float:
            g = _hash_range(eps_l)
            beta = (n - 1) / (math.exp(eps_l) + g - 1) + fakes / g
            return max(math.sqrt(14.0 * math.log(2.0 / delta) / beta), 27.0 / beta)

        lo = 1e-9
        if eps_c(lo) > target:
            # As ε_l → 0, d' = 2 and β → (n − 1)/2 + n_r/2: the blanket Thm 4 needs at
            # least β = max{14 ln(2/δ)/ε_c², 27/ε_c} of it.
            need = max(14.0 * math.log(2.0 / delta) / target**2, 27.0 / target)
            users = max(n, math.ceil(2.0 * need - fakes + 1.0))
            raise ParameterError(
                f"{cls.name}: n={n} (with n_r={fakes} fakes) is too small for epsilon_central="
                f"{target:g} at delta={delta:g}: survey Thm 4 gives at least {eps_c(lo):.4g} "
                f"even as epsilon_local→0; it needs about n >= {users}"
                + (" (or more fakes)" if cls.name == "murs" else "")
            )
        hi = 1.0
        while eps_c(hi) <= target and hi < 200.0:
            lo, hi = hi, 2.0 * hi
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if eps_c(mid) <= target:
                lo = mid
            else:
                hi = mid
        return cls(domain=domain, epsilon_local=lo, n=n, delta=delta, total_fakes=fakes)

    def randomizer_family(self) -> RandomizerFamily:
        """k-RR over the hash range d' = ``params.g``: each report is g-ary randomized
        response on the hashed value.

        Returns:
            The family ``"krr"`` over d' values, and why.
        """
        g = self._p.g
        return RandomizerFamily(
            "krr",
            g,
            f"local hashing accounted as {g}-ary RR on hashed values with uniform fakes "
            "(MURS's own model; the hash collision case only helps the user)",
        )

    # --- parameters -------------------------------------------------------------------
    @property
    def params(self) -> SLHParams:
        return self._p

    @property
    def domain(self) -> int:
        return self._p.domain

    @property
    def message_size(self) -> int:
        return _SEED_BYTES + self._y_size

    @property
    def messages_per_user(self) -> float:
        return 1.0

    @property
    def privacy(self) -> PrivacyGuarantee:
        p = self._p
        return PrivacyGuarantee(
            epsilon_central=p.epsilon_central,
            epsilon_local=p.epsilon_local,
            delta=p.delta,
            bound=self.bound_name,
        )

    def epsilon_central_for(self, *, honest_users: int, honest_fakes: int) -> float:
        """ε_c when only ``honest_users`` reports and ``honest_fakes`` fakes stay hidden.

        The collusion scenarios of MURS: with m − 1 shufflers colluding, only the honest
        shuffler's fakes (n_r/m) remain in the blanket; colluding users drop out of n.

        Args:
            honest_users: the users whose reports stay hidden, at least 1.
            honest_fakes: the fakes that stay hidden.

        Returns:
            ε_c.
        """
        p = self._p
        return murs_epsilon_central(
            epsilon_local=p.epsilon_local,
            g=p.g,
            n=check_n(honest_users, "honest_users", 1),
            delta=p.delta,
            n_fakes=check_n(honest_fakes, "honest_fakes", 0),
        )

    def privacy_for_run(self, n_users: int, fake_reports_total: int) -> PrivacyGuarantee | None:
        """The blanket bound at the run's users and fakes (class docstring).

        Args:
            n_users: honest users whose reports were shuffled (0 allowed).
            fake_reports_total: uniform fake values added, over every shuffler.

        Returns:
            The guarantee for that run, or ``None`` (unknown).
        """
        n_users = check_n(n_users, "n_users", 0)
        fakes = check_n(fake_reports_total, "fake_reports_total", 0)
        p = self._p
        if n_users >= 1:
            try:
                eps_c = murs_epsilon_central(
                    epsilon_local=p.epsilon_local, g=p.g, n=n_users, delta=p.delta, n_fakes=fakes
                )
            except BoundNotApplicable:
                pass
            else:
                if eps_c < p.epsilon_local:
                    return PrivacyGuarantee(eps_c, p.epsilon_local, p.delta, self.bound_name)
        return PrivacyGuarantee(
            p.epsilon_local,
            p.epsilon_local,
            0.0,
            f"local guarantee eps_l (the blanket bound does not hold at n={n_users}, n_r={fakes})",
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"{type(self).__name__}(domain={p.domain}, epsilon_local={p.epsilon_local:.6g}, "
            f"g={p.g}, n={p.n}, delta={p.delta:g}, total_fakes={p.total_fakes})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.uint64, copy=False)
        g = self._p.g
        seeds = np.asarray(
            rng.integers(0, 1 << 64, size=x.shape[0], dtype=np.uint64, endpoint=False)
        )
        h = lh_hash(seeds, x, g).astype(np.uint64)
        keep = rng.random(x.shape[0]) < self._p.p
        # Any other value of [d'] uniformly: shift by a uniform non-zero offset mod d'.
        other = (h + rng.integers(1, g, size=x.shape[0], dtype=np.uint64)) % np.uint64(g)
        return np.stack([seeds, np.where(keep, h, other)], axis=1)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        m = np.asarray(messages, dtype=np.uint64).reshape(-1, 2)
        return np.concatenate(
            [encode_uints(m[:, 0], _SEED_BYTES), encode_uints(m[:, 1], self._y_size)], axis=1
        )

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        r = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        seeds = np.ascontiguousarray(r[:, :_SEED_BYTES]).view(">u8").reshape(-1)
        y = decode_uints(np.ascontiguousarray(r[:, _SEED_BYTES:]), self._y_size)
        valid = y < self._p.g
        msgs = np.stack([seeds.astype(np.uint64), np.where(valid, y, 0).astype(np.uint64)], 1)
        return msgs, valid

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        k = check_n(count, "count", 0)
        seeds = rng.integers(0, 1 << 64, size=k, dtype=np.uint64, endpoint=False)
        y = rng.integers(0, self._p.g, size=k, dtype=np.uint64)
        return np.stack([seeds, y], axis=1)

    # --- analyzer ------------------------------------------------------------------------
    def support_counts(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """C_v = #{i : H_i(v) = y_i} for every v ∈ [d], over blocks of users (O(block·d)).

        Args:
            messages: the decoded ``(seed, hashed value)`` messages.

        Returns:
            The d support counts.
        """
        m = np.asarray(messages, dtype=np.uint64).reshape(-1, 2)
        return lh_support_counts(m[:, 0], m[:, 1], d=self._p.domain, g=self._p.g)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        p, g = self._p.p, self._p.g
        counts = self.support_counts(messages)
        est = (counts - (n + n_fakes) / g) / (p - 1.0 / g)
        return Estimate(
            values=est.astype(np.float64),
            expected_std=np.sqrt(self.variance(np.clip(est, 0, n), n=n, n_fakes=n_fakes)),
            messages_used=int(np.asarray(messages).reshape(-1, 2).shape[0]),
            extra={"g": g, "p": p},
        )

    def variance(
        self, counts: npt.ArrayLike, *, n: int, n_fakes: int = 0
    ) -> npt.NDArray[np.float64]:
        """Exact variance of :meth:`estimate` per value, given the true counts.

        Args:
            counts: the true counts of the d values.
            n: the number of users.
            n_fakes: the fake reports among the messages.

        Returns:
            The d variances.
        """
        p, g = self._p.p, self._p.g
        c = np.asarray(counts, dtype=np.float64)
        var = c * p * (1 - p) + (n - c + n_fakes) * (1 / g) * (1 - 1 / g)
        return np.asarray(var / (p - 1.0 / g) ** 2, dtype=np.float64)

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


class MURS(SLH):
    """``MURS``: SLH reports through m shufflers that each add n_r/m uniform fakes.

    The fakes are uniform over the message space (uniform seed, uniform y ∈ [d']), i.e.
    exactly the blanket distribution, so they enter β with weight 1/d' each. The total n_r
    (over all shufflers) is part of the configuration because the privacy claim depends on
    it; the estimator removes the fakes actually released (``n_fakes``).
    """

    name: ClassVar[str] = "murs"
    bound_name: ClassVar[str] = (
        "MURS blanket: survey Thm 4 (Balle et al. Thm 3.1) with n_r uniform fakes, "
        "Wang et al. VLDB'20 (arXiv 1908.11515)"
    )

    def __init__(
        self,
        *,
        domain: int,
        epsilon_local: float,
        n: int,
        delta: float,
        total_fakes: int = 0,
    ) -> None:
        if check_n(total_fakes, "total_fakes", 0) < 1:
            raise ParameterError(
                "murs: total_fakes (fake reports over every shuffler) must be >= 1, got "
                f"{total_fakes}; without fakes use slh (the survey's experiment uses 1 % of n)"
            )
        super().__init__(
            domain=domain, epsilon_local=epsilon_local, n=n, delta=delta, total_fakes=total_fakes
        )


@register_protocol("slh")
def _build_slh(spec: ProtocolSpec) -> ShuffleProtocol:
    return SLH.from_central(
        domain=spec.domain,
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        total_fakes=spec.total_fake_reports,
    )


@register_protocol("murs")
def _build_murs(spec: ProtocolSpec) -> ShuffleProtocol:
    return MURS.from_central(
        domain=spec.domain,
        epsilon_central=spec.epsilon,
        n=spec.n,
        delta=spec.delta,
        total_fakes=spec.total_fake_reports,
    )
