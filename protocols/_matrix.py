"""Your own frequency oracle from its probability matrix, registered like a built-in protocol.

A local randomizer on a finite domain is its matrix P: a user holding x reports y with
probability P[x, y]. From P alone this module derives everything a shuffle protocol needs:

* **privacy**: the randomizer is ε_l-LDP with ε_l = max_{x, x', y} ln(P[x, y] / P[x', y]),
  computed from P with the sampling slack below, so the stated ε_l holds for the reports
  actually drawn; the shuffle of n such reports is then (ε_c, δ)-DP by the tightest
  registered amplification bound for generic ε_l-LDP randomizers (or for k-ary randomized
  response, when P is exactly a k-RR matrix);
* **fakes**: uniform over the outputs, as MURS shufflers add them;
* **estimator**: the counts of the outputs c satisfy E[c] = Pᵀ·h + (n_fakes / m)·1 for the
  histogram h of the users' values, so ĥ = (Pᵀ)⁺ (c − n_fakes/m) (P must have full row
  rank), unbiased; its stated std is the plug-in one (the multinomial covariance at the
  clipped estimate);
* **sampling**: a report is drawn by inverting the cumulative row with one uniform double, so
  each output's realized probability is within η = (m + 1)·2^-53 of P[x, y]; ε_l is computed
  with P[x, y] ± η (the ratio's worst case), which is why entries must be zero (an output a
  row never gives, for every row) or at least 2^-40.

:func:`register_matrix_oracle` registers such a protocol under a name; :func:`load_protocol_file`
reads the same from a TOML file (the ``esa --protocol-file`` option), so ``esa simulate``,
``esa audit`` and the contract tests treat it like the built-in ones. Nothing is executed from
the file: it is data.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from ._base import (
    Estimate,
    InputKind,
    PrivacyGuarantee,
    RandomizerFamily,
    ShuffleProtocol,
    check_delta,
    check_n,
)
from ._errors import ParameterError
from ._messages import decode_uints, encode_uints, uint_codec_size
from ._random import RNGLike, as_generator
from ._registry import ProtocolSpec, register_protocol
from .accounting import tightest_central

__all__ = [
    "MatrixOracle",
    "load_protocol_file",
    "matrix_epsilon",
    "matrix_of",
    "register_matrix_oracle",
]

#: Smallest nonzero probability a matrix may hold: above the sampling slack by 2^13.
MIN_PROBABILITY = 2.0**-40
#: Largest matrix side (inputs or outputs) accepted.
MAX_SIDE = 4096


def _check_matrix(matrix: npt.ArrayLike) -> npt.NDArray[np.float64]:
    try:
        p = np.array(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError("matrix must be a list of rows of numbers") from None
    if p.ndim != 2 or p.shape[0] < 2 or p.shape[1] < 2:
        raise ParameterError(
            f"matrix must be 2-D with at least 2 rows and 2 columns, got {p.shape}"
        )
    if max(p.shape) > MAX_SIDE:
        raise ParameterError(f"matrix sides must be at most {MAX_SIDE}, got {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ParameterError("matrix entries must be finite probabilities >= 0")
    sums = p.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > 1e-9)
    if bad.size:
        raise ParameterError(f"row {int(bad[0])} of the matrix sums to {sums[bad[0]]!r}, not 1")
    used = p.any(axis=0)
    if np.any(p[:, used] == 0):
        x, y = np.argwhere(p[:, used] == 0)[0]
        raise ParameterError(
            f"input {int(x)} never reports output {int(np.flatnonzero(used)[y])}, which another "
            "input reports: no ε bounds that randomizer (zero an output for every input or none)"
        )
    if np.any((p > 0) & (p < MIN_PROBABILITY)):
        raise ParameterError(
            f"nonzero matrix entries must be at least 2^-40 ({MIN_PROBABILITY:.3g})"
        )
    if np.linalg.matrix_rank(p) < p.shape[0]:
        raise ParameterError(
            "the matrix must have full row rank (independent rows): otherwise two histograms "
            "give the same law of reports and cannot be told apart"
        )
    return p


def _slack(m: int) -> float:
    return (m + 1) * 2.0**-53


def matrix_epsilon(matrix: npt.ArrayLike) -> float:
    """ε_l of the randomizer ``matrix`` as it is sampled (the realized probabilities' worst ratio).

    Args:
        matrix: rows = inputs, columns = outputs; each row a probability vector.

    Returns:
        max over outputs y and inputs x, x' of ln((P[x, y] + η) / (P[x', y] − η)), η the
        sampling slack of the module docstring.

    Raises:
        ParameterError: not a valid matrix (see :class:`MatrixOracle`).
    """
    p = _check_matrix(matrix)
    eta = _slack(p.shape[1])
    used = p.any(axis=0)
    q = p[:, used]
    return float(np.max(np.log((q.max(axis=0) + eta) / (q.min(axis=0) - eta))))


def _is_krr(p: npt.NDArray[np.float64]) -> bool:
    """P is k-ary randomized response: square, one value on the diagonal, one off it."""
    d, m = p.shape
    if d != m:
        return False
    diag = np.diag(p)
    off = p[~np.eye(d, dtype=bool)]
    return bool(np.all(diag == diag[0]) and np.all(off == off[0]) and diag[0] > off[0])


class MatrixOracle(ShuffleProtocol):
    """A frequency oracle given by its probability matrix (see the module docstring).

    Args:
        matrix: ``(d, m)`` row-stochastic: row x is the law of the report of a user holding x.
        n: users the guarantee is stated for.
        delta: δ of the central guarantee.
        bound: an amplification bound by name (default: the tightest that applies).

    Raises:
        ParameterError: a matrix whose rows are not probability vectors, with an output some
            input can give and another cannot, entries in (0, 2^-40), dependent rows, or a
            side over 4096; or n, delta out of range.
    """

    name: ClassVar[str] = "matrix"
    input_kind: ClassVar[InputKind] = InputKind.CATEGORICAL
    description: ClassVar[str] = ""

    def __init__(
        self, matrix: npt.ArrayLike, *, n: int, delta: float, bound: str | None = None
    ) -> None:
        self._p = _check_matrix(matrix)
        self._p.setflags(write=False)
        d, m = self._p.shape
        self._cdf = np.cumsum(self._p, axis=1)
        self._cdf[:, -1] = 1.0
        self._pinv = np.linalg.pinv(self._p.T)
        self._eps_l = matrix_epsilon(self._p)
        n = check_n(n)
        delta = check_delta(delta)
        self._family: Literal["krr", "generic"] = "krr" if _is_krr(self._p) else "generic"
        eps_c, bound_name = tightest_central(
            epsilon_local=self._eps_l, n=n, delta=delta, family=self._family, k=d, bound=bound
        )
        self._privacy = PrivacyGuarantee(eps_c, self._eps_l, delta, bound_name)
        self._size = uint_codec_size(m)

    @property
    def matrix(self) -> npt.NDArray[np.float64]:
        """The probability matrix (read-only)."""
        return self._p

    @property
    def domain(self) -> int:
        return int(self._p.shape[0])

    @property
    def outputs(self) -> int:
        """m: the number of distinct reports."""
        return int(self._p.shape[1])

    @property
    def message_size(self) -> int:
        return self._size

    @property
    def messages_per_user(self) -> float:
        return 1.0

    @property
    def privacy(self) -> PrivacyGuarantee:
        return self._privacy

    def randomizer_family(self) -> RandomizerFamily:
        note = "" if self._family == "krr" else "a probability matrix: generic ε_l-LDP bounds"
        return RandomizerFamily(self._family, self.domain, note)

    def randomize(self, values: npt.ArrayLike, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        x = self.validate_values(values)
        u: npt.NDArray[np.float64] = rng.random(size=int(x.shape[0]))
        out = np.empty(x.shape[0], dtype=np.int64)
        for v in range(self.domain):  # one vectorized draw per input value, not per user
            rows = np.flatnonzero(x == v)
            out[rows] = np.searchsorted(self._cdf[v], u[rows], side="right")
        return np.minimum(out, self.outputs - 1)

    def encode(self, messages: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        return encode_uints(messages, self._size)

    def decode(self, rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        y = decode_uints(rows, self._size)
        return y, y < self.outputs

    def sample_fakes(self, count: int, *, rng: RNGLike) -> npt.NDArray[Any]:
        rng = as_generator(rng)
        return rng.integers(0, self.outputs, size=count, dtype=np.int64)

    def estimate(self, messages: npt.NDArray[Any], *, n: int, n_fakes: int) -> Estimate:
        m = self.outputs
        counts = np.bincount(np.asarray(messages, dtype=np.int64), minlength=m)[:m]
        centred = counts.astype(np.float64) - n_fakes / m
        h = self._pinv @ centred
        # Plug-in covariance of the counts: the users' multinomial laws at the clipped
        # estimate (rescaled to n users) plus the uniform fakes'.
        w = np.clip(h, 0.0, None)
        w = w * (n / w.sum()) if w.sum() > 0 else np.full(self.domain, n / self.domain)
        p = self._p
        cov = np.diag(w @ p) - (p.T * w) @ p
        u = np.full(m, 1.0 / m)
        cov += n_fakes * (np.diag(u) - np.outer(u, u))
        var = np.einsum("ij,jk,ik->i", self._pinv, cov, self._pinv)
        return Estimate(
            values=h,
            expected_std=np.sqrt(np.clip(var, 0.0, None)),
            messages_used=int(counts.sum()),
            extra={"std": "plug-in (multinomial covariance at the clipped estimate)"},
        )

    def truth(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.categorical_counts(values)


#: The matrices of the protocols :func:`register_matrix_oracle` registered, by name.
_MATRICES: dict[str, npt.NDArray[np.float64]] = {}


def matrix_of(name: str) -> npt.NDArray[np.float64] | None:
    """The probability matrix of a protocol registered from one (``None`` for any other).

    Args:
        name: a registered protocol's name.

    Returns:
        The matrix, or ``None``.
    """
    return _MATRICES.get(name)


def register_matrix_oracle(
    name: str, matrix: npt.ArrayLike, *, description: str = ""
) -> type[MatrixOracle]:
    """Register the frequency oracle ``matrix`` as protocol ``name``.

    The protocol's factory takes ``ProtocolSpec.n``, ``delta`` and ``bound``; its ``domain``
    must be the matrix's number of rows (the matrix fixes ε_l, so ``spec.epsilon`` is the
    request a run is checked against, not a calibration target).

    Args:
        name: the protocol's name (lower case, new).
        matrix: ``(d, m)`` row-stochastic probability matrix.
        description: one line shown by ``esa protocols``.

    Returns:
        The new protocol class (a :class:`MatrixOracle` subclass named ``name``).

    Raises:
        ParameterError: a bad name (taken, not lower-case letters, digits and ``_``) or matrix.
    """
    if not name or not all(c.islower() or c.isdigit() or c == "_" for c in name):
        raise ParameterError(
            f"protocol name must be lower-case letters, digits and _, got {name!r}"
        )
    checked = _check_matrix(matrix)
    cls: type[MatrixOracle] = type(
        f"MatrixOracle_{name}",
        (MatrixOracle,),
        {"name": name, "description": description, "__doc__": description or MatrixOracle.__doc__},
    )

    @register_protocol(name)
    def _build(spec: ProtocolSpec) -> ShuffleProtocol:
        # (registered first: a taken name is refused before the matrix is recorded)
        if spec.domain != checked.shape[0]:
            raise ParameterError(
                f"{name}: its matrix has {checked.shape[0]} inputs, so the domain must be "
                f"{checked.shape[0]}, got {spec.domain}"
            )
        return cls(checked, n=spec.n, delta=spec.delta, bound=spec.bound)

    checked.setflags(write=False)
    _MATRICES[name] = checked
    return cls


def load_protocol_file(path: str | Path) -> list[str]:
    """Register every protocol a TOML file declares; return their names.

    The file holds one ``[protocol]`` table, or an array of ``[[protocol]]`` tables, each with
    ``name``, ``matrix`` (a list of rows) and an optional ``description``::

        [protocol]
        name = "rr3"
        description = "3-ary randomized response as a matrix"
        matrix = [[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]]

    Args:
        path: the TOML file.

    Returns:
        The names registered, in file order.

    Raises:
        ParameterError: not valid TOML, a missing or unknown key, a bad name or matrix.
        OSError: the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"{path}: not valid TOML: {exc}") from None
    tables = doc.get("protocol")
    if isinstance(tables, dict):
        tables = [tables]
    if not isinstance(tables, list) or not tables or set(doc) != {"protocol"}:
        raise ParameterError(f"{path}: expected one [protocol] table (or [[protocol]] tables)")
    names = []
    for table in tables:
        unknown = set(table) - {"name", "matrix", "description"}
        if unknown or "name" not in table or "matrix" not in table:
            raise ParameterError(
                f"{path}: a [protocol] table needs name and matrix (and may have description)"
                + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
            )
        register_matrix_oracle(
            str(table["name"]),
            _rows(table["matrix"], path),
            description=str(table.get("description", "")),
        )
        names.append(str(table["name"]))
    return names


def _rows(value: Any, path: str | Path) -> Sequence[Sequence[float]]:
    if not isinstance(value, list) or not all(isinstance(r, list) for r in value):
        raise ParameterError(f"{path}: matrix must be a list of rows")
    for row in value:
        for v in row:
            if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(float(v)):
                raise ParameterError(f"{path}: matrix entries must be numbers, got {v!r}")
    return value
