"""The binomial and negative binomial laws, and an FFT convolution, for the accountants.

Bit for bit what ``scipy.stats.binom``, ``scipy.stats.nbinom`` and
``scipy.signal.fftconvolve`` return, without importing ``scipy.stats`` or ``scipy.signal``:
those two packages cost ~0.45 s of CPU to import, paid by every process that builds a
protocol. In a parallel experiment grid that import is serial (the pool's workers inherit
it), so it caps the speedup.

How the values stay identical:

* ``scipy.stats.binom`` and ``nbinom`` compute their pmf, cdf, sf, ppf and isf with Boost's
  implementations, compiled into ``scipy.special._ufuncs`` (``_binom_pmf``, ...); each
  function here calls the same kernel and applies the same rules as
  ``scipy.stats.rv_discrete`` outside the support (0 or 1 there, ``nan`` for invalid
  parameters, the support's ends at q = 0 and q = 1, the pmf clipped to [0, 1]).
* :func:`fftconvolve` makes the calls ``scipy.signal.fftconvolve`` makes for two 1-D real
  arrays in ``"full"`` mode: ``scipy.fft.rfftn`` at ``next_fast_len``, the product,
  ``irfftn``, the first ``len(a) + len(b) − 1`` points.

The kernels are private to scipy: where the installed scipy lacks them, each law falls back
to ``scipy.stats`` (same values, slower import). ``tests/test_distributions.py`` compares
every function with scipy's on the support, its edges and invalid parameters.

Only what the accountants use is here: the laws' parameters are arrays or scalars that
broadcast, as in scipy; the convolution takes 1-D float64 arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "binom_cdf",
    "binom_isf",
    "binom_pmf",
    "binom_ppf",
    "binom_sf",
    "fftconvolve",
    "nbinom_isf",
    "nbinom_pmf",
    "nbinom_sf",
]

FloatArray = npt.NDArray[np.float64]
#: A float64 array, or a numpy scalar where every argument was a scalar (as scipy returns).
Result = Any

_Kernel = Callable[..., FloatArray]


@functools.cache
def _kernel(name: str) -> _Kernel | None:
    """scipy's compiled kernel ``name`` (``"_binom_pmf"``, ...), or ``None`` if this scipy
    has none by that name."""
    try:
        from scipy.special import _ufuncs
    except ImportError:  # pragma: no cover - scipy moved its private module
        return None
    kernel: _Kernel | None = getattr(_ufuncs, name, None)
    return kernel


def _stats_method(law: str, method: str) -> Callable[..., Result]:
    """``scipy.stats.<law>.<method>``: the fallback where a kernel is missing."""
    from scipy import stats

    fallback: Callable[..., Result] = getattr(getattr(stats, law), method)
    return fallback


def _broadcast(*args: npt.ArrayLike) -> list[npt.NDArray[Any]]:
    return list(np.broadcast_arrays(*(np.asarray(a) for a in args)))


def _scalar_or_array(out: FloatArray) -> Result:
    return out[()] if out.ndim == 0 else out


def _binom_valid(n: npt.NDArray[Any], p: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """scipy's ``binom._argcheck``: n a non-negative integer, 0 ≤ p ≤ 1."""
    return np.asarray((n >= 0) & (n == np.round(n)) & (p >= 0) & (p <= 1))


def _nbinom_valid(n: npt.NDArray[Any], p: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """scipy's ``nbinom._argcheck``: n > 0, 0 < p ≤ 1."""
    return np.asarray((n > 0) & (p > 0) & (p <= 1))


def _pmf(law: str, valid: npt.NDArray[np.bool_], k: npt.NDArray[Any], *params: Any) -> Result:
    """``rv_discrete.pmf`` on the support [0, n] (binomial) or [0, ∞) (negative binomial)."""
    top = params[0] if law == "binom" else np.inf
    inside = valid & (k >= 0) & (k <= top) & (np.floor(k) == k)
    out = np.zeros(inside.shape)
    out[~valid | np.isnan(k)] = np.nan
    if inside.any():
        kernel = _kernel(f"_{law}_pmf")
        assert kernel is not None  # checked by the public function
        out[inside] = np.clip(kernel(k[inside], *(a[inside] for a in params)), 0, 1)
    return _scalar_or_array(out)


def _tail(
    law: str, side: str, valid: npt.NDArray[np.bool_], k: npt.NDArray[Any], *params: Any
) -> Result:
    """``rv_discrete.cdf`` (``side="cdf"``) or ``sf`` at floor(k)."""
    top = params[0] if law == "binom" else np.inf
    inside = valid & (k >= 0) & (k < top) & np.isfinite(k)
    out = np.zeros(inside.shape)
    if side == "cdf":
        out[k >= top] = 1.0
    else:
        out[((k < 0) | np.isneginf(k)) & valid] = 1.0
    out[~valid | np.isnan(k)] = np.nan
    if inside.any():
        kernel = _kernel(f"_{law}_{side}")
        assert kernel is not None  # checked by the public function
        out[inside] = np.clip(kernel(np.floor(k[inside]), *(a[inside] for a in params)), 0, 1)
    return _scalar_or_array(out)


def _quantile(
    law: str, side: str, valid: npt.NDArray[np.bool_], q: npt.NDArray[Any], *params: Any
) -> Result:
    """``rv_discrete.ppf`` (``side="ppf"``) or ``isf``: the support's ends at q ∈ {0, 1}."""
    top = params[0] if law == "binom" else np.full(q.shape, np.inf)
    inside = valid & (q > 0) & (q < 1)
    out = np.full(inside.shape, np.nan)
    below, beyond = (q == 0, q == 1) if side == "ppf" else (q == 1, q == 0)
    out[below & valid] = -1.0
    out[beyond & valid] = top[beyond & valid]
    if inside.any():
        kernel = _kernel(f"_{law}_{side}")
        assert kernel is not None  # checked by the public function
        with np.errstate(over="ignore"):  # as scipy (its gh-17432)
            out[inside] = kernel(q[inside], *(a[inside] for a in params))
    return _scalar_or_array(out)


def binom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) = k]: ``scipy.stats.binom.pmf(k, n, p)``, bit for bit."""
    if _kernel("_binom_pmf") is None:
        return _stats_method("binom", "pmf")(k, n, p)
    k, n, p = _broadcast(k, n, p)
    return _pmf("binom", _binom_valid(n, p), k, n, p)


def binom_cdf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) ≤ k]: ``scipy.stats.binom.cdf(k, n, p)``, bit for bit."""
    if _kernel("_binom_cdf") is None:
        return _stats_method("binom", "cdf")(k, n, p)
    k, n, p = _broadcast(k, n, p)
    return _tail("binom", "cdf", _binom_valid(n, p), k, n, p)


