"""Check an independent implementation against the conformance kit (``esa vectors --out DIR``).

This file is a worked example of what another implementation does with the kit: it implements,
from their published statements and with nothing but the standard library, two things the
vectors pin, and compares every matching vector:

* the fixed-size padding of report payloads (``padding.json``): a big-endian u16 length, the
  payload, zero bytes up to the size; every ``invalid`` case must be refused;
* Theorem 3.1 of Balle, Bell, Gascón and Nissim (Crypto'19) for k-ary randomized response, and
  the trivial "local DP" bound, forward (ε_l → ε_c) and inverse (ε_c → ε_l), at the kit's
  relative tolerance (``accounting.json``).

Usage::

    esa vectors --out kit
    python docs/examples/check_amplification.py kit

It prints one line per family of checks and exits 1 on the first disagreement.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def pad(payload: bytes, size: int) -> bytes:
    """u16 big-endian length ‖ payload ‖ zeros: 2 + size bytes."""
    if len(payload) > size:
        raise ValueError("payload longer than size")
    return len(payload).to_bytes(2, "big") + payload + bytes(size - len(payload))


def unpad(padded: bytes, size: int) -> bytes:
    """The inverse of pad, refusing anything pad cannot produce."""
    if len(padded) != 2 + size:
        raise ValueError("wrong length")
    length = int.from_bytes(padded[:2], "big")
    if length > size or any(padded[2 + length :]):
        raise ValueError("bad length prefix or non-zero padding")
    return padded[2 : 2 + length]


def krr_lambda(eps_l: float, k: int) -> float:
    """Probability that k-RR reports a uniform value instead of the true one."""
    return k / (math.exp(eps_l) + k - 1)


def balle_forward(eps_l: float, n: int, delta: float, k: int) -> float | None:
    """ε_c of n shuffled ε_l-k-RR reports (Balle et al., Thm 3.1); None where it does not hold.

    Never above ε_l: the shuffle is post-processing of ε_l-LDP reports.
    """
    if n < 2:
        return None
    lam = krr_lambda(eps_l, k)
    eps_c = max(math.sqrt(14 * k * math.log(2 / delta) / ((n - 1) * lam)), 27 * k / ((n - 1) * lam))
    return min(eps_l, eps_c) if eps_c <= 1 else None


def balle_inverse(eps_c: float, n: int, delta: float, k: int) -> float | None:
    """Largest ε_l whose shuffle the theorem proves (ε_c, δ)-DP; None where it cannot."""
    if n < 2 or eps_c > 1:
        return None
    lam = max(14 * k * math.log(2 / delta) / ((n - 1) * eps_c**2), 27 * k / ((n - 1) * eps_c))
    if lam >= 1:
        return None
    return math.log(k / lam - k + 1)


def check_padding(kit: Path) -> int:
    doc = json.loads((kit / "padding.json").read_text())
    for case in doc["valid"]:
        payload, size = bytes.fromhex(case["payload"]), case["size"]
        if pad(payload, size).hex() != case["padded"] or unpad(pad(payload, size), size) != payload:
            raise SystemExit(f"padding: disagree on {case}")
    for case in doc["invalid"]:
        try:
            unpad(bytes.fromhex(case["padded"]), case["size"])
        except ValueError:
            continue
        raise SystemExit(f"padding: accepted an invalid padding: {case['why']}")
    return len(doc["valid"]) + len(doc["invalid"])


def check_amplification(kit: Path) -> int:
    doc = json.loads((kit / "accounting.json").read_text())
    tol = doc["rel_tol"]
    checked = 0
    for v in doc["amplification"]:
        if v["bound"] not in ("thm4_balle", "local_dp"):
            continue
        forward = v["direction"] == "forward"
        if v["bound"] == "local_dp":
            mine: float | None = v["epsilon"]
        elif forward:
            mine = balle_forward(v["epsilon"], v["n"], v["delta"], v["k"])
        else:
            mine = balle_inverse(v["epsilon"], v["n"], v["delta"], v["k"])
        theirs = v["value"]
        if (mine is None) != (theirs is None) or (
            mine is not None and not math.isclose(mine, theirs, rel_tol=tol)
        ):
            raise SystemExit(f"amplification: mine {mine} against {theirs} for {v}")
        checked += 1
    return checked


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("Usage::")[1].strip(), file=sys.stderr)
        return 2
    kit = Path(argv[1])
    manifest = json.loads((kit / "MANIFEST.json").read_text())
    print(f"kit v{manifest['kit_version']} of esa-shuffle {manifest['version']}")
    print(f"padding: {check_padding(kit)} cases agree")
    print(f"amplification (thm4_balle, local_dp): {check_amplification(kit)} values agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
