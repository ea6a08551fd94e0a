"""Plots of docs/privacy.md: ε_c against ε_l per bound, and ε per collusion scenario.

Regenerate with ``python -m simulations._plots_privacy docs`` (about a minute and a half on 2
cores; progress lines on stderr every few seconds).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import contextlib

import matplotlib.pyplot as plt
import numpy as np

from protocols import (
    BOUNDS,
    KRR_BLANKET_BOUND,
    BoundNotApplicable,
    CollusionConfig,
    collusion_scenarios,
)

__all__ = ["plot_amplification", "plot_collusion", "plot_measured"]

DELTA = 1e-6
CURVES = [
    ("thm2_fmt_closed_form", 2, "FMT'21 closed form (Thm 2)"),
    ("thm3_cheu", 2, "Cheu et al. (Thm 3, binary RR)"),
    ("thm4_balle", 2, "Balle et al. blanket (Thm 4, k=2)"),
    ("fmt21_numerical", 2, "FMT'21 numerical (generic)"),
    ("fmt23_stronger_clone", 2, "FMT'23 stronger clone (k-RR)"),
    ("binary_rr_exact", 2, "exact, binary RR"),
    ("krr_blanket_numerical", 16, "numerical blanket, 16-RR"),
    ("fmt23_stronger_clone", 16, "FMT'23 stronger clone, 16-RR"),
]


@contextlib.contextmanager
def _progress(what: str, total: int) -> Iterator[Callable[[], None]]:
    """Plain progress lines on stderr every few seconds (``plots: WHAT, P % (…)``)."""
    from ._common import LineProgress

    line = LineProgress(prefix="plots", unit="steps")
    task = line.add_task(what, total=total)
    print(f"plots: {what} ({total} steps)", file=sys.stderr, flush=True)
    with line.heartbeat():
        yield lambda: line.advance(task)


def _label_bars(ax: Any, bars: Any) -> None:
    """Each bar's value above it (``inf`` is drawn as no bar, and labelled so)."""
    for bar in bars:
        height = bar.get_height()
        text = f"{height:.3g}" if math.isfinite(height) else "∞"
        y = height if math.isfinite(height) else 0.0
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, y),
            ha="center",
            va="bottom",
            fontsize=7,
            xytext=(0, 1),
            textcoords="offset points",
        )


def _curve(name: str, k: int, n: int, eps_l: np.ndarray) -> np.ndarray:
    bound = KRR_BLANKET_BOUND if name == KRR_BLANKET_BOUND.name else BOUNDS[name]
    out = np.full(eps_l.shape, np.nan)
    for i, e in enumerate(eps_l):
        with contextlib.suppress(BoundNotApplicable):
            out[i] = bound.epsilon_central(epsilon_local=float(e), n=n, delta=DELTA, k=k)
    return out


def plot_amplification(path: Path) -> None:
    """ε_c vs ε_l, one panel per n ∈ {10^3, …, 10^6}, one line per bound (δ = 10^-6)."""
    eps_l = np.linspace(0.25, 8.0, 24)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), sharex=True)
    with _progress(f"{path.name}: bounds", 4 * len(CURVES)) as advance:
        for ax, n in zip(axes.ravel(), (10**3, 10**4, 10**5, 10**6), strict=True):
            for name, k, label in CURVES:
                advance()
                if name == KRR_BLANKET_BOUND.name and n > 10**5:
                    continue  # ~2 s per point at n = 10^6; the stronger clone line is close
                style = "--" if k == 16 else "-"
                ax.plot(eps_l, _curve(name, k, n, eps_l), style, label=label)
            _amplification_axes(ax, n, eps_l)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Privacy amplification by shuffling: every bound, δ = 10^-6")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _amplification_axes(ax: Any, n: int, eps_l: np.ndarray) -> None:
    """One panel of :func:`plot_amplification`: the diagonal, scales and labels."""
    ax.plot(eps_l, eps_l, ":", color="grey", label="no amplification (ε_c = ε_l)")
    ax.set_title(f"n = 10^{round(math.log10(n))}")
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 10)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel("local ε_l")
    ax.set_ylabel("central ε_c (δ = 1e-6)")


