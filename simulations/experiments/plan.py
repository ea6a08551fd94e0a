"""The grid of the survey's §5 experiments: categories, protocols, points, and the rows.

A plan (:class:`ExperimentPlan`) is one category's grid: a default point and the sweeps that
vary one coordinate of it. Each (point, method) gives one :class:`Row`; an
:class:`ExperimentResult` is everything one run (or rebuild) produced.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from protocols import (
    InputKind,
    ParameterError,
    ProtocolError,
    ProtocolSpec,
    ShuffleProtocol,
    build_protocol,
    protocol_names,
)

__all__ = [
    "CATEGORIES",
    "SURVEY_OPTIONS",
    "ExperimentPlan",
    "ExperimentResult",
    "Log",
    "Row",
    "analyzer_time",
    "baselines",
    "category_protocols",
    "default_rows",
    "grid_points",
    "make_plan",
    "ok_rows",
    "point_seed",
    "point_spec",
    "runs_text",
]

CATEGORIES: tuple[str, ...] = ("counting", "histogram", "sum")

# The names below are the experiment's design, not a registry: every protocol registered in
# ``protocols`` is discovered (:func:`category_protocols`), and one whose name the lists do
# not know is placed by what it estimates (:func:`_category_of`). They name the survey's
# §4.2 protocols whose category their name does not carry, so that their place does not
# depend on building them at a probe configuration (murs needs fakes, pucm a large n).

#: histogram protocols whose names carry no ``hist_`` prefix (survey §4.2 names)
_HISTOGRAM_NAMES = frozenset({"slh", "murs", "prhr", "pucm"})
#: categorical protocols that estimate something other than a histogram
_NOT_HISTOGRAM = frozenset({"disele", "put", "aut", "prrq"})
#: fraction of n each shuffler injects as fakes, per protocol (survey §5.2: MURS 1 %)
_FAKE_FRACTION = {"murs": 0.01}
#: protocol options the survey fixes (§5.3: RSum_RM with 3 messages, rounding precision 10);
#: rsum_rr and rsum_dsg keep their optimal-bound defaults (§5.3 explains Fig. 15 by them)
SURVEY_OPTIONS: dict[str, dict[str, float]] = {
    "rsum_rm": {"messages": 3},
    "rsum_kr": {"precision": 10},
}

Log = Callable[[str], None]


def category_protocols(category: str, *, log: Log | None = None) -> list[str]:
    """Registered protocol names of ``category``, by name prefix then by what they estimate.

    Args:
        category: counting, histogram or sum.
        log: called with one line per registered protocol that fits no category.

    Returns:
        The names, in the registry's (sorted) order.
    """
    out = []
    for name in protocol_names():
        cat = _category_of(name)
        if cat == category:
            out.append(name)
        elif cat is None and log is not None:
            log(f"{name}: no experiment category (not a counting, histogram or sum protocol)")
    return out


def _category_of(name: str) -> str | None:
    """The category of a registered protocol: by name prefix, by the survey's names, else
    by its input kind and statistic at a small configuration (None if it fits none)."""
    if name.startswith("cnt_"):
        return "counting"
    if name.startswith("rsum_"):
        return "sum"
    if name.startswith("hist_") or name in _HISTOGRAM_NAMES:
        return "histogram"
    if name in _NOT_HISTOGRAM:
        return None
    # Unknown name: decide by the input kind of a small configuration, and for categorical
    # input by whether its statistic is the histogram.
    try:
        proto = build_protocol(name, ProtocolSpec(epsilon=1.0, delta=1e-6, n=10_000, domain=8))
    except ParameterError:
        return None
    if proto.input_kind is InputKind.CATEGORICAL:
        return "histogram" if _estimates_histogram(proto) else None
    return {InputKind.BINARY: "counting", InputKind.REAL01: "sum"}.get(proto.input_kind)


def _estimates_histogram(proto: ShuffleProtocol) -> bool:
    """Whether a categorical protocol's statistic (its ``truth``) is the histogram."""
    values = np.arange(2 * proto.domain, dtype=np.int64) % max(proto.domain // 2, 1)
    try:
        truth = np.asarray(proto.truth(values), dtype=np.float64)
    except ProtocolError:
        return False
    expected = proto.categorical_counts(values)
    return truth.shape == expected.shape and bool(np.array_equal(truth, expected))


@dataclass(frozen=True, slots=True)
class ExperimentPlan:
    """The grid of one category.

    Attributes:
        category: counting, histogram or sum.
        defaults: the point every sweep varies one coordinate of (n, epsilon, delta,
            domain, skew).
        sweeps: parameter name → values swept (the others at their defaults).
        repeats: independent runs per point (RMSE is over runs and entries).
        max_messages: per-run budget of messages (n × messages per user); above it a
            protocol is skipped at that point with the reason logged.
        quick: whether this is the ``--quick`` grid.
    """

    category: str
    defaults: dict[str, float]
    sweeps: dict[str, tuple[float, ...]]
    repeats: int
    max_messages: int
    quick: bool


def make_plan(category: str, *, quick: bool, repeats: int | None = None) -> ExperimentPlan:
    """The survey's grid (full) or a scaled-down one that runs in minutes (quick)."""
    if category not in CATEGORIES:
        raise ParameterError(f"unknown category {category!r}; choose one of {CATEGORIES}")
    delta = 1e-6  # survey §5: δ = 10^-6 for every approximate-DP method
    sweeps: dict[str, tuple[float, ...]]
    if category == "counting":
        defaults = {"n": 1e4 if quick else 1e6, "epsilon": 0.9, "skew": 0.5, "domain": 2}
        sweeps = {
            "epsilon": (0.3, 0.6, 0.9) if quick else (0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
            "n": (2e3, 1e4, 5e4) if quick else (1e4, 1e5, 1e6),
            "skew": (0.1, 0.5, 0.9) if quick else (0.1, 0.3, 0.5, 0.7, 0.9),
        }
    elif category == "histogram":
        defaults = {"n": 1e4 if quick else 1e6, "epsilon": 0.9, "skew": 6.0, "domain": 16}
        sweeps = {
            "epsilon": (0.3, 0.6, 0.9) if quick else (0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
            "domain": (8, 16, 64) if quick else (16, 64, 256, 1024),
            "n": (3e3, 1e4, 3e4) if quick else (1e4, 1e5, 1e6),
        }
    else:
        defaults = {"n": 1e4 if quick else 1e6, "epsilon": 0.9, "skew": 6.0, "domain": 10}
        sweeps = {
            "epsilon": (0.3, 0.6, 0.9) if quick else (0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
            "n": (2e3, 1e4, 5e4) if quick else (1e4, 1e5, 1e6),
        }
    defaults["delta"] = delta
    sweeps = {k: tuple(float(v) for v in vals) for k, vals in sweeps.items()}
    reps = repeats if repeats is not None else (3 if quick else 5)
    if reps < 1:
        raise ParameterError(f"repeats must be >= 1, got {reps}")
    return ExperimentPlan(
        category=category,
        defaults=defaults,
        sweeps=sweeps,
        repeats=reps,
        max_messages=3_000_000 if quick else 60_000_000,
        quick=quick,
    )


@dataclass(slots=True)
class Row:
    """One (sweep point, method) result: one CSV row.

    The measured columns, over the point's ``repeats`` runs (NaN where the point was
    skipped):

    * ``rmse``: the RMSE over every run and entry, √(mean of the squared errors).
    * ``rmse_sd``: the spread over seeds: the sample standard deviation (n − 1) of the
      per-run RMSEs (each run's √(mean over its entries of the squared errors)); NaN with a
      single run. ``rmse_sd / √repeats`` is the standard error the plots draw as error bars.
    * ``expected_rmse``: the RMSE the estimator states (closed form), over the same runs.
    * ``analyzer_seconds``, ``total_seconds``: wall time per run of the analyzer and of the
      whole run (the machine's load included).
    * ``analyzer_cpu_seconds``, ``total_cpu_seconds``: CPU time per run
      (:func:`time.process_time` of the process that ran the point, measured there, so a
      pool or cluster worker measures its own) of the same two spans: what the timing plots
      show, since it does not grow with other jobs' load. The analyzer's span of a shuffle
      run starts with its analyze stage and ends when :func:`esa.run_pipeline` returns (the
      run's bookkeeping after the estimate included). The CPU of the onion crypto's worker
      processes is not counted; that of tasks running at once in other threads of the same
      process (a Dask worker with several threads) is counted with it.
    * ``messages_per_user``: messages that reached the analyzer per user (reports or tally).
    * ``epsilon_central``: the ε_c the configured protocol proves (may exceed ``epsilon``).

    A CSV written before ``rmse_sd`` and the CPU columns existed is still read
    (:func:`~simulations.experiments.csv.read_csv`): they are NaN in its rows.
    """

    category: str
    sweep: str
    value: float
    method: str
    family: str  # shuffle | ldp | cdp
    n: int
    domain: int
    epsilon: float
    delta: float
    skew: float
    repeats: int = 0
    rmse: float = math.nan
    rmse_sd: float = math.nan
    expected_rmse: float = math.nan
    analyzer_seconds: float = math.nan
    total_seconds: float = math.nan
    analyzer_cpu_seconds: float = math.nan
    total_cpu_seconds: float = math.nan
    messages_per_user: float = math.nan
    epsilon_central: float = math.nan
    status: str = "ok"
    reason: str = ""
    crypto: str = ""
    representation: str = ""


@dataclass(slots=True)
class ExperimentResult:
    """Everything one ``esa experiments`` run produced.

    ``from_csv`` is True when the rows were read from ``csv_path`` by
    :func:`rebuild_experiments` instead of being run; ``seconds`` is then the time the
    rebuild took, not the original run's.
    """

    plan: ExperimentPlan
    rows: list[Row]
    protocols: list[str]
    csv_path: Path
    plots: list[Path]
    summary_path: Path
    seconds: float
    crypto: str
    skipped: list[str] = field(default_factory=list)
    from_csv: bool = False

    def _repr_html_(self) -> str:
        """The run's HTML report, for Jupyter (:func:`simulations.report.render_html`)."""
        from ..report import render_html

        return render_html(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.plan.category,
            "from_csv": self.from_csv,
            "quick": self.plan.quick,
            "crypto": self.crypto,
            "protocols": self.protocols,
            "repeats": self.plan.repeats,
            "defaults": self.plan.defaults,
            "sweeps": {k: list(v) for k, v in self.plan.sweeps.items()},
            "csv": str(self.csv_path),
            "plots": [str(p) for p in self.plots],
            "summary": str(self.summary_path),
            "rows": len(self.rows),
            "skipped": self.skipped,
            "seconds": self.seconds,
        }


def baselines(category: str) -> list[tuple[str, str]]:
    """The category's baseline methods, as ``(method, family)``: LDP ones, then CDP."""
    if category == "counting":
        return [("ldp_rr", "ldp"), ("cdp_laplace", "cdp")]
    if category == "histogram":
        return [("ldp_krr", "ldp"), ("ldp_olh", "ldp"), ("cdp_laplace", "cdp")]
    return [("ldp_harmony", "ldp"), ("cdp_laplace", "cdp")]


def point_spec(name: str, point: dict[str, float]) -> tuple[ProtocolSpec, int]:
    """Protocol ``name``'s configuration at a grid point, and the fakes it gets in total."""
    n = int(point["n"])
    fakes = round(_FAKE_FRACTION.get(name, 0.0) * n)
    spec = ProtocolSpec(
        epsilon=point["epsilon"],
        delta=point["delta"],
        n=n,
        domain=int(point["domain"]),
        fake_reports=fakes,
        options=SURVEY_OPTIONS.get(name, {}),
    )
    return spec, fakes


def point_seed(
    seed: int, category: str, name: str, point: Mapping[str, float]
) -> np.random.SeedSequence:
    """The random stream of ``name`` (a method, or ``"data"``) at a grid point, from ``seed``.

    It depends on what the task is, never on where it sits in a run: the spawn key is a
    BLAKE2b hash of ``(category, name, the point's coordinates)`` (each coordinate by its
    exact float value), so filtering the protocols, reordering the sweeps or running the
    tasks on other processes or machines leaves every task's numbers unchanged. A point
    that two sweeps share (the default point) gets the same stream in both.

    Args:
        seed: the run's root seed (>= 0).
        category: counting, histogram or sum.
        name: a method name, or ``"data"`` for the point's synthetic data.
        point: the point's coordinates (n, epsilon, delta, domain, skew).

    Returns:
        ``SeedSequence(seed, spawn_key=<4 words of the hash>)``.
    """
    identity = json.dumps(
        [category, name, sorted((k, float(v).hex()) for k, v in point.items())],
        separators=(",", ":"),
    )
    digest = hashlib.blake2b(identity.encode(), digest_size=16).digest()
    words = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))
    return np.random.SeedSequence(seed, spawn_key=words)


def grid_points(plan: ExperimentPlan) -> Iterable[tuple[str, float, dict[str, float]]]:
    """Every point of the grid, as ``(sweep, value, point)``, in the order a run visits them."""
    for sweep, values in plan.sweeps.items():
        for v in values:
            point = dict(plan.defaults)
            point[sweep] = float(v)
            yield sweep, float(v), point


def default_rows(rows: Sequence[Row], plan: ExperimentPlan) -> list[Row]:
    """Rows at the plan's default point (taken from the ε_c sweep)."""
    eps = plan.defaults["epsilon"]
    return [r for r in rows if r.sweep == "epsilon" and math.isclose(r.value, eps)]


def analyzer_time(rows: Iterable[Row]) -> tuple[str, str]:
    """The column that times the analyzer in plots and findings, and its unit: CPU time
    (``"analyzer_cpu_seconds", "CPU s"``), or for rows read from a CSV written before that
    column existed (all NaN) the wall time (``"analyzer_seconds", "wall s"``).

    Args:
        rows: the rows of one run.

    Returns:
        ``(column, unit)``.
    """
    if any(math.isfinite(r.analyzer_cpu_seconds) for r in ok_rows(rows)):
        return "analyzer_cpu_seconds", "CPU s"
    return "analyzer_seconds", "wall s"


def ok_rows(rows: Iterable[Row]) -> list[Row]:
    """The rows whose point ran (not skipped)."""
    return [r for r in rows if r.status == "ok"]


def runs_text(k: int) -> str:
    """``k`` runs in words ("1 run", "3 runs")."""
    return "1 run" if k == 1 else f"{k} runs"
