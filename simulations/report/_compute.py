"""What a report computes that a result does not hold: the collusion scenarios of a
simulated run (as ``esa audit`` computes them) and the amplification curve around a point."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols import BOUNDS, BoundNotApplicable

from ._values import num

__all__ = [
    "AUDIT_MAX_USERS",
    "Curve",
    "amplification_curve",
    "audit_of_run",
    "run_options",
]

#: Above this n the numerical accountants take tens of seconds per scenario: a report of a
#: simulated run this large says the scenarios are not in it rather than computing them.
AUDIT_MAX_USERS = 100_000_000

#: Seconds one bound's curve may take (its points are as many as fit, 5 to ``_MAX_POINTS``).
_SECONDS_PER_BOUND = 2.0
#: Seconds every curve of one report may take together.
_SECONDS_TOTAL = 12.0
_MAX_POINTS = 25
_MIN_POINTS = 5


def run_options(result: Mapping[str, Any]) -> dict[str, float | str]:
    """The protocol options of a run, from its ``parameters`` metadata when it has them.

    Args:
        result: a simulate result; ``parameters`` may hold ``options`` (a mapping) or
            ``option`` (the ``KEY=VALUE`` strings of ``--option``).

    Returns:
        The options (numbers where the value reads as one), empty when none are recorded.
    """
    params = result.get("parameters")
    if not isinstance(params, Mapping):
        return {}
    raw = params.get("options")
    if isinstance(raw, Mapping):
        return {str(k): v for k, v in raw.items()}
    items = params.get("option")
    out: dict[str, float | str] = {}
    if isinstance(items, list | tuple):
        for item in items:
            key, sep, value = str(item).partition("=")
            if not sep:
                continue
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value.strip()
    return out


def _param(result: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` in ``result["parameters"]``, else in ``result``, else None."""
    params = result.get("parameters")
    for source in (params if isinstance(params, Mapping) else {}, result):
        for name in names:
            if source.get(name) is not None:
                return source[name]
    return None


