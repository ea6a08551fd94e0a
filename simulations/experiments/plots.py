"""The figures of a run: one PNG per sweep (RMSE, analyzer CPU time, messages per user) and
an overview PNG at the default point (the survey's Fig. 7 layout)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .plan import ExperimentPlan, Row, analyzer_time, default_rows, ok_rows, runs_text

__all__ = ["draw_figure", "figure_name", "figure_needs", "figures", "plot_category"]

_SWEEP_LABEL = {
    "epsilon": "ε_c",
    "n": "n (users)",
    "domain": "domain size d",
    "skew": "data skew",
}


#: What an RMSE is counted in, per category.
_RMSE_UNIT = {"counting": "users", "histogram": "users per bin", "sum": "sum of values in [0, 1]"}

_SKIPPED_LABEL = "refused at this point (skipped; drawn at the bottom)"
_WEAKER_LABEL = "proves a larger ε_c than requested"


def _weaker(r: Row) -> bool:
    """Whether the run proved a larger ε_c than the grid point asked for."""
    proven = r.epsilon_central
    return math.isfinite(proven) and proven > r.epsilon * (1.0 + 1e-6)


def _se(r: Row) -> float:
    """The error bar of ``r``'s RMSE: the standard error over its runs, the standard
    deviation of the per-run RMSEs over √runs (NaN when the CSV has no spread)."""
    return r.rmse_sd / math.sqrt(r.repeats) if r.repeats > 0 else math.nan


def _rmse_title(rows: Sequence[Row], unit: str, plan: ExperimentPlan) -> str:
    """The RMSE panel's title: what its error bars are, or why there are none."""
    ran = ok_rows(rows)
    if any(math.isfinite(r.rmse_sd) for r in ran):
        return f"RMSE ({unit}); bars: ±1 s.e. over the {runs_text(plan.repeats)}"
    if plan.repeats < 2:
        return f"RMSE ({unit}); one run per point: no error bars"
    return f"RMSE ({unit}); no error bars: this CSV has no per-run spread (rmse_sd)"


def _timing(rows: Sequence[Row]) -> tuple[str, str, str]:
    """(column, title, axis label) of the timing panel: CPU time, or the wall time of a CSV
    written before the CPU columns existed."""
    column, unit = analyzer_time(rows)
    if unit == "CPU s":
        return column, "analyzer CPU time per run", unit
    return column, "analyzer wall time per run (this CSV has no CPU time; load included)", unit


def _floor(rows: Sequence[Row], sweep: str) -> float | None:
    """Where a skipped point is drawn: a little below the sweep's smallest RMSE."""
    values = [r.rmse for r in rows if r.sweep == sweep and r.status == "ok" and r.rmse > 0]
    return min(values) / 2 if values else None


_WEAKER_MARK: dict[str, Any] = {
    "linestyle": "none",
    "marker": "D",
    "markersize": 9,
    "markerfacecolor": "none",
    "markeredgecolor": "red",
    "markeredgewidth": 1.5,
}


def _marker_handles() -> list[Any]:
    from matplotlib.lines import Line2D

    return [
        Line2D([], [], linestyle="none", marker="v", color="black", markersize=7),
        Line2D([], [], **_WEAKER_MARK),
    ]


def _skew_label(category: str) -> str:
    return "q = P[x = 1]" if category == "counting" else "d / sd of the normal"


def plot_category(rows: Sequence[Row], plan: ExperimentPlan, out_dir: Path) -> list[Path]:
    """One PNG per sweep (RMSE with error bars over the runs, analyzer CPU time, messages per
    user) and an overview PNG at the default point; refused points and points that prove a
    larger ε_c than requested are marked.

    Args:
        rows: the run's rows (a CSV without ``rmse_sd`` or the CPU columns is drawn
            without error bars, and with wall time, each panel saying so).
        plan: the grid the rows are of.
        out_dir: where the PNGs go.

    Returns:
        The PNGs' paths, the sweeps' in the plan's order, then the overview.
    """
    paths = []
    for figure in figures(plan):
        path = out_dir / figure_name(plan, figure)
        path.write_bytes(draw_figure(rows, plan, figure))
        paths.append(path)
    return paths


def figures(plan: ExperimentPlan) -> list[str]:
    """The figures of a run of ``plan``: its sweeps in order, then ``"overview"``.

    Args:
        plan: the grid.

    Returns:
        The figure names :func:`draw_figure` takes.
    """
    return [*plan.sweeps, "overview"]