def binom_sf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[Bin(n, p) > k]: ``scipy.stats.binom.sf(k, n, p)``, bit for bit."""
    if _kernel("_binom_sf") is None:
        return _stats_method("binom", "sf")(k, n, p)
    k, n, p = _broadcast(k, n, p)
    return _tail("binom", "sf", _binom_valid(n, p), k, n, p)


def binom_ppf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[Bin(n, p) ≤ k] ≥ q: ``scipy.stats.binom.ppf(q, n, p)``, bit for bit."""
    if _kernel("_binom_ppf") is None:
        return _stats_method("binom", "ppf")(q, n, p)
    q, n, p = _broadcast(q, n, p)
    return _quantile("binom", "ppf", _binom_valid(n, p), q, n, p)


def binom_isf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[Bin(n, p) > k] ≤ q: ``scipy.stats.binom.isf(q, n, p)``, bit for bit."""
    if _kernel("_binom_isf") is None:
        return _stats_method("binom", "isf")(q, n, p)
    q, n, p = _broadcast(q, n, p)
    return _quantile("binom", "isf", _binom_valid(n, p), q, n, p)


def nbinom_pmf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[NB(n, p) = k] (failures before the n-th success): ``scipy.stats.nbinom.pmf``."""
    if _kernel("_nbinom_pmf") is None:
        return _stats_method("nbinom", "pmf")(k, n, p)
    k, n, p = _broadcast(k, n, p)
    return _pmf("nbinom", _nbinom_valid(n, p), k, n, p)


def nbinom_sf(k: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """P[NB(n, p) > k]: ``scipy.stats.nbinom.sf(k, n, p)``, bit for bit."""
    if _kernel("_nbinom_sf") is None:
        return _stats_method("nbinom", "sf")(k, n, p)
    k, n, p = _broadcast(k, n, p)
    return _tail("nbinom", "sf", _nbinom_valid(n, p), k, n, p)


def nbinom_isf(q: npt.ArrayLike, n: npt.ArrayLike, p: npt.ArrayLike) -> Result:
    """Smallest k with P[NB(n, p) > k] ≤ q: ``scipy.stats.nbinom.isf(q, n, p)``, bit for bit."""
    if _kernel("_nbinom_isf") is None:
        return _stats_method("nbinom", "isf")(q, n, p)
    q, n, p = _broadcast(q, n, p)
    return _quantile("nbinom", "isf", _nbinom_valid(n, p), q, n, p)


def fftconvolve(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """The full linear convolution of two 1-D float64 arrays by FFT:
    ``scipy.signal.fftconvolve(a, b)``, bit for bit.

    Raises:
        ValueError: an argument is not 1-D.
    """
    from scipy import fft

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"fftconvolve takes 1-D arrays, not {x.ndim}-D and {y.ndim}-D")
    if x.size == 0 or y.size == 0:
        return np.asarray([], dtype=np.float64)
    if x.size == 1 or y.size == 1:  # scipy broadcasts the product: no FFT on that axis
        return np.asarray(x * y, dtype=np.float64)
    size = x.size + y.size - 1
    shape, axes = [fft.next_fast_len(size, True)], [0]
    spectrum = fft.rfftn(x, shape, axes=axes) * fft.rfftn(y, shape, axes=axes)
    return np.array(fft.irfftn(spectrum, shape, axes=axes)[:size], dtype=np.float64)