def _same(a: Any, b: Any) -> bool:
    x, y = num(a), num(b)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def audit_of_run(result: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The ``esa audit`` JSON at a simulated run's parameters, or why it is not given.

    The run's protocol is built again from its parameters (``parameters`` metadata first,
    then the result's own fields) and audited without ``--measure``; the audit counts only
    if it rebuilt the same protocol: the same ε_c and ε_l as the run states.

    Args:
        result: a simulate result.

    Returns:
        ``(audit, "")``, or ``(None, reason)`` when the audit was not computed or did not
        rebuild the run's protocol.
    """
    n = int(num(result.get("n")))
    if n > AUDIT_MAX_USERS:
        return None, (
            f"not in this result: n = {n:,} is above {AUDIT_MAX_USERS:.0e}, where the "
            "accountants take too long for a report; run esa audit for these parameters"
        )
    from .._audit import audit  # the attacks' statistics load with it (scipy)

    epsilon = num(_param(result, "epsilon", "epsilon_requested", "epsilon_central"))
    try:
        out = audit(
            protocol_name=str(result.get("protocol")),
            n=n,
            epsilon=epsilon,
            delta=num(_param(result, "delta")),
            domain=int(num(_param(result, "domain"))),
            shufflers=int(num(_param(result, "shufflers"))),
            fake_reports=int(num(_param(result, "fake_reports"))),
            colluding_users=num(_param(result, "colluding_users") or 0),
            colluding_shufflers=int(num(_param(result, "colluding_shufflers") or 0)),
            options=run_options(result),
        )
    except Exception as exc:  # a report says why, it does not fail on an odd result
        return None, f"not computed: the run's protocol could not be audited again ({exc})"
    claim = out.get("protocol_claim", {})
    if not (
        _same(claim.get("epsilon_central"), result.get("epsilon_central"))
        and _same(out.get("epsilon_local"), result.get("epsilon_local"))
    ):
        return None, (
            "not in this result: the protocol built again from the recorded parameters "
            f"states ε_c = {num(claim.get('epsilon_central')):.4g}, ε_l = "
            f"{num(out.get('epsilon_local')):.4g}, not the run's; its options are not all "
            "recorded. Run esa audit with the run's --option flags"
        )
    return out, ""


@dataclass(slots=True)
class Curve:
    """ε_c (or ε_l) of every bound over a grid of ε_l around a chosen point.

    Attributes:
        grid: the ε_l values, increasing.
        series: bound name → ε_c at each grid value (NaN where the bound does not apply).
        families: bound name → the randomizer families it holds for.
        notes: what was left out, one sentence each.
    """

    grid: list[float]
    series: dict[str, list[float]] = field(default_factory=dict)
    families: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _evaluate(f: Callable[[], float]) -> float:
    """One bound's value; NaN where it does not apply or fails numerically."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # a bound sampled far from its range may warn
        try:
            return float(f())
        except (BoundNotApplicable, ValueError, ArithmeticError):
            return math.nan


def amplification_curve(
    *,
    center: float,
    n: int,
    delta: float,
    k: int,
    family: str | None,
    lo: float | None = None,
    hi: float | None = None,
) -> Curve:
    """ε_c as a function of ε_l under every bound of ``family``, around ``center``.

    The bounds are evaluated as ``esa amplify`` evaluates them
    (``bound.epsilon_central(epsilon_local=, n=, delta=, k=)``). Each bound gets as many
    grid points as fit in about two seconds (the numerical accountants are slow at large n).

    Args:
        center: the chosen ε_l; the grid spans ``[center/4, 2·center]`` unless given.
        n: users.
        delta: δ.
        k: the domain of k-ary randomized response for the krr bounds.
        family: ``"krr"`` or ``"generic"`` to keep the bounds that hold for it; None for all.
        lo: the grid's smallest ε_l.
        hi: the grid's largest ε_l.

    Returns:
        The curve (no grid at all when ``center`` is not a positive finite number).
    """
    if not (math.isfinite(center) and center > 0):
        return Curve(grid=[], notes=[f"no curve: ε_l = {center:g} is not a finite positive ε"])
    lo = center / 4 if lo is None else lo
    hi = center * 2 if hi is None else hi
    bounds = [b for b in BOUNDS.values() if family is None or b.applies_to(family)]
    full = sorted({*np.geomspace(lo, hi, _MAX_POINTS).tolist(), center})
    curve = Curve(grid=full)
    started = time.perf_counter()
    for b in bounds:
        curve.families[b.name] = sorted(b.families)
        if time.perf_counter() - started > _SECONDS_TOTAL:
            curve.notes.append(f"{b.name}: left out (the report's time for curves ran out)")
            continue
        t0 = time.perf_counter()

        def at(eps: float, b: Any = b) -> float:
            return _evaluate(lambda: b.epsilon_central(epsilon_local=eps, n=n, delta=delta, k=k))

        first = at(center)
        cost = max(time.perf_counter() - t0, 1e-6)
        points = int(min(_MAX_POINTS, max(_MIN_POINTS, _SECONDS_PER_BOUND / cost)))
        if cost > _SECONDS_PER_BOUND:
            points = 1
        if points >= _MAX_POINTS:
            chosen = full
        elif points == 1:
            chosen = [center]
            curve.notes.append(f"{b.name}: only the chosen point ({cost:.1f} s a value at n={n:,})")
        else:
            chosen = sorted({*np.geomspace(lo, hi, points).tolist(), center})
        values = {center: first}
        for eps in chosen:
            if eps not in values:
                values[eps] = at(eps)
        curve.series[b.name] = [values.get(eps, math.nan) for eps in full]
        method, tolerance = b.method_at(n)
        if method == "certified" and any(math.isfinite(v) for v in values.values()):
            curve.notes.append(
                f"{b.name}: at n={n:,} a certified upper bound, at most {tolerance:.1%} above "
                "the exact ε_c"
            )
    return curve
