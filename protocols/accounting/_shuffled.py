"""One entry point for the audit: the tightest ε(δ) the numerical accountants prove for one
user among honest users and fakes.

    C ~ Bin(n−1, e^{−ε0}); valid for every ε0-LDP randomizer.

Fakes: an honest shuffler's n_r fakes are uniform over the message space. For k-RR they are
exactly what a blanket user sends, so they enlarge the blanket (exact: T grows by n_r); in the
clone reduction a uniform report is a clone with probability 2/(k (p+q)) (the largest α with
"""

from __future__ import annotations

from .._base import check_epsilon
from ._binary_rr import binary_rr_epsilon
from ._blanket import krr_blanket_epsilon
from ._clones import fmt21_numerical_epsilon, stronger_clone_epsilon

__all__ = [
    "TIGHT_BOUND_NAMES",
    "shuffled_epsilon",
]

# --- one entry point for the audit --------------------------------------------------------


def shuffled_epsilon(
    epsilon_local: float,
    n_others: int,
    delta: float,
    *,
    family: str,
    k: int = 2,
    n_fakes: int = 0,
) -> tuple[float, str]:
    """Tightest ε(δ) we can prove for one user among ``n_others`` honest users + fakes.

    Args:
        epsilon_local: ε0 of each user's randomizer.
        n_others: honest users (other than the victim) whose data the adversary does not know.
        delta: target δ.
        family: ``"krr"`` (fakes are counted exactly) or anything else (generic bound; fakes
            are not counted, which is conservative).
        k: domain of the k-RR randomizer.
        n_fakes: uniform fake reports unknown to the adversary.

    Returns:
        (ε, name of the bound that gives it). ``"local_dp"`` when shuffling proves nothing better
        than ε0.
    """
    eps0 = check_epsilon(epsilon_local, "epsilon_local")
    candidates: list[tuple[float, str]] = [(eps0, "local_dp")]
    if family == "krr":
        if k == 2:
            candidates.append(
                (binary_rr_epsilon(eps0, n_others, delta, n_fakes=n_fakes), "binary_rr_exact")
            )
        else:
            candidates.append(
                (
                    krr_blanket_epsilon(eps0, n_others, delta, k=k, n_fakes=n_fakes),
                    "krr_blanket_numerical",
                )
            )
            candidates.append(
                (
                    stronger_clone_epsilon(eps0, n_others, delta, k=k, n_fakes=n_fakes),
                    "fmt23_stronger_clone",
                )
            )
    elif n_others > 0:
        candidates.append((fmt21_numerical_epsilon(eps0, n_others, delta), "fmt21_numerical"))
    best = min(candidates, key=lambda c: c[0])
    return best


TIGHT_BOUND_NAMES = (
    "binary_rr_exact",
    "krr_blanket_numerical",
    "fmt23_stronger_clone",
    "fmt21_numerical",
)
