"""The composition plot of docs/privacy.md: k-RR at ε_c = 1 per epoch over T = 1..365 epochs.

Regenerate with ``python -m simulations._plots_compose docs`` (about a minute).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from protocols import ProtocolSpec, build_protocol
from protocols.accounting import compose_protocols, kov_epsilon

#: The configuration plotted: ``esa simulate --protocol hist_kr --epsilon 1 --delta 1e-6
#: --n 100000 --domain 16``, composed at δ_total = 10^-3.
N, DOMAIN, EPSILON, DELTA, DELTA_TOTAL = 100_000, 16, 1.0, 1e-6, 1e-3
EPOCHS = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 250, 300, 365)


def curves() -> dict[str, list[float]]:
    """ε_total after each T of :data:`EPOCHS`: PLD, optimal (ε, δ)-point, advanced, naive."""
    protocol = build_protocol(
        "hist_kr", ProtocolSpec(epsilon=EPSILON, delta=DELTA, n=N, domain=DOMAIN)
    )
    eps_c = protocol.privacy.epsilon_central
    pld, kov, adv = [], [], []
    for t in EPOCHS:
        pld.append(compose_protocols([(protocol, t)], delta=DELTA_TOTAL).guarantee.epsilon_total)
        kov.append(kov_epsilon(eps_c, DELTA, t, DELTA_TOTAL))
        slack = DELTA_TOTAL - t * DELTA  # advanced composition of the T (ε_c, δ) points
        adv.append(math.sqrt(2 * t * math.log(1 / slack)) * eps_c + t * eps_c * math.expm1(eps_c))
    return {
        "pld": pld,
        "kov": kov,
        "advanced": adv,
        "naive": [t * eps_c for t in EPOCHS],
    }


def main(out_dir: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = curves()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    t = np.array(EPOCHS)
    ax.plot(t, c["naive"], "k--", label="naive (Tε)")
    ax.plot(t, c["advanced"], "C3-.", label="advanced composition")
    ax.plot(t, c["kov"], "C1:", label="optimal composition of the (ε, δ) points")
    ax.plot(t, c["pld"], "C0-o", ms=3, label="PLD of the dominating pair (esa compose)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("epochs T")
    ax.set_ylabel(f"ε_total at δ = {DELTA_TOTAL:g}")
    ax.set_title(f"hist_kr, ε_c = {EPSILON:g} per epoch (δ = {DELTA:g}), n = {N}, d = {DOMAIN}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(out_dir) / "privacy_composition.png"
    fig.savefig(path, dpi=120)
    for name, values in c.items():
        print(name, " ".join(f"{v:.3g}" for v in values))
    print(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs")
