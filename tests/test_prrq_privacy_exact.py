"""PRRQ's blanket size ρ (no factor d after Δ²) meets the stated ε, exactly, at d = 2.

The survey's extracted formula for ρ shows a factor d after Δ² that this project drops
(protocols/_prrq.py explains the derivation). Extra blanket tuples only add privacy, so the
question is whether the smaller ρ is enough. At d = 2 it is checked exactly:

* D = 2, one level: both values send the root's tuple (one law), and slot 1 differs — x = 0
  sends a tuple uniform in C_2^τ (node 1, Hadamard row 2), x = 1 a uniform padding tuple.
* The adversary is also told every tuple but the victim's slot-1 tuple and the nρ blanket
  tuples (more knowledge: its ε bounds the real view's). What is left is one tuple among
  nρ uniform ones; its likelihood ratio depends only on K = #tuples in C_2^τ, which has
  P_0(K) = B(K − 1) and P_1(K) = 2^{−τ} B(K − 1) + (1 − 2^{−τ}) B(K), B = Bin(nρ, 2^{−τ})
  (a uniform tuple lies in C_2^τ with probability 2^{−τ}, every coordinate in a half).

Its exact ε(δ) (both hockey-stick directions) must be at most the stated ε.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocols import PRRQ, epsilon_for_pair
from protocols._prrq import user_nodes
from protocols.accounting import binomial_window


def _revealed_view_epsilon(n: int, rho: int, tau: int, delta: float) -> float:
    inside = 2.0**-tau
    _, law = binomial_window(n * rho, inside)  # the mass cut off is below double precision
    law_shifted = np.concatenate([[0.0], law])
    law = np.concatenate([law, [0.0]])
    p0 = law_shifted
    p1 = inside * law_shifted + (1.0 - inside) * law
    with np.errstate(divide="ignore"):
        return epsilon_for_pair(np.log(p0), np.log(p1), delta)


def test_values_of_a_two_value_domain_differ_in_one_slot() -> None:
    nodes = user_nodes(np.array([0, 1]), 1)
    assert nodes.tolist() == [[0, 1], [0, -1]]  # root shared; node 1 vs padding


@pytest.mark.parametrize("n", [2, 8, 1000])
@pytest.mark.parametrize("eps", [1.0, 0.5, 0.2])
@pytest.mark.parametrize("delta", [1e-2, 1e-4, 1e-6])
def test_rho_without_the_factor_d_meets_epsilon(n: int, eps: float, delta: float) -> None:
    p = PRRQ(domain=2, epsilon=eps, n=n, delta=delta).params
    sens = 2
    assert p.rho == math.ceil(36 * sens**2 * math.log(math.e * sens * 2 / (eps * delta)) / eps**2)
    exact = _revealed_view_epsilon(n, p.rho, p.tau, delta)
    # Measured: at most 0.08·ε over this grid (the survey's constants leave a wide margin);
    # the threshold ε/4 is the stated ε with room for a tighter proof, not a fit.
    assert exact <= eps / 4, (exact, eps)