def plot_collusion(path: Path) -> None:
    """ε per collusion scenario for binary RR and 16-RR (n = 10^4, ε_l = 4, m = 3, n_r = 100)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, k in zip(axes, (2, 16), strict=True):
        cfg = CollusionConfig(
            family="krr",
            k=k,
            n=10_000,
            epsilon_local=4.0,
            delta=DELTA,
            shufflers=3,
            fake_reports=100,
            colluding_users=1000,
            colluding_shufflers=1,
        )
        rows = collusion_scenarios(cfg)
        x = np.arange(len(rows))
        ax.bar(x, [r.epsilon_upper for r in rows], label="proven upper bound (tight accountant)")
        murs = [r.murs_formula if r.murs_formula is not None else np.nan for r in rows]
        ax.plot(x, murs, "o", color="C3", label="MURS's formula √(14 ln(2/δ)/β)")
        ax.set_xticks(x, [r.scenario for r in rows], rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title("binary RR (k = 2)" if k == 2 else f"{k}-ary RR")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        for xi, r in zip(x, rows, strict=True):
            ax.annotate(f"{r.epsilon_upper:.3g}", (xi, r.epsilon_upper), ha="center", va="bottom",
                        fontsize=7)  # fmt: skip
    axes[0].set_ylabel("ε of one honest user (δ = 1e-6)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "ε per collusion scenario: n = 10^4, ε_l = 4, m = 3 shufflers × 100 fakes, "
        "1000 colluding users, 1 colluding shuffler"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_measured(path: Path, *, trials: int = 600) -> None:
    """Proven upper vs measured lower ε per scenario on real pipeline runs (small n).

    ``cnt_rr`` with ε_l = 3, n = 40, δ = 10^-3, m = 2 shufflers × 5 fakes, 10 colluding
    users, 1 colluding shuffler; ``trials`` ideal-crypto runs per hypothesis and scenario.
    """
    from protocols import CntRR

    from ._attacks import AttackSetup, distinguishing_attack

    n, eps_l, delta, m, r = 40, 3.0, 1e-3, 2, 5
    proto = CntRR(epsilon_local=eps_l, n=n, delta=delta)
    cfg = CollusionConfig(
        family="krr", k=2, n=n, epsilon_local=eps_l, delta=delta, shufflers=m,
        fake_reports=r, colluding_users=10, colluding_shufflers=1,
    )  # fmt: skip
    rows = collusion_scenarios(cfg)
    with _progress(f"{path.name}: attacks", len(rows)) as advance:
        lower: list[float] = []
        for sc in rows:
            setup = AttackSetup(
                n=n,
                shufflers=m,
                fake_reports=r,
                colluding_users=sc.colluding_users,
                colluding_shufflers=sc.colluding_shufflers,
                delta=delta,
                trials=trials,
                seed=5,
            )
            lower.append(distinguishing_attack(proto, setup).epsilon_lower)
            advance()
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    uppers = ax.bar(x - 0.2, [sc.epsilon_upper for sc in rows], 0.4, label="proven upper bound")
    lowers = ax.bar(
        x + 0.2, lower, 0.4, label="measured lower bound (95 %, attack on pipeline runs)"
    )
    ax.set_xticks(x, [sc.scenario for sc in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ε of one honest user (δ = 1e-3)")
    ax.set_title(
        f"cnt_rr, n = {n}, ε_l = {eps_l:g}, m = {m} × {r} fakes, 10 colluding users, "
        f"1 colluding shuffler\n{trials} runs per hypothesis and scenario",
        fontsize=10,
    )
    _label_bars(ax, uppers)
    _label_bars(ax, lowers)
    ax.set_ylim(0, 1.3 * max([*(sc.epsilon_upper for sc in rows), *lower]))
    ax.legend(fontsize=8, loc="upper center", ncol=2, frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    out = Path(args[0] if args else "docs")
    out.mkdir(parents=True, exist_ok=True)
    if "--collusion-only" not in argv:
        plot_amplification(out / "privacy_amplification.png")
    plot_collusion(out / "privacy_collusion.png")
    plot_measured(out / "privacy_measured.png")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
