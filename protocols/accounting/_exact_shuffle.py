"""Exact privacy of the shuffled output for small n: the lower bound no proof can beat.

For a single-message discrete randomizer given as a transition matrix R (R[x, y] = Pr[y | x])
the shuffled output is the histogram of the n messages (plus fakes). For a dataset, the
histogram's distribution is the convolution of the users' rows; this module computes it
exactly on the grid of histograms, for two neighbouring datasets, and returns the exact
ε(δ) of that pair (both hockey-stick directions, :func:`protocols.epsilon_for_pair`).

Any neighbouring pair gives a *lower* bound on the ε of the mechanism; :func:`worst_pair_epsilon`
searches the pairs where every other user holds one value (all values, all victim pairs) and,
optionally, every composition of the others' data, and returns the largest. An implemented
upper bound below this value is wrong: every accountant is tested against it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._base import check_delta, check_epsilon, check_n
from .._errors import ParameterError
from ._laws import epsilon_for_pair

__all__ = [
    "ExactPair",
    "histogram_distribution",
    "krr_matrix",
    "pair_epsilon",
    "worst_pair_epsilon",
]

FloatArray = npt.NDArray[np.float64]

#: Largest histogram grid (cells) this module builds: (n+1)^(outputs) must stay below it.
MAX_CELLS = 4_000_000


def krr_matrix(epsilon_local: float, k: int) -> FloatArray:
    """Transition matrix of k-ary randomized response: p on the diagonal, q elsewhere.

    Args:
        epsilon_local: ε of the randomizer.
        k: domain size, at least 2.

    Returns:
        The ``(k, k)`` matrix R, R[x, y] = P[output y | input x].

    Raises:
        ParameterError: ε out of range or k < 2.
    """
    eps = check_epsilon(epsilon_local, "epsilon_local")
    k = check_n(k, "k", 2)
    q = 1.0 / (math.exp(eps) + k - 1.0)
    p = math.exp(eps) * q
    return np.full((k, k), q) + np.eye(k) * (p - q)


def _check_matrix(matrix: npt.ArrayLike) -> FloatArray:
    r = np.asarray(matrix, dtype=np.float64)
    if r.ndim != 2 or (r < 0).any() or not np.allclose(r.sum(axis=1), 1.0, atol=1e-12):
        raise ParameterError(
            f"transition matrix must be 2-D with non-negative rows summing to 1, got {r.shape}"
        )
    return r


def histogram_distribution(rows: Sequence[npt.ArrayLike], outputs: int) -> FloatArray:
    """Exact distribution of the histogram of independent messages with the given laws.

    Args:
        rows: one output distribution (length ``outputs``) per message.
        outputs: number of possible messages.

    Returns:
        An array of shape ``(len(rows)+1,) * outputs`` whose entry at h is Pr[histogram = h]
        (entries with Σh ≠ len(rows) are 0).

    Raises:
        ParameterError: the array would exceed ``MAX_CELLS`` cells.
    """
    n = len(rows)
    if (n + 1) ** outputs > MAX_CELLS:
        raise ParameterError(
            f"exact histogram for n={n} messages over {outputs} outputs needs "
            f"{(n + 1) ** outputs} cells > {MAX_CELLS}; use smaller n"
        )
    dist = np.zeros((n + 1,) * outputs)
    dist[(0,) * outputs] = 1.0
    for row in rows:
        r = np.asarray(row, dtype=np.float64)
        new = np.zeros_like(dist)
        for y in range(outputs):
            if r[y] == 0.0:
                continue
            # Adding one message y shifts the histogram by e_y (the last slot is never
            # reached: at most n messages).
            src = [slice(None)] * outputs
            dst = [slice(None)] * outputs
            src[y] = slice(0, n)
            dst[y] = slice(1, n + 1)
            new[tuple(dst)] += r[y] * dist[tuple(src)]
        dist = new
    return dist


def _log(a: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.log(a)


@dataclass(frozen=True, slots=True)
class ExactPair:
    """One neighbouring pair and its exact ε(δ).

    Attributes:
        epsilon: exact ε of the shuffled histogram for this pair at ``delta``.
        delta: δ.
        victim: (x, x') the victim's two values.
        others: the other users' values.
        n_fakes: uniform fake messages added.
    """

    epsilon: float
    delta: float
    victim: tuple[int, int]
    others: tuple[int, ...]
    n_fakes: int


def pair_epsilon(
    matrix: npt.ArrayLike,
    *,
    victim: tuple[int, int],
    others: Iterable[int],
    delta: float,
    n_fakes: int = 0,
    fake_law: npt.ArrayLike | None = None,
) -> ExactPair:
    """Exact ε(δ) of the shuffled histogram for one neighbouring pair.

    Args:
        matrix: transition matrix R of the single-message randomizer.
        victim: the victim's value in D and in D'.
        others: values of the other (honest, unknown to the adversary) users.
        delta: δ.
        n_fakes: fake messages shuffled in (unknown to the adversary).
        fake_law: distribution of one fake (uniform over the outputs by default).

    Returns:
        The pair and its exact ε(δ).

    Raises:
        ParameterError: a matrix that is not row-stochastic, a bad δ, or a histogram too
            large to compute exactly.
    """
    r = _check_matrix(matrix)
    delta = check_delta(delta)
    outputs = r.shape[1]
    others_t = tuple(int(v) for v in others)
    law = (
        np.full(outputs, 1.0 / outputs)
        if fake_law is None
        else np.asarray(fake_law, dtype=np.float64)
    )
    base_rows = [r[v] for v in others_t] + [law] * check_n(n_fakes, "n_fakes", 0)
    d0 = histogram_distribution([*base_rows, r[victim[0]]], outputs)
    d1 = histogram_distribution([*base_rows, r[victim[1]]], outputs)
    eps = epsilon_for_pair(_log(d0), _log(d1), delta)
    return ExactPair(eps, delta, (int(victim[0]), int(victim[1])), others_t, int(n_fakes))


def worst_pair_epsilon(
    matrix: npt.ArrayLike,
    *,
    n: int,
    delta: float,
    n_fakes: int = 0,
    all_compositions: bool = False,
) -> ExactPair:
    """The largest exact ε(δ) over searched neighbouring pairs of n users.

    Searched: every victim pair (x ≠ x') and, for the other n − 1 users, every constant
    dataset (all hold v), or with ``all_compositions`` every multiset of values.
    The result is a lower bound on the mechanism's true ε(δ).

    Args:
        matrix: transition matrix R of the single-message randomizer.
        n: number of users, at least 1.
        delta: δ.
        n_fakes: fake messages shuffled in (unknown to the adversary).
        all_compositions: search every multiset of the others' values, not only constant ones.

    Returns:
        The searched pair of largest ε(δ), with that ε.

    Raises:
        ParameterError: a bad matrix, n or δ, or a histogram too large to compute exactly.
    """
    r = _check_matrix(matrix)
    n = check_n(n, "n", 1)
    inputs = r.shape[0]
    if all_compositions:
        datasets: Iterable[tuple[int, ...]] = itertools.combinations_with_replacement(
            range(inputs), n - 1
        )
    else:
        datasets = [(v,) * (n - 1) for v in range(inputs)]
    best: ExactPair | None = None
    for others in datasets:
        for x, x2 in itertools.permutations(range(inputs), 2):
            res = pair_epsilon(r, victim=(x, x2), others=others, delta=delta, n_fakes=n_fakes)
            if best is None or res.epsilon > best.epsilon:
                best = res
    assert best is not None  # inputs >= 1 and permutations of >= 2 values exist
    return best
