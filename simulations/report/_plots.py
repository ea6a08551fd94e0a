"""The report's plots, drawn with matplotlib and inlined as SVG (text drawn as paths, so the
page needs no font)."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

__all__ = ["curve_svg", "estimate_svg", "privacy_svg", "sweep_svg"]

_salt = itertools.count()


def _svg(fig: Figure, label: str) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, ids unique in the page)."""
    buf = io.StringIO()
    # A distinct hash salt per figure: the ids of two inline SVGs must not collide.
    with mpl.rc_context({"svg.fonttype": "path", "svg.hashsalt": f"esa-report-{next(_salt)}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    aria = label.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return text.replace("<svg ", f'<svg class="plot" role="img" aria-label="{aria}" ', 1)


def _finite(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(x) and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _positive(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """The finite points with x, y > 0 (what a log-log axis can show)."""
    fx, fy = _finite(xs, ys)
    pairs = [(x, y) for x, y in zip(fx, fy, strict=True) if x > 0 and y > 0]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def estimate_svg(estimate: Sequence[float], truth: Sequence[float], std: Sequence[float]) -> str:
    """Estimate per entry with ±2 expected std error bars, and the truth.

    Args:
        estimate: the analyzer's estimate (finite entries are drawn).
        truth: the true statistic, entry by entry.
        std: the stated expected std of each entry.

    Returns:
        The ``<svg>`` element.
    """
    d = len(estimate)
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.add_subplot()
    xs = list(range(d))
    err = [2 * s if math.isfinite(s) else 0.0 for s in std]
    pts = [(x, e, r) for x, e, r in zip(xs, estimate, err, strict=True) if math.isfinite(e)]
    ax.errorbar(
        [p[0] for p in pts],
        [p[1] for p in pts],
        yerr=[p[2] for p in pts],
        fmt="o",
        ms=4 if d <= 64 else 2,
        capsize=3 if d <= 64 else 0,
        color="#1f5fa8",
        ecolor="#7aa6d8",
        label="estimate ± 2 expected std",
    )
    tx, ty = _finite(xs, truth)
    ax.plot(tx, ty, "x", color="#c0392b", ms=6 if d <= 64 else 3, label="truth")
    ax.set_xlabel("entry" if d > 1 else "")
    if d == 1:
        ax.set_xticks([0])
        ax.set_xlim(-1, 1)
    ax.set_ylabel("value")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _svg(fig, "estimate against the truth, with ±2 expected std error bars")


def privacy_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    """ε per collusion scenario: the upper bound as a bar (∞ hatched to the edge), the lower
    bound as a marker.

    Args:
        rows: ``{"scenario", "upper", "lower"}`` with floats (NaN: no value).

    Returns:
        The ``<svg>`` element.
    """
    names = [str(r["scenario"]) for r in rows]
    upper = [float(r["upper"]) for r in rows]
    lower = [float(r["lower"]) for r in rows]
    finite = [v for v in upper + lower if math.isfinite(v)]
    edge = 1.15 * max(finite) if finite else 1.0
    fig = Figure(figsize=(7.5, 0.55 * len(rows) + 1.2))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    for y, u in zip(ys, upper, strict=True):
        if math.isinf(u):
            ax.barh(y, edge, color="#f3d9d5", hatch="//", edgecolor="#c0392b")
            ax.text(edge, y, " ∞", va="center", ha="left", fontsize=10, color="#c0392b")
        elif math.isfinite(u):
            ax.barh(y, u, color="#9cc3e6", edgecolor="#1f5fa8")
            ax.text(u, y, f" {u:.3g}", va="center", ha="left", fontsize=8)
    lx, ly = _finite(lower, [float(y) for y in ys])
    if lx:
        ax.plot(lx, ly, "D", color="#222", ms=6, label="lower bound (at δ)")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlim(0, edge * 1.12)
    ax.set_xlabel("ε (upper bound: bar; ∞: no finite bound)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "privacy under every collusion scenario")


def curve_svg(
    grid: Sequence[float],
    series: Mapping[str, Sequence[float]],
    points: Sequence[tuple[str, float, float]],
    *,
    target: float | None = None,
) -> str:
    """ε_c against ε_l per bound, with the chosen point(s) marked.

    Args:
        grid: ε_l values.
        series: bound name → ε_c at each grid value (NaN: the bound does not apply).
        points: ``(label, ε_l, ε_c)`` to mark.
        target: a requested ε_c drawn as a horizontal line.

    Returns:
        The ``<svg>`` element.
    """
    fig = Figure(figsize=(7.5, 4.0))
    ax = fig.add_subplot()
    for name, ys in series.items():
        xs, vs = _positive(grid, ys)
        if not xs:
            continue
        style: dict[str, Any] = {"color": "#888", "ls": ":"} if name == "local_dp" else {}
        ax.plot(xs, vs, marker=".", ms=3, lw=1.4, label=name, **style)
    for label, x, y in points:
        if math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0:
            ax.plot([x], [y], "*", ms=15, color="#d35400", mec="#222", zorder=5)
            if len(points) == 1:  # several stars are named by their curves
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(8, 6), fontsize=8)
    if target is not None and math.isfinite(target):
        ax.axhline(target, color="#d35400", lw=0.8, ls="--", label=f"requested ε_c = {target:g}")
    ax.set_yscale("log")
    ax.set_xlabel("ε_l (local)")
    ax.set_ylabel("ε_c (central, after the shuffle)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=7)
    return _svg(fig, "amplification curve: ε_c as a function of ε_l")


def sweep_svg(sweep: str, methods: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
    """RMSE measured (solid, with error bars) and expected (dashed) against one swept
    parameter per method; points that prove a larger ε_c than requested are ringed red.

    Args:
        sweep: the swept parameter's name.
        methods: method → ``{"x", "rmse", "expected"}`` lists, and optionally ``"se"`` (the
            error bar of each RMSE, NaN: none) and ``"weaker"`` (1.0 where the point proves
            a larger ε_c than requested, else 0.0).

    Returns:
        The ``<svg>`` element.
    """
    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.add_subplot()
    colors = mpl.colormaps["tab10"]
    weak_drawn = False
    for i, (name, s) in enumerate(methods.items()):
        c = colors(i % 10)
        xs, ys = _positive(s["x"], s["rmse"])
        if xs:
            se = dict(zip(s["x"], s.get("se") or [math.nan] * len(s["x"]), strict=True))
            err = [se[x] if math.isfinite(se[x]) else 0.0 for x in xs]
            ax.errorbar(xs, ys, yerr=err, fmt="o-", color=c, label=name, ms=4, capsize=3)
            flags = s.get("weaker") or [0.0] * len(s["x"])
            weak = {x for x, w in zip(s["x"], flags, strict=True) if w}
            marked = [(x, y) for x, y in zip(xs, ys, strict=True) if x in weak]
            if marked:
                label = None if weak_drawn else "proves a larger ε_c than requested"
                ax.plot([p[0] for p in marked], [p[1] for p in marked], "D", ms=9, mfc="none",
                        mec="red", mew=1.5, label=label)  # fmt: skip
                weak_drawn = True
        xs, ys = _positive(s["x"], s["expected"])
        if xs:
            ax.plot(xs, ys, "--", color=c, lw=0.9, alpha=0.8)
    if sweep in ("n", "domain"):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        values = sorted({x for s in methods.values() for x in s["x"] if math.isfinite(x) and x > 0})
        if values:  # the grid's own values, not only the decades between them
            ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.set_yscale("log")
    ax.set_xlabel(sweep)
    ax.set_ylabel("RMSE (dashed: expected)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig, f"RMSE against {sweep}")