def figure_name(plan: ExperimentPlan, figure: str) -> str:
    """The PNG file name of one of :func:`figures` (``<category>_<figure>.png``).

    Args:
        plan: the grid.
        figure: a sweep, or ``"overview"``.

    Returns:
        The file name.
    """
    return f"{plan.category}_{figure}.png"


def figure_needs(plan: ExperimentPlan, figure: str, sweep: str, value: float) -> bool:
    """Whether one of :func:`figures` draws the row of a grid point (``sweep``, ``value``).

    A sweep's figure draws that sweep's rows; the overview, the rows at the default point
    of the ε_c sweep (:func:`~simulations.experiments.plan.default_rows`). A figure depends
    on those rows only, so a parallel run draws it as soon as they are in.

    Args:
        plan: the grid.
        figure: a sweep of ``plan``, or ``"overview"``.
        sweep: the row's sweep.
        value: the row's value of that sweep.

    Returns:
        True if ``figure`` draws that row.
    """
    if figure == "overview":
        return sweep == "epsilon" and math.isclose(value, plan.defaults["epsilon"])
    return sweep == figure


def draw_figure(rows: Sequence[Row], plan: ExperimentPlan, figure: str) -> bytes:
    """One figure of :func:`plot_category` as PNG bytes: a task that runs anywhere alike
    (this process or a pool worker), each figure independent of the others.

    A figure is drawn from the rows it shows alone (:func:`figure_needs`), the legend's
    order and styles, the timing column and the error bars' caption included, so passing
    the run's rows or only those draws the same bytes.

    Args:
        rows: the run's rows, or at least those ``figure`` draws, in the run's order.
        plan: the grid the rows are of.
        figure: a sweep of ``plan``, or ``"overview"``.

    Returns:
        The PNG file's bytes.
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if figure_needs(plan, figure, r.sweep, r.value)]
    fig = _overview(mine, plan, plt) if figure == "overview" else _sweep(mine, plan, figure, plt)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def _sweep(rows: Sequence[Row], plan: ExperimentPlan, sweep: str, plt: Any) -> Any:
    """The figure of one sweep: RMSE, analyzer time and messages per user against it."""
    import matplotlib.ticker

    methods = list(dict.fromkeys(r.method for r in rows))
    styles = _styles(rows, methods)
    unit = _RMSE_UNIT.get(plan.category, "")
    time_column, time_title, time_label = _timing(rows)
    rmse_title = _rmse_title(rows, unit, plan)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    floor = _floor(rows, sweep)
    for method in methods:
        mine = [r for r in rows if r.sweep == sweep and r.method == method]
        pts = sorted((r for r in mine if r.status == "ok"), key=lambda r: r.value)
        if pts:
            xs = [r.value for r in pts]
            rmse = [r.rmse for r in pts]
            err = [se if math.isfinite(se := _se(r)) else 0.0 for r in pts]
            axes[0].errorbar(xs, rmse, yerr=err, capsize=3, label=method, **styles[method])
            axes[1].plot(xs, [getattr(r, time_column) for r in pts], **styles[method])
            axes[2].plot(xs, [r.messages_per_user for r in pts], **styles[method])
            weak = [r for r in pts if _weaker(r)]
            if weak:
                axes[0].plot([r.value for r in weak], [r.rmse for r in weak], **_WEAKER_MARK)
        skipped = [r.value for r in mine if r.status != "ok"]
        if skipped and floor is not None:
            axes[0].plot(
                skipped,
                [floor] * len(skipped),
                linestyle="none",
                marker="v",
                markersize=7,
                color=styles[method]["color"],
                # named here when no line of it names it in the legend
                label=None if pts else f"{method} (refused throughout)",
            )
    xlabel = _skew_label(plan.category) if sweep == "skew" else _SWEEP_LABEL[sweep]
    titles = (rmse_title, time_title, "messages per user")
    ylabels = (f"RMSE ({unit})", time_label, "messages per user")
    for ax, title, ylabel in zip(axes, titles, ylabels, strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        if sweep in ("n", "domain"):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xticks(list(plan.sweeps[sweep]))
            ax.set_xticklabels([f"{v:g}" for v in plan.sweeps[sweep]])
        ax.grid(True, alpha=0.3)
        ax.set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += _marker_handles()
    labels += [_SKIPPED_LABEL, _WEAKER_LABEL]
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, frameon=False)
    fig.suptitle(f"{plan.category}: varying {xlabel} ({_fixed(plan, sweep)})", fontsize=10)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


# Matplotlib's default cycle without its gray, which marks the LDP baselines.
_PALETTE = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9", "navy", "olive", "teal")


def _styles(rows: Sequence[Row], methods: list[str]) -> dict[str, dict[str, Any]]:
    family = {r.method: r.family for r in rows}
    out: dict[str, dict[str, Any]] = {}
    ldp_styles = iter([("--", "+"), ("-.", "1"), (":", "2")] * 4)
    for i, m in enumerate(methods):
        if family[m] == "cdp":
            out[m] = {"color": "black", "linestyle": ":", "marker": "x"}
        elif family[m] == "ldp":
            ls, mk = next(ldp_styles)
            out[m] = {"color": "gray", "linestyle": ls, "marker": mk}
        else:
            color = _PALETTE[i % len(_PALETTE)]
            out[m] = {"color": color, "linestyle": "-", "marker": "o", "markersize": 4}
    return out


def _fixed(plan: ExperimentPlan, sweep: str) -> str:
    d = plan.defaults
    parts = [f"n={int(d['n']):g}", f"ε_c={d['epsilon']:g}", f"δ={d['delta']:g}"]
    if plan.category == "histogram":
        parts.append(f"d={int(d['domain'])}")
    parts.append(f"skew={d['skew']:g}")
    keep = [p for p in parts if not p.startswith(_SHORT.get(sweep, "?"))]
    return ", ".join(keep) + f"; {runs_text(plan.repeats)} per point"


_SHORT = {"epsilon": "ε_c", "n": "n=", "domain": "d=", "skew": "skew"}


def _overview(rows: Sequence[Row], plan: ExperimentPlan, plt: Any) -> Any:
    """Bars per method at the default point: RMSE (with its error bar), analyzer time and
    messages per user, each labelled with its value; a refused method keeps its slot, marked
    so; a method that proves a larger ε_c than requested is hatched red and says its ε_c."""
    from matplotlib.patches import Patch

    at = default_rows(rows, plan)  # the rows given are those, from draw_figure
    methods = list(dict.fromkeys(r.method for r in rows))
    styles = _styles(rows, methods)
    time_column, time_title, time_label = _timing(rows)
    unit = _RMSE_UNIT.get(plan.category, "")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    xs = list(range(len(at)))
    panels = (
        ("rmse", _rmse_title(rows, unit, plan), f"RMSE ({unit})"),
        (time_column, time_title, time_label),
        ("messages_per_user", "messages per user", "messages per user"),
    )
    for ax, (attr, title, ylabel) in zip(axes, panels, strict=True):
        tops: list[float] = []
        for x, r in zip(xs, at, strict=True):
            if r.status != "ok":
                ax.annotate(
                    "refused here", (x, 0.04), xycoords=("data", "axes fraction"),
                    rotation=90, ha="center", va="bottom", fontsize=9, color="black",
                    bbox={"boxstyle": "round", "facecolor": "#eeeeee", "edgecolor": "gray"},
                )  # fmt: skip
                continue
            value = float(getattr(r, attr))
            weak = _weaker(r)
            ax.bar(
                x, value, color=styles[r.method]["color"], hatch="//" if weak else None,
                edgecolor="red" if weak else "none", linewidth=1.5 if weak else 0,
            )  # fmt: skip
            top = value
            if attr == "rmse" and math.isfinite(se := _se(r)):
                ax.errorbar(x, value, yerr=se, fmt="none", ecolor="black", capsize=3, lw=1)
                top = value + se
            text = f"{value:.3g}" + (
                f"\nproves ε_c {r.epsilon_central:.3g}" if weak and attr == "rmse" else ""
            )
            ax.annotate(
                text, (x, top), xytext=(0, 2), textcoords="offset points", ha="center",
                va="bottom", fontsize=7, color="red" if weak and attr == "rmse" else "black",
            )  # fmt: skip
            if math.isfinite(top) and top > 0:
                tops.append(top)
        ax.set_xticks(xs)
        ax.set_xlim(-0.6, len(xs) - 0.4)  # a refused method's slot has no bar to fit
        ax.set_xticklabels([r.method for r in at], rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")
        if tops:  # room above the tallest bar for its label
            low = min(float(getattr(r, attr)) for r in ok_rows(at) if getattr(r, attr) > 0)
            ax.set_ylim(low / 3, max(tops) * 6)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    weaker = Patch(facecolor="white", hatch="//", edgecolor="red", linewidth=1.5)
    fig.legend(
        [weaker], [f"{_WEAKER_LABEL} (its ε_c in red)"], loc="lower center", fontsize=8,
        frameon=False,
    )  # fmt: skip
    fig.suptitle(f"{plan.category} at the default point ({_fixed(plan, '')})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
