"""``DisEle``: counting distinct elements in the shuffle model, robustly private.

Balcer, Cheu, Joseph, Mao, "Connecting Robust Shuffle Privacy and Pan-Privacy" (SODA'21,
arXiv 2004.09481), as summarized in survey §4.4.1. Each user holds x_i ∈ [d]; the target is
D = |{j : ∃ i, x_i = j}|. For every j the OR of the indicators [x_i = j] is estimated through
their parity, computed by secure aggregation over Z_2 (Split-Mix, Ishai et al. FOCS'06).

Randomizer (per user, per coordinate j of the one-hot vector):
    y_ij ~ Ber(1/2)          if x_i = j,
    y_ij ~ Ber(p),  p = (1 − (1 − e^{−ε})^{1/n}) / 2   otherwise.
The pair (j, y_ij) is split into m additive shares mod 2 carrying the label j (the esa
encoder does the split: :attr:`share_spec`), so the analyzer learns only z_j = Σ_i y_ij mod 2.
Since (1 − 2p)^n = 1 − e^{−ε}, the parity of n independent Ber(p) bits is Ber(e^{−ε}/2), and
XOR with any independent Ber(1/2) bit is Ber(1/2):
    z_j ~ Ber(1/2)           if some user holds j,
    z_j ~ Ber(e^{−ε}/2)      otherwise.
The two laws have likelihood ratios e^{ε} and 2 − e^{−ε} ≤ e^{ε}: each z_j is ε-DP; a user
changing value moves two coordinates, so the released vector z is 2ε-DP. The registry entry
takes the target ε_c and runs the randomizer at ε = ε_c / 2.

Robustness (paper Thm. for the distinct-elements protocol; survey: (2ε(γ), ·, γ)-RSDP): when
only γn users are honest, the honest parity of an unoccupied bin is Ber((1 − (1 − e^{−ε})^γ)/2),
whatever the others send, so each bin is ε(γ)-DP with
    ε(γ) = −ln(1 − (1 − e^{−ε})^γ),
which is ε at γ = 1 and ≈ ε + ln(1/γ) for large ε (the survey's "ε + ln(1/γ)" branch).
This is the exact value of the two-point likelihood ratio; the paper states upper bounds on it.
The additive δ of the guarantee comes from the Split-Mix shares: each label's shares are
η-close in total variation to a function of its ideal parity (:func:`share_distance_bound`),
and a neighbouring pair differs in two labels, so the view is 2η-close to an ε_c-DP one on
either side and (ε_c, 2(1 + e^{ε_c})η)-DP (:func:`shares_delta`). m is the fewest shares that
make this ≤ δ. (Until 2026-11-30 δ was charged η alone, a factor 2(1 + e^{ε_c}) short in
the proof; the exact δ of the real shares stayed within the stated δ wherever computed,
tests/test_sum_privacy_exact.py, as the bound on η is loose.)

Estimator (unbiased): E[z_j] = 1/2 on occupied bins and r = e^{−ε}/2 elsewhere, so
    u_j = (z_j − r) / (1/2 − r)
has E[u_j] = [j occupied]. Shufflers' fake shares carry a uniform label and a uniform bit, so
a bin that received any fake is a fair coin; the analyzer sees exactly which bins did (each
label carries n·m honest shares) and uses the Horvitz–Thompson estimator
    D̂ = Σ_j c_j u_j / s,   c_j = [bin j got no fake],  s = (1 − 1/d)^{n_f},
which is unbiased over the fakes' labels. Its variance is
    Var[D̂] = Σ_j (s E[u_j²] − s² o_j²) / s²,  E[u_j²] = Var[z_j]/(1/2 − r)² + o_j²,
with Var[z_j] = 1/4 if occupied (o_j = 1), r(1 − r) otherwise (o_j = 0); additive error
O(√d / ε), matching the paper's Θ(√k) for robust approximate shuffle privacy. With n_f fakes
only d·s bins are expected clean and Var[D̂] ≥ D(2/s − 1): once d·s < 1 the std of a full
domain exceeds d itself, so a configuration with that many fakes is refused.

Tallies. The estimator reads the shares only through their (label, share) counts, so DisEle
runs as a tally (``esa simulate --representation tally``, chosen automatically when the
n·d·m shares would not fit): :meth:`DisEle.tally_users` and :meth:`DisEle.tally_fakes` draw
those counts exactly, per label, without making the shares (n = 10^6, d = 16 takes 8·10^7
shares, over the report limit of a ``--crypto ideal`` run).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    HonestUsersBound,
    InputKind,
    MessageTally,
    PrivacyGuarantee,
    ShareSpec,
    ShuffleProtocol,
    check_delta,
    check_epsilon,
    check_n,
)
from ._distributions import binom_pmf
from ._errors import ParameterError
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, integer_option, register_protocol

__all__ = [
    "DisEle",
    "DisEleParams",
    "disele_default_shares",
    "share_distance_bound",
    "shares_delta",
]

#: ln of the largest double: 1/s = e^{−ln s} is computed only below it.
_LOG_DOUBLE_MAX = math.log(sys.float_info.max)
#: Largest domain the one-hot encoding is allowed to expand to (n·d·m messages are sent).
MAX_DOMAIN = 1 << 20
#: Most users: :func:`share_distance_bound` evaluates all n terms (80 MB arrays at 10^7).
MAX_USERS = 10**7
#: Most Split-Mix shares per value: :func:`disele_default_shares` never asks for more than
#: 1078 (n = 2 and the smallest positive double as δ); more add messages, not privacy.
MAX_SHARES = 1 << 11


def share_distance_bound(n: int, m: int) -> float:
    """Upper bound on the total-variation distance between the shuffled Split-Mix shares
    (over Z_2, one label) of two datasets of n users whose bits have the same parity.

    A user holding bit x sends m bits, uniform among those of parity x; the view is the
    number C of ones. Its generating function is 2^{−mn} Π_i ((1+z)^m + s_i (1−z)^m), s_i =
    (−1)^{x_i}, = Σ_j e_j(s) μ_j with μ_j = (1+z)^{m(n−j)}(1−z)^{mj}/2^{mn} and e_j the
    elementary symmetric polynomials of the s_i (Krawtchouk values, |e_j| ≤ C(n, j)). e_0 = 1
    and e_n = Π s_i are the same for two datasets of one parity, so
        TV ≤ ½ Σ_{j=1}^{n−1} |e_j(s) − e_j(s')| ‖μ_j‖₁ ≤ Σ_{j=1}^{n−1} C(n, j) ‖μ_j‖₁,
    and ‖μ_j‖₁ ≤ √(mn + 1) ‖μ_j‖₂ (Cauchy–Schwarz over its mn + 1 coefficients), where by
    Parseval ‖μ_j‖₂² = (1/2π)∫|cos(θ/2)|^{2A}|sin(θ/2)|^{2B} dθ = Γ(A+½)Γ(B+½)/(πΓ(A+B+1)),
    A = m(n−j), B = mj: every term in closed form, in log space (no cancellation).
    """
    from scipy.special import gammaln  # imported here: scipy costs start-up time

    if n > MAX_USERS:
        raise ParameterError(
            f"disele: n={n} exceeds {MAX_USERS:.0e}: the shares' distance bound sums n terms "
            "(at 10^10 users, 75 GiB arrays)"
        )
    if n < 2:
        return 0.0
    j = np.arange(1, n, dtype=np.float64)
    a, b = m * (n - j), m * j
    log_terms = (
        gammaln(n + 1.0)
        - gammaln(j + 1.0)
        - gammaln(n - j + 1.0)
        + 0.5 * math.log(m * n + 1.0)
        + 0.5 * (gammaln(a + 0.5) + gammaln(b + 0.5) - math.log(math.pi) - gammaln(a + b + 1.0))
    )
    top = float(log_terms.max())
    return math.exp(top) * float(np.exp(log_terms - top).sum())


def shares_delta(n: int, m: int, epsilon_central: float) -> float:
    """The δ that m shares per value cost DisEle's (ε_c, δ) guarantee: 2(1 + e^{ε_c})·η with
    η = :func:`share_distance_bound` (n, m).

    Each label's view is η-close to a function of its parity; a neighbouring pair changes two
    labels (the others have one law under both datasets), so each side's view is 2η-close to
    its ideal counterpart, and H_{e^ε}(P‖Q) ≤ H_{e^ε}(P*‖Q*) + TV(P, P*) + e^ε TV(Q, Q*) with
    the ideal pair pure ε_c-DP. Computed in log space (e^{ε_c} overflows past ε_c ≈ 709).
    """
    eta = share_distance_bound(n, m)
    if eta <= 0.0:
        return 0.0
    return math.exp(min(math.log(2.0 * eta) + float(np.logaddexp(0.0, epsilon_central)), 709.0))


def disele_default_shares(n: int, delta: float, epsilon_central: float) -> int:
    """The fewest shares per value (at least 2) whose Split-Mix over Z_2 costs at most δ,
    by :func:`shares_delta`.

    Balle, Bell, Gascón, Nissim (CCS'20, arXiv 2002.00817) and Ghazi, Manurangsi, Pagh,
    Velingker (Eurocrypt'20, arXiv 1906.08320) show m = O(1 + (σ + log q)/log n) shares
    suffice for σ-closeness over Z_q.
    Until 2026-11-30 this took m = 1 + ⌈(log2(1/δ) + 1)/log2 n⌉ with a constant of ours, and
    it was not δ-close: at n = 100, δ = 10⁻⁶ its m = 5 is 2.1·10⁻⁶ apart (exact), and at
    n = 32, δ = 0.1 all-zeros and all-ones users were 0.86 apart with m = 2. The bound is
    computed instead (it falls with m, and it is what the privacy statement's δ charges).

    Raises:
        ParameterError: no m up to :data:`MAX_SHARES` reaches δ.
    """
    n = check_n(n)
    delta = check_delta(delta)
    for m in range(2, MAX_SHARES + 1):
        if shares_delta(n, m, epsilon_central) <= delta:
            return m
    raise ParameterError(
        f"disele: no share count up to {MAX_SHARES} keeps delta={delta:g} at n={n}, "
        f"epsilon={epsilon_central:g}"
    )


@dataclass(frozen=True, slots=True)
class DisEleParams:
    """Parameters of ``DisEle`` (arXiv 2004.09481 §3; survey §4.4.1).

    Math: p = (1 − (1 − e^{−ε})^{1/n})/2 is the flip probability of an unoccupied coordinate;
    r = e^{−ε}/2 the law of an unoccupied bin's parity. Privacy: 2ε-DP overall (two bins per
    user), robustly 2ε(γ) with ε(γ) = −ln(1 − (1 − e^{−ε})^γ), plus the Split-Mix δ.

    Attributes:
        domain: d, the number of possible values.
        epsilon: ε per bin (the released vector is 2ε-DP).
        n: number of users the randomizer is calibrated for.
        delta: δ charged for the secure aggregation.
        shares: m Split-Mix shares per (label, bit).
    """

    domain: int
    epsilon: float
    n: int
    delta: float
    shares: int

    @property
    def flip_probability(self) -> float:
        """p = (1 − (1 − e^{−ε})^{1/n}) / 2, computed without cancellation."""
        # (1 − e^{−ε})^{1/n} = exp(log1p(−e^{−ε}) / n); 1 − exp(t) = −expm1(t).
        return -math.expm1(math.log1p(-math.exp(-self.epsilon)) / self.n) / 2.0

    @property
    def empty_parity(self) -> float:
        """r = P[z_j = 1] for a bin nobody holds: e^{−ε}/2."""
        return math.exp(-self.epsilon) / 2.0


class DisEle(ShuffleProtocol):
    """``DisEle``: number of distinct values among n users' x_i ∈ [d] (see module docstring).

    Messages: ``randomize`` returns an ``(n·d, 2)`` array of (label j, bit y_ij); the esa
    encoder splits each bit into ``shares`` shares mod 2, so ``encode``/``decode``/
    ``estimate`` see ``(label, share)`` rows. ``messages_per_user`` = d·m.

    ``shares`` defaults to :func:`disele_default_shares`, the fewest m whose
    :func:`shares_delta` is ≤ δ. A forced m costing more is refused (the
    stated δ would not hold: at n = 8, ε_c = 0.1, δ = 10⁻⁹, m = 3 the exact ε at δ is
    1.17); a larger m is allowed and keeps the same (ε, δ).
    """

    name: ClassVar[str] = "disele"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL

    def __init__(
        self,
        *,
        domain: int,
        epsilon: float,
        n: int,
        delta: float,
        shares: int | None = None,
        fake_reports: int = 0,
    ) -> None:
        d = check_n(domain, "domain", 2)
        if d > MAX_DOMAIN:
            raise ParameterError(
                f"disele: domain={d} exceeds {MAX_DOMAIN}: every user sends d·m messages"
            )
        eps = check_epsilon(epsilon)
        n = check_n(n)
        delta = check_delta(delta)
        eps_c = 2.0 * eps  # the released vector's ε (module docstring)
        m = (
            disele_default_shares(n, delta, eps_c)
            if shares is None
            else check_n(shares, "shares", 2)
        )
        if m > MAX_SHARES:
            raise ParameterError(
                f"disele: shares={m} exceeds {MAX_SHARES}: every user sends d·m messages"
            )
        # The δ stated below is what the shares cost (shares_delta): a forced m costing more
        # would keep the statement and lose the guarantee.
        cost = shares_delta(n, m, eps_c)
        if cost > delta:
            raise ParameterError(
                f"disele: shares={m} bounds the shares' distance from an ideal sum at n={n} "
                f"only by {share_distance_bound(n, m):.2g}, which costs delta "
                f"{cost:.2g} > {delta:g} at epsilon={eps_c:g}; use shares >= "
                f"{disele_default_shares(n, delta, eps_c)} or omit the option"
            )
        # The estimator reads only the bins no fake landed in (module docstring): with fewer
        # than one expected, d·(1 − 1/d)^{n_f} < 1, its std exceeds the whole range [0, d].
        # A Split-Mix protocol's fake_reports counts fake VALUES (each is sent as m shares).
        fake_values = check_n(fake_reports, "fake_reports", 0)
        clean = d * math.exp(fake_values * math.log1p(-1.0 / d))
        if clean < 1.0:
            raise ParameterError(
                f"disele: {fake_values} fake values (each sent as {m} shares) leave "
                f"d*(1 - 1/d)^{fake_values} = {clean:.3g} < 1 of the d={d} bins expected free "
                "of fakes, the only bins the estimator reads; use fewer fakes or a larger d"
            )
        self._p = DisEleParams(domain=d, epsilon=eps, n=n, delta=delta, shares=m)
        self.share_spec = ShareSpec(modulus=2, shares=m)
        self._label_size = uint_codec_size(d)

    @property
    def params(self) -> DisEleParams:
        return self._p

    @property
    def domain(self) -> int:
        return self._p.domain

    @property
    def message_size(self) -> int:
        return self._label_size + 1

    @property
    def messages_per_user(self) -> float:
        return float(self._p.domain * self._p.shares)

    @property
    def privacy(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(
            epsilon_central=2.0 * self._p.epsilon,
            # A single user's shares are uniform bits: alone they reveal nothing, but if all
            # shufflers collude the analyzer links them and sums them: no local guarantee.
            epsilon_local=math.inf,
            delta=self._p.delta,
            bound="disele_parity (arXiv 2004.09481 §3)",
        )

    def robust_epsilon(self, gamma: float) -> float:
        """2ε(γ): ε of the released parities when only a fraction γ of users is honest.

        Args:
            gamma: the fraction γ of honest users, in (0, 1].

        Returns:
            The ε of the released parities.

        Raises:
            ParameterError: γ outside (0, 1].
        """
        g = float(gamma)
        if not 0.0 < g <= 1.0:
            raise ParameterError(f"gamma must lie in (0, 1], got {gamma!r}")
        eps = self._p.epsilon
        honest_clean = math.exp(g * math.log1p(-math.exp(-eps)))  # (1 − e^{−ε})^γ
        return 2.0 * -math.log1p(-honest_clean)

    def honest_users_bound(self, honest_others: int) -> HonestUsersBound | None:
        """Upper: the robust ε at the honest fraction, if the honest shares stay within δ.

        The released parity of a bin is the XOR of the honest users' bits with the
        colluders' (known) bits, so with h = ``honest_others`` + 1 honest users each bin is
        ε(h/n)-DP whatever the colluders send and the victim's pair of bins 2ε(h/n)-DP
        (:meth:`robust_epsilon`). The colluders' shares are known and removed from each
        label's count of ones, so the honest shares are the Split-Mix of h users: they cost
        δ_h = :func:`shares_delta` (h, m, 2ε(h/n)), the module's argument with n → h (zero
        for h = 1, whose shares reveal only the victim's own noisy bit). The bound holds at
        the protocol's δ when δ_h ≤ δ. Otherwise (too few honest users for m shares to
        hide more than their sum) the bound for the victim alone, 2ε(1/n) with δ = 0: an
        adversary who also knew the other honest users' bits and shares sees more, and the
        view here is that view with the extra knowledge averaged out (the same mixture
        under both inputs), so a bound for fewer honest users holds for more.

        Args:
            honest_others: the honest users besides the victim.

        Returns:
            The bound.

        Raises:
            ParameterError: more honest users than n.
        """
        p = self._p
        h = check_n(honest_others, "honest others", 0) + 1
        if h > p.n:
            raise ParameterError(f"disele: {h} honest users exceed n={p.n}")
        eps_h = self.robust_epsilon(h / p.n)
        if shares_delta(h, p.shares, eps_h) <= p.delta:
            return HonestUsersBound(eps_h, f"disele_robust (parities of {h} honest users)")
        return HonestUsersBound(
            self.robust_epsilon(1.0 / p.n), "disele_robust (the victim's own bits, pure)"
        )

    def __repr__(self) -> str:
        p = self._p
        return (
            f"DisEle(domain={p.domain}, epsilon={p.epsilon:.6g}, n={p.n}, "
            f"delta={p.delta:g}, shares={p.shares})"
        )

    # --- client ------------------------------------------------------------------------
    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.int64, copy=False)
        d, n_users = self._p.domain, x.shape[0]
        probs = np.full((n_users, d), self._p.flip_probability)
        probs[np.arange(n_users), x] = 0.5
        bits = (rng.random((n_users, d)) < probs).astype(np.int64)
        labels = np.broadcast_to(np.arange(d, dtype=np.int64), (n_users, d))
        return np.stack([labels.reshape(-1), bits.reshape(-1)], axis=1)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        out = np.empty((msgs.shape[0], self.message_size), dtype=np.uint8)
        out[:, : self._label_size] = encode_uints(msgs[:, 0], self._label_size)
        out[:, self._label_size] = msgs[:, 1]
        return out

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        rows = np.asarray(rows, dtype=np.uint8).reshape(-1, self.message_size)
        labels = decode_uints(rows[:, : self._label_size], self._label_size)
        share = rows[:, self._label_size].astype(np.int64)
        valid = (labels < self._p.domain) & (share < 2)
        return np.stack([labels, share], axis=1), valid

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        labels = rng.integers(0, self._p.domain, size=count)
        return np.stack([labels, rng.integers(0, 2, size=count)], axis=1).astype(np.int64)

    # --- analyzer ------------------------------------------------------------------------
    def parities(self, messages: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Per-label sums of shares mod 2, and per-label message counts.

        Args:
            messages: the decoded ``(label, share)`` messages.

        Returns:
            ``(parities, counts)``, one entry per label.
        """
        counts = self.tally(messages).counts
        return counts[:, 1] % 2, counts.sum(axis=1)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        return self.estimate_tally(self.tally(messages), n=n, n_fakes=n_fakes)

    # --- the tally representation --------------------------------------------------------
    # The estimator reads, per label, the number of shares and their sum mod 2: both are
    # functions of the (label, share) counts, so the tally of the shares is all it needs.
    # Its samplers draw that tally exactly without making the n·d·m shares (module doc:
    # "Tallies"), which is how a run at n = 10^6 fits one machine.
    @property
    def supports_tally(self) -> bool:
        return True

    def tally(self, messages: npt.NDArray[Any]) -> MessageTally:
        """Counts of decoded ``(label, share)`` messages, shape ``(d, 2)``: [j, b] = shares
        of label j equal to b.

        Args:
            messages: the decoded messages.

        Returns:
            Their tally.
        """
        msgs = np.asarray(messages, dtype=np.int64).reshape(-1, 2)
        d = self._p.domain
        cells = np.bincount(msgs[:, 0] * 2 + msgs[:, 1], minlength=2 * d)[: 2 * d]
        return MessageTally(cells.astype(np.int64).reshape(d, 2), int(msgs.shape[0]))

    def estimate_tally(self, tally: MessageTally, *, n: int, n_fakes: int) -> Estimate:
        p = self._p
        z, counts = tally.counts[:, 1] % 2, tally.counts.sum(axis=1)
        # Each honest user sends m shares per label; any excess is a shuffler's fake share,
        # which turns the bin's parity into a fair coin (see module docstring).
        clean = counts <= n * p.shares
        r = p.empty_parity
        u = (z - r) / (0.5 - r)
        total = float(np.sum(u[clean]))
        # 0 when no bin is clean, even where 1/s is beyond a double (more fakes than the
        # spec the constructor checked): the std below then says the estimate is void.
        est = total * self._inverse_clean_probability(n_fakes) if total else 0.0
        # The std is the plug-in one, at the estimate moved into the range D can take: n ≥ 1
        # users hold at least 1 and at most min(n, d) distinct values. (Clipped at 0, an
        # estimate of 0 at a large ε stated a std near 0 for an error of sd 1.)
        plug_in = float(np.clip(est, 1, min(n, p.domain)))
        return Estimate(
            values=np.array([est]),
            expected_std=np.array([math.sqrt(self.variance(plug_in, n_fakes))]),
            messages_used=int(counts.sum()),
            extra={"clean_bins": int(clean.sum()), "shares": p.shares},
        )

    def tally_users(self, values: npt.ArrayLike, *, rng: RNGLike) -> MessageTally:
        """The tally of every user's shares, equal in distribution to splitting
        ``randomize(values)`` into shares and tallying them.

        Per label j: the users holding j send Ber(1/2) bits, the others Ber(p), so the
        number of odd values is k_j = Bin(h_j, 1/2) + Bin(n − h_j, p) with h_j holders; and
        each value's m shares hold a number of ones distributed as Bin(m, 1/2) restricted
        to the value's parity (:meth:`_share_ones`).

        Args:
            values: one value per user.
            rng: the randomizers' generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            The tally, equal in distribution to ``tally(randomize(values))``.
        """
        rng = as_generator(rng)
        x = self.validate_values(values).astype(np.int64, copy=False)
        n_users = int(x.shape[0])
        holders = np.bincount(x, minlength=self._p.domain)
        odd = rng.binomial(holders, 0.5) + rng.binomial(n_users - holders, self._p.flip_probability)
        return self._share_tally(np.full(self._p.domain, n_users), odd, rng=rng)

    def tally_fakes(self, count: int, *, rng: RNGLike) -> MessageTally:
        """The tally of the shares of ``count`` uniform fake values (uniform label, uniform
        bit), equal in distribution to splitting ``sample_fakes(count)`` and tallying.

        Args:
            count: the number of fake values.
            rng: the generator, or a seed (:data:`~protocols.RNGLike`).

        Returns:
            Their tally.
        """
        rng = as_generator(rng)
        count = check_n(count, "count", 0)
        d = self._p.domain
        per_label = rng.multinomial(count, np.full(d, 1.0 / d))
        return self._share_tally(per_label, rng.binomial(per_label, 0.5), rng=rng)

    def _share_tally(
        self, values: npt.NDArray[Any], odd: npt.NDArray[Any], *, rng: np.random.Generator
    ) -> MessageTally:
        """Tally of the shares of ``values[j]`` values per label j, ``odd[j]`` of them 1."""
        m = self._p.shares
        ones = self._share_ones(odd, parity=1, rng=rng) + self._share_ones(
            values - odd, parity=0, rng=rng
        )
        counts = np.stack([values * m - ones, ones], axis=1).astype(np.int64)
        return MessageTally(counts, int(values.sum()) * m)

    def _share_ones(
        self, k: npt.NDArray[Any], *, parity: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """Per label, the number of ones among the m Split-Mix shares of ``k[j]`` values of
        the given parity.

        Split-Mix makes a value's m shares uniform over the 2^{m−1} bit strings of its
        parity, so one value's count of ones v has P[v] = C(m, v)/2^{m−1} for v of that
        parity; ``k[j]`` independent values give the multinomial counts of each v. Labels
        are drawn in blocks of at most 2^22 cells.
        """
        m = self._p.shares
        v = np.arange(m + 1)
        law = np.where(v % 2 == parity, binom_pmf(v, m, 0.5), 0.0)
        law /= law.sum()
        out = np.empty(k.shape[0], dtype=np.int64)
        block = max(1, (1 << 22) // (m + 1))
        for s in range(0, k.shape[0], block):
            out[s : s + block] = rng.multinomial(k[s : s + block], law) @ v
        return out

    def variance(self, distinct: float, n_fakes: int = 0) -> float:
        """Exact Var[D̂] when ``distinct`` of the d bins are occupied (module docstring),
        written as Σ_j (E[u_j²]/s − o_j²) so that a tiny s gives a large (or infinite)
        variance rather than 0/0.

        Args:
            distinct: the number of occupied bins.
            n_fakes: the fake values among the messages.

        Returns:
            The variance of the estimated number of distinct values (``inf`` if unbounded).
        """
        p = self._p
        r = p.empty_parity
        inv_s = self._inverse_clean_probability(n_fakes)
        scale = (0.5 - r) ** 2
        eu2_occ = 0.25 / scale + 1.0
        eu2_empty = r * (1.0 - r) / scale
        occ = float(distinct)
        empty = p.domain - occ
        # Each term only where its bins exist: 0 · inf would be NaN.
        return (occ * (eu2_occ * inv_s - 1.0) if occ else 0.0) + (
            empty * eu2_empty * inv_s if empty else 0.0
        )

    def _inverse_clean_probability(self, n_fakes: int) -> float:
        """1/s = (1 − 1/d)^{−n_f}, from its logarithm: ``inf`` where it exceeds a double."""
        log_inv = -n_fakes * math.log1p(-1.0 / self._p.domain)
        return math.exp(log_inv) if log_inv < _LOG_DOUBLE_MAX else math.inf

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        x = self.validate_values(values)
        return np.array([float(np.unique(x).size)])


@register_protocol("disele")
def _build_disele(spec: ProtocolSpec) -> ShuffleProtocol:
    return DisEle(
        domain=spec.domain,
        # Each user moves two bins, so the per-bin ε is half the target central ε_c.
        epsilon=spec.epsilon / 2.0,
        n=spec.n,
        delta=spec.delta,
        shares=integer_option(spec, "shares", minimum=1),
        fake_reports=spec.total_fake_reports,
    )
