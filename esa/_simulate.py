"""``esa.simulate``: the common job in one call — a protocol, users' data, a privacy statement.

It does what ``esa simulate`` does (the command calls it): configure the protocol for the
requested (ε, δ), refuse a configuration that proves less than asked unless ``allow_weaker``,
take the users' own data (or draw synthetic data), run it through the shufflers and the analyzer,
and return the :class:`~esa.RunResult` whose privacy statement is for the run that happened.
``result.to_json()`` is the document ``esa simulate --json`` prints for the same arguments (the
command adds only its command line and parsed arguments as metadata).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Literal

import numpy as np

from protocols import (
    InputKind,
    ProtocolSpec,
    RNGLike,
    ShuffleProtocol,
    as_generator,
    build_protocol,
)

from ._data import (
    OutOfRange,
    PreparedData,
    as_column,
    compact_values,
    prepare_values,
    read_column,
    synthetic_values,
)
from ._errors import DataError
from ._executor import resolve_executor
from ._pipeline import PipelineConfig, RunResult, run_pipeline
from ._store import DEFAULT_MEMORY_BUDGET
from ._weaker import WeakerThanRequested

__all__ = [
    "DEFAULT_DOMAIN",
    "WeakerThanRequested",
    "privacy_shortfall",
    "resolve_data",
    "simulate",
    "users_values",
]

#: The domain every command and ``simulate`` take when none is given (and the data do not say).
DEFAULT_DOMAIN = 16

#: What proves the requested ε instead, for the protocols whose proven bound can exceed it
#: (a hint, not a registry: any other protocol whose proven ε exceeds the request is refused
#: all the same, without one).
_PROVEN_ALTERNATIVE = {
    "cnt_sgm": "the default option encoding=splitmix proves it with δ (its sum alone is "
    "pure), protocol cnt_pure proves it purely",
    "put": "the default option encoding=splitmix proves it with δ (Split-Mix Cnt_SGM "
    "counters), option counter=cnt_pure proves it purely",
}


def privacy_shortfall(protocol: str, requested: float, proven: float) -> str | None:
    """One line saying that ``protocol`` proves a larger ε than requested, or None.

    Args:
        protocol: the protocol's name (for the message and its hint).
        requested: the ε asked for.
        proven: the ε the configuration or the run proves.

    Returns:
        The message, or None when ``proven`` ≤ ``requested`` (with a relative slack of 1e-9
        for the accountants' rounding).
    """
    if not proven > requested * (1.0 + 1e-9):
        return None
    hint = _PROVEN_ALTERNATIVE.get(protocol)
    return (
        f"{protocol} proves ε_c = {proven:.4g}, not the requested {requested:g}"
        + (f"; {hint}" if hint else "")
        + " (docs/privacy.md)"
    )


def _domain_from(labels: Sequence[Any]) -> int | None:
    """The number of categories when every label is a name (not a number), else None."""
    names = {str(v).strip() for v in labels}
    try:
        for name in names:
            float(name)
    except ValueError:
        return len(names)
    return None


def resolve_data(
    data: Any,
    *,
    column: str | None = None,
    n: int | None = None,
    domain: int | None = None,
    categories: Sequence[str] | None = None,
) -> tuple[Any, str, int, int]:
    """Users' raw values and the run's size from what a caller gave.

    Args:
        data: ``None`` (synthetic users), a file path (with ``column``), or values.
        column: the column of a file.
        n: users asked for; with data, it must be the rows' count.
        domain: bins asked for; default the number of categories when they are names (or
            of ``categories``), else :data:`DEFAULT_DOMAIN`.
        categories: the categories in bin order.

    Returns:
        ``(raw, source, n, domain)``: the raw values (``None`` for synthetic users), how errors
        name them, the number of users and the domain to configure the protocol with.

    Raises:
        DataError: a file without ``column``, or ``n`` different from the rows' count.
        OSError: the file cannot be read.
    """
    raw: Any = None
    source = "array"
    if data is not None:
        if isinstance(data, str | Path):
            if column is None:
                raise DataError("a file as data needs a column (the column to read)")
            raw, source = read_column(data, column), f"{data}:{column}"
        else:
            raw = as_column(data)
        rows = len(raw)
        if n is not None and n != rows:
            raise DataError(f"n = {n} but the data has {rows} rows")
        n = rows
        if domain is None and categories is not None:
            domain = len(categories)
        if domain is None and np.asarray(raw).ndim == 1 and np.asarray(raw).dtype.kind in "OUS":
            domain = _domain_from(list(raw))
    return raw, source, 10_000 if n is None else n, DEFAULT_DOMAIN if domain is None else domain


def users_values(
    protocol: ShuffleProtocol,
    raw: Any,
    *,
    n: int,
    rng: RNGLike,
    source: str = "array",
    categories: Sequence[str] | None = None,
    value_range: tuple[float, float] | None = None,
    out_of_range: OutOfRange = "clip",
    distribution: str = "zipf",
) -> tuple[Any, PreparedData | None]:
    """The users' values for ``protocol``: ``raw`` prepared, or ``n`` synthetic users.

    Args:
        protocol: the configured protocol.
        raw: the users' raw values (:func:`resolve_data`), or ``None`` for synthetic users.
        n: users (synthetic data).
        rng: the data's generator (synthetic data), or a seed (:data:`~protocols.RNGLike`).
        source: how errors name the data.
        categories: the categories in bin order.
        value_range: ``(lo, hi)`` of the users' reals.
        out_of_range: ``"clip"`` or ``"refuse"``.
        distribution: synthetic data's distribution.

    Returns:
        ``(values, prepared)``: what the protocol takes, and what was done to the data
        (``None`` for synthetic users).

    Raises:
        DataError: data the protocol cannot take (the message names the row).
        ParameterError: an ``rng`` that is not :data:`~protocols.RNGLike`.
    """
    rng = as_generator(rng)
    if raw is None:
        return synthetic_values(protocol, n, distribution, rng=rng), None
    sized = protocol.input_kind in (InputKind.CATEGORICAL, InputKind.SET)
    prepared = prepare_values(
        raw,
        protocol.input_kind,
        domain=protocol.domain if sized else None,
        categories=categories,
        value_range=value_range,
        out_of_range=out_of_range,
        source=source,
    )
    return prepared.values, prepared


def simulate(
    protocol: str | ShuffleProtocol,
    data: Any = None,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    n: int | None = None,
    domain: int | None = None,
    shufflers: int = 3,
    fake_reports: int = 0,
    threshold: int = 0,
    crypto: Literal["onion", "ideal"] = "onion",
    representation: Literal["reports", "tally"] = "reports",
    bound: str | None = None,
    threshold_epsilon: float | None = None,
    options: Mapping[str, float | str] | None = None,
    column: str | None = None,
    categories: Sequence[str] | None = None,
    value_range: tuple[float, float] | None = None,
    out_of_range: OutOfRange = "clip",
    source: str | None = None,
    distribution: str = "zipf",
    rng: RNGLike = None,
    allow_weaker: bool = False,
    on_mismatch: Literal["recompute", "refuse"] = "recompute",
    workers: int | None = None,
    cluster: str | Executor | Any | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    spill_dir: str | Path | None = None,
    on_stage: Callable[[str], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run users' data through a protocol's encoders, ``shufflers`` shufflers and the analyzer.

    Example (real encryption, three shufflers, the users' categories as labels)::

        result = esa.simulate("hist_kr", ["a", "b", "a", ...], epsilon=1, delta=1e-6, rng=0)
        result.estimate.values, result.privacy.epsilon_central, result.to_json()

    Args:
        protocol: a registered protocol's name (``protocols.protocol_names()``), or a
            protocol already configured (then ``epsilon`` is only the request it is checked
            against, and ``n``, ``domain``, ``bound``, ``options`` are its own).
        data: the users' values: a list, numpy array, pandas Series or pyarrow array, or the
            path of a CSV/Parquet file (then ``column`` names the column); ``None`` draws
            ``n`` synthetic users from ``distribution``. Categories are mapped to bins (the
            mapping is in ``result.extra["data"]``), reals clipped to the protocol's range (or
            refused, ``out_of_range="refuse"``) after mapping ``value_range`` onto it, so
            their estimate is on the protocol's scale (``rsum_kr`` with ``value_range=(0,
            100)`` estimates the sum of value/100); ``result.extra["data"]["in_data_units"]``
            states the sum, its truth and std in the column's units
            (:meth:`PreparedData.sum_in_data_units`).
        epsilon: the requested central ε_c.
        delta: the requested δ.
        n: users, for synthetic data (default 10 000); with ``data``, the rows' count, and a
            different ``n`` is an error.
        domain: bins (histograms), buckets (sums); default the data's number of categories
            when they are names, else 16.
        shufflers: m ≥ 1 shufflers in the chain.
        fake_reports: uniform fake reports each shuffler adds.
        threshold: crowds with fewer reports are held.
        threshold_epsilon: ε_t of a noisy threshold (``PipelineConfig.threshold_noise``;
            ``None``: the plain threshold).
        crypto: ``"onion"`` (real encryption) or ``"ideal"`` (plaintext stand-in).
        representation: ``"reports"``, or ``"tally"`` (ideal only) for huge runs.
        bound: force an amplification bound by name.
        options: protocol-specific options (``esa protocols NAME`` lists them).
        column: with a file for ``data``, the column to read.
        categories: the categories in bin order (default: the data's, sorted).
        value_range: ``(lo, hi)`` of the users' reals, mapped onto the protocol's range.
        out_of_range: ``"clip"`` (counted) or ``"refuse"`` real values outside the range.
        source: how errors and the output name values given as an array (e.g. the file and
            column they were read from); default ``"array"``, or ``FILE:COLUMN`` for a file.
        distribution: synthetic data's distribution (``esa.DISTRIBUTIONS``).
        rng: seed or generator of the statistics (data, randomizers, seeded fakes;
            :data:`~protocols.RNGLike`); the permutation is always from the OS CSPRNG.
        allow_weaker: run, and say so, when the protocol (or the run) proves a larger ε than
            ``epsilon``; otherwise :class:`WeakerThanRequested` is raised.
        on_mismatch: ``"recompute"`` states the run's own guarantee when it differs from the
            calibration; ``"refuse"`` raises :class:`~esa.GuaranteeMismatch`.
        workers: local processes for the chunk tasks (default: every core).
        cluster: run the chunk tasks (encoding, peeling) on a Dask cluster: a scheduler
            address such as ``"tcp://10.0.0.5:8786"``, a ``distributed.Client``, or any
            :class:`concurrent.futures.Executor` (:func:`esa.resolve_executor`); default the
            local pool. The estimate for a seed is the same wherever the tasks run.
        memory_budget: bytes one batch may hold in RAM before it spills to disk
            (``PipelineConfig.memory_budget``).
        spill_dir: where spilled batches go (default: the system's temp directory).
        on_stage: called with each stage's name as it starts.
        on_progress: called with ``(done, total)`` reports of the current stage.

    Returns:
        The run, its estimate against the truth and its privacy statement; its ``extra`` holds
        the seed, the data's description, the request and whether the run is weaker.

    Raises:
        WeakerThanRequested: the configuration, or the run that happened, proves a larger ε
            than requested and ``allow_weaker`` is false (after a run, ``result`` carries it).
        GuaranteeMismatch: the run differs from the calibration and ``on_mismatch="refuse"``.
        DataError: users' data the protocol cannot take (the message names the row).
        ParameterError: parameters outside the protocol's valid range, or an ``rng`` that
            is not :data:`~protocols.RNGLike`.
        ConfigError: a bad pipeline setting, a cluster address without the ``distributed``
            package, or too little disk for a batch that must spill.
    """
    raw, read_from, n, size = resolve_data(
        data, column=column, n=n, domain=domain, categories=categories
    )
    source = read_from if source is None else source
    if isinstance(protocol, ShuffleProtocol):
        built = protocol
    else:
        spec = ProtocolSpec(
            epsilon=epsilon,
            delta=delta,
            n=n,
            domain=size,
            bound=bound,
            fake_reports=fake_reports,
            shufflers=shufflers,
            options=dict(options or {}),
        )
        built = build_protocol(protocol, spec)
    name = built.name
    _ = built.privacy  # derive every parameter now (Cnt_PURE calibrates lazily)
    shortfall = privacy_shortfall(name, epsilon, built.privacy.epsilon_central)
    if shortfall and not allow_weaker:
        raise WeakerThanRequested(f"{shortfall}; allow_weaker=True (--allow-weaker) runs it anyway")
    config = PipelineConfig(
        shufflers=shufflers,
        fake_reports=fake_reports,
        threshold=threshold,
        crypto=crypto,
        workers=workers,
        representation=representation,
        threshold_noise=threshold_epsilon,
        memory_budget=memory_budget,
        spill_dir=spill_dir,
    )
    root = as_generator(rng)
    data_rng, run_rng = root.spawn(2)
    values, prepared = users_values(
        built,
        raw,
        n=n,
        rng=data_rng,
        source=source,
        categories=categories,
        value_range=value_range,
        out_of_range=out_of_range,
        distribution=distribution,
    )
    if prepared is None:  # synthetic users, ours alone: a byte each, not a word
        values = compact_values(built, values)
    where = contextlib.nullcontext(None) if cluster is None else resolve_executor(workers, cluster)
    with where as executor:
        result = run_pipeline(
            built,
            values,
            config,
            rng=run_rng,
            on_stage=on_stage,
            on_progress=on_progress,
            on_mismatch=on_mismatch,
            executor=executor,
        )
    run_shortfall = privacy_shortfall(name, epsilon, result.privacy.epsilon_central)
    described = None if prepared is None else prepared.to_json()
    if described is not None and prepared is not None:
        described["in_data_units"] = prepared.sum_in_data_units(
            result.estimate.values, result.truth, result.estimate.expected_std
        )
    result.extra.update(
        {
            "seed": rng if isinstance(rng, int) else None,
            "distribution": distribution if prepared is None else None,
            "data": described,
            "transport": "inproc",
            "fakes_source": "seeded (simulation)" if config.seeded_fakes else "csprng",
            "epsilon_requested": float(epsilon),
            "weaker_than_requested": run_shortfall is not None,
            "privacy_warning": run_shortfall,
        }
    )
    if run_shortfall and not allow_weaker:
        raise WeakerThanRequested(
            f"the run that happened {run_shortfall.split(' ', 1)[1]}; allow_weaker=True "
            "(--allow-weaker) accepts it",
            result,
        )
    return result
