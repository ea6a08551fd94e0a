"""Generate ``accounting.json``: pinned privacy accounting and protocol parameters.

Run from the repository root and commit the JSON it writes::

    python tests/vectors/generate_accounting.py

Unlike the format vectors of ``generate.py``, these are not checked against an independent
implementation: they pin what this one derives, so that another implementation of the
amplification bounds or of a protocol's parameter derivation can be compared with it, and so
that a change to an accountant here cannot pass unnoticed (``tests/test_accounting_vectors.py``
recomputes every entry). Changing an entry is a deliberate act: regenerate, and say in the
commit which accountant changed and why.

Entries:
* ``amplification``: every registered bound, forward (ε_l → ε_c) and inverse (ε_c → ε_l),
  over a small grid of n, δ and, for bounds of k-ary randomized response, k. ``value`` is
  null where the bound does not apply (``reason`` says why, as ``esa amplify`` does).
* ``protocols``: every registered protocol built from a target (ε_c, δ, n, d): the ε_c, ε_l
  and δ it proves, its bound, messages per user and message size; or ``error``, the type of
  the error refusing that configuration (outside the paper's validity range).

Floats are written with Python's ``repr`` (shortest round-trip); infinity as the string
"inf". Comparisons use the relative tolerance stored in the file: the numerical accountants
(bisection, FFT) may differ in their last digits across numpy/scipy builds. For the same
reason a ``bound`` (which names the accountant and quotes some of its numbers) is compared
with its numbers masked.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "simulations" / "conformance" / "vectors"
OUT = HERE / "accounting.json"

#: Relative tolerance the test applies to every float (see the module doc).
REL_TOL = 1e-6

FORWARD_GRID = [  # (ε_l, n, δ)
    (eps_l, n, delta)
    for eps_l in (0.25, 1.0, 4.0)
    for n in (1_000, 100_000)
    for delta in (1e-6, 1e-9)
]
INVERSE_GRID = [  # (ε_c, n, δ)
    (eps_c, n, delta) for eps_c in (0.5, 1.0) for n in (10_000, 1_000_000) for delta in (1e-6,)
]
KRR_DOMAINS = (2, 16)

PROTOCOL_SIZES = (20_000, 200_000)  # n of every protocol's entries (ε_c = 1, δ = 1e-6, d = 16)
#: Extra entries at n = 2·10^4: robust counters at γ = 1/2, Cnt_SGM's Split-Mix encoding,
#: RSum_PURE's even split of ε.
EXTRA_OPTIONS: dict[str, list[dict[str, float | str]]] = {
    "cnt_bn": [{"gamma": 0.5}],
    "cnt_sgm": [{"gamma": 0.5}, {"encoding": "splitmix"}, {"encoding": "splitmix", "gamma": 0.5}],
    "put": [{"encoding": "splitmix"}],
    "aut": [{"gamma": 0.5}],
    "rsum_pure": [{"allocation": "even"}],  # the default is "optimal"
}
#: Extra entries pinned at a smaller n, where their calibration is the test's cost: RSum_PURE's
#: tuned allocation calibrates 8 046 messages per user at n = 2·10^4 (~4 CPU-min), 1 908 at 2·10^3
#: (~1 CPU-min).
EXTRA_AT_SMALL_N: dict[str, list[dict[str, float | str]]] = {
    "rsum_pure": [{"allocation": "tuned"}],
}
SMALL_N = 2_000
MURS_FAKES = 300  # MURS refuses to run without fakes
SLOW_AT_LARGE_N = {"rsum_pure"}  # its calibration takes ~20 s at n = 2·10^5


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def amplification() -> list[dict[str, Any]]:
    from protocols import BOUNDS, BoundNotApplicable

    rows: list[dict[str, Any]] = []
    for bound in BOUNDS.values():
        domains = KRR_DOMAINS if "generic" not in bound.families else (2,)
        for direction, grid in (("forward", FORWARD_GRID), ("inverse", INVERSE_GRID)):
            for eps, n, delta in grid:
                for k in domains:
                    value: float | None
                    reason = None
                    try:
                        if direction == "forward":
                            value = bound.epsilon_central(epsilon_local=eps, n=n, delta=delta, k=k)
                        else:
                            value = bound.epsilon_local(epsilon_central=eps, n=n, delta=delta, k=k)
                    except BoundNotApplicable as exc:
                        value, reason = None, str(exc)
                    rows.append(
                        {
                            "bound": bound.name,
                            "direction": direction,
                            "epsilon": eps,
                            "n": n,
                            "delta": delta,
                            "k": k,
                            "value": value,
                            "reason": reason,
                        }
                    )
    return rows


def protocol_spec_rows() -> list[dict[str, Any]]:
    """The (protocol, spec) pairs the file pins, without their outputs."""
    from protocols import protocol_names

    rows = []
    for name in protocol_names():
        sizes = PROTOCOL_SIZES[:1] if name in SLOW_AT_LARGE_N else PROTOCOL_SIZES
        configs: list[tuple[int, dict[str, float | str]]] = [(n, {}) for n in sizes]
        configs += [(PROTOCOL_SIZES[0], dict(o)) for o in EXTRA_OPTIONS.get(name, [])]
        configs += [(SMALL_N, dict(o)) for o in EXTRA_AT_SMALL_N.get(name, [])]
        for n, options in configs:
            rows.append(
                {
                    "protocol": name,
                    "epsilon": 1.0,
                    "delta": 1e-6,
                    "n": n,
                    "domain": 16,
                    "fake_reports": MURS_FAKES if name == "murs" else 0,
                    "options": options,
                }
            )
    return rows


def derive(row: dict[str, Any]) -> dict[str, Any]:
    """What this implementation derives for one pinned spec (``row`` holds the spec)."""
    from protocols import ParameterError, ProtocolSpec, build_protocol

    spec = ProtocolSpec(
        epsilon=row["epsilon"],
        delta=row["delta"],
        n=row["n"],
        domain=row["domain"],
        fake_reports=row["fake_reports"],
        options=row["options"],
    )
    try:
        protocol = build_protocol(row["protocol"], spec)
        privacy = protocol.privacy
    except ParameterError as exc:
        return {"error": type(exc).__name__}
    return {
        "epsilon_central": _number(privacy.epsilon_central),
        "epsilon_local": _number(privacy.epsilon_local),
        "proven_delta": privacy.delta,
        "bound": privacy.bound,
        "messages_per_user": protocol.messages_per_user,
        "message_size": protocol.message_size,
    }


def build() -> dict[str, Any]:
    return {
        "description": __doc__.split("\n\n")[0] + " See tests/vectors/generate_accounting.py.",
        "rel_tol": REL_TOL,
        "amplification": amplification(),
        "protocols": [{**row, **derive(row)} for row in protocol_spec_rows()],
    }


def main() -> int:
    sys.path.insert(0, str(ROOT))
    OUT.write_text(json.dumps(build(), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
