"""The figures of a run: one PNG per sweep (RMSE, analyzer time, messages per user) and an
overview PNG at the default point (the survey's Fig. 7 layout)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .plan import ExperimentPlan, Row, default_rows, runs_text

__all__ = ["plot_category"]

_SWEEP_LABEL = {
    "epsilon": "ε_c",
    "n": "n (users)",
    "domain": "domain size d",
    "skew": "data skew",
}


#: What an RMSE is counted in, per category.
_RMSE_UNIT = {"counting": "users", "histogram": "users per bin", "sum": "sum of values in [0, 1]"}

_TIME_TITLE = "analyzer time (wall clock; machine load included)"
_SKIPPED_LABEL = "refused at this point (skipped; drawn at the bottom)"
_WEAKER_LABEL = "proves a larger ε_c than requested"


def _weaker(r: Row) -> bool:
    """Whether the run proved a larger ε_c than the grid point asked for."""
    proven = r.epsilon_central
    return math.isfinite(proven) and proven > r.epsilon * (1.0 + 1e-6)


def _floor(rows: Sequence[Row], sweep: str) -> float | None:
    """Where a skipped point is drawn: a little below the sweep's smallest RMSE."""
    values = [r.rmse for r in rows if r.sweep == sweep and r.status == "ok" and r.rmse > 0]
    return min(values) / 2 if values else None


def _marker_handles(plt: Any) -> list[Any]:
    from matplotlib.lines import Line2D

    return [
        Line2D([], [], linestyle="none", marker="v", color="black", markersize=7),
        Line2D(
            [], [], linestyle="none", marker="D", markersize=9, markerfacecolor="none",
            markeredgecolor="red", markeredgewidth=1.5,
        ),
    ]  # fmt: skip


def _skew_label(category: str) -> str:
    return "q = P[x = 1]" if category == "counting" else "d / sd of the normal"


def plot_category(rows: Sequence[Row], plan: ExperimentPlan, out_dir: Path) -> list[Path]:
    """One PNG per sweep (RMSE, analyzer time, messages per user) and an overview PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    paths: list[Path] = []
    methods = list(dict.fromkeys(r.method for r in rows))
    styles = _styles(rows, methods)
    unit = _RMSE_UNIT.get(plan.category, "")
    for sweep in plan.sweeps:
        fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
        floor = _floor(rows, sweep)
        for method in methods:
            mine = [r for r in rows if r.sweep == sweep and r.method == method]
            pts = sorted((r for r in mine if r.status == "ok"), key=lambda r: r.value)
            if pts:
                xs = [r.value for r in pts]
                rmse = [r.rmse for r in pts]
                # ≈ one standard error of an RMSE over r runs: a relative 1/√(2r)
                # (Gaussian errors; conservative where it also averages over entries).
                err = [r.rmse / math.sqrt(2 * r.repeats) if r.repeats else 0.0 for r in pts]
                axes[0].errorbar(xs, rmse, yerr=err, capsize=2, label=method, **styles[method])
                axes[1].plot(xs, [r.analyzer_seconds for r in pts], **styles[method])
                axes[2].plot(xs, [r.messages_per_user for r in pts], **styles[method])
                weak = [r for r in pts if _weaker(r)]
                if weak:
                    axes[0].plot(
                        [r.value for r in weak],
                        [r.rmse for r in weak],
                        linestyle="none",
                        marker="D",
                        markersize=9,
                        markerfacecolor="none",
                        markeredgecolor="red",
                        markeredgewidth=1.5,
                    )
            skipped = [r.value for r in mine if r.status != "ok"]
            if skipped and floor is not None:
                axes[0].plot(
                    skipped,
                    [floor] * len(skipped),
                    linestyle="none",
                    marker="v",
                    markersize=7,
                    color=styles[method]["color"],
                )
        xlabel = _skew_label(plan.category) if sweep == "skew" else _SWEEP_LABEL[sweep]
        titles = (f"RMSE ({unit}), ± ≈1 s.e. over the runs", _TIME_TITLE, "messages per user")
        ylabels = (f"RMSE ({unit})", "seconds", "messages per user")
        for ax, title, ylabel in zip(axes, titles, ylabels, strict=True):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize=10)
            if sweep in ("n", "domain"):
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
                ax.set_xticks(list(plan.sweeps[sweep]))
                ax.set_xticklabels([f"{v:g}" for v in plan.sweeps[sweep]])
            ax.grid(True, alpha=0.3)
            ax.set_yscale("log")
        handles, labels = axes[0].get_legend_handles_labels()
        handles += _marker_handles(plt)
        labels += [_SKIPPED_LABEL, _WEAKER_LABEL]
        fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, frameon=False)
        fig.suptitle(f"{plan.category}: varying {xlabel} ({_fixed(plan, sweep)})", fontsize=10)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
        path = out_dir / f"{plan.category}_{sweep}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    paths.append(_plot_overview(rows, plan, out_dir, plt))
    return paths


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


def _plot_overview(rows: Sequence[Row], plan: ExperimentPlan, out_dir: Path, plt: Any) -> Path:
    pts = [r for r in default_rows(rows, plan) if r.status == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    names = [r.method for r in pts]
    colors = [
        "black"
        if r.family == "cdp"
        else "gray"
        if r.family == "ldp"
        else _PALETTE[i % len(_PALETTE)]
        for i, r in enumerate(pts)
    ]
    for ax, attr, title in zip(
        axes,
        ("rmse", "analyzer_seconds", "messages_per_user"),
        ("RMSE", "analyzer time (s)", "messages per user"),
        strict=True,
    ):
        ax.bar(range(len(pts)), [getattr(r, attr) for r in pts], color=colors)
        ax.set_xticks(range(len(pts)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{plan.category} at the default point ({_fixed(plan, '')})", fontsize=10)
    fig.tight_layout()
    path = out_dir / f"{plan.category}_overview.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
