"""The collusion audit behind ``esa audit`` (and the HTML report of a run): the ε a user keeps
under every collusion scenario, as proven upper bounds and lower bounds at the same δ (the
protocol's own exact ones, or measured by distinguishing attacks on real pipeline runs)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import esa
from protocols import (
    BOUNDS,
    BoundMethod,
    CollusionConfig,
    ParameterError,
    ProtocolSpec,
    build_protocol,
    collusion_scenarios,
    protocol_names,
    resolve_colluding_users,
)
from protocols.accounting import scenario_epsilon_over_epochs

from ._attacks import AttackSetup, _PendingAttack, protocol_family
from ._common import (
    UsageError,
)

__all__ = ["audit"]


def _claim_without_fakes(name: str, spec: ProtocolSpec, protocol: Any) -> float | None:
    """The protocol's claimed ε_c when configured with no fakes: what it still proves once
    colluding shufflers remove theirs (None if it does not run without fakes, as MURS).

    The claim is about the randomizer the protocol is built with. A protocol that sizes its
    randomizer with its fakes in mind (SLH picks a larger ε_l when fakes join the blanket)
    is a different mechanism when built again without them, and that one's claim says
    nothing about the deployed one: then None too. "Same randomizer" is checked as the same
    ε_l, messages per user and share layout."""
    privacy = protocol.privacy
    if privacy.delta > spec.delta:  # proven only at a larger δ than the audit's
        return None
    if not spec.fake_reports:
        return float(privacy.epsilon_central)
    try:
        bare = build_protocol(name, dataclasses.replace(spec, fake_reports=0))
    except ParameterError:
        return None
    same = (
        bare.privacy.delta <= spec.delta
        and bare.privacy.epsilon_local == privacy.epsilon_local
        and bare.messages_per_user == protocol.messages_per_user
        and bare.share_spec == protocol.share_spec
    )
    return float(bare.privacy.epsilon_central) if same else None


def _honest_lower(protocol: Any) -> Any:
    """The protocol's own lower bound at δ, ``honest_users_lower(h, fakes=, delta=)``, as
    the collusion audit calls it (``None`` if the protocol has none)."""
    method = getattr(protocol, "honest_users_lower", None)
    if method is None:
        return None

    def lower(users: int, fakes: int, delta: float) -> tuple[float, str] | None:
        result: tuple[float, str] | None = method(users, fakes=fakes, delta=delta)
        return result

    return lower


def audit(
    *,
    protocol_name: str,
    n: int,
    epsilon: float,
    delta: float,
    domain: int,
    shufflers: int,
    fake_reports: int,
    colluding_users: float,
    colluding_shufflers: int,
    measure: bool = False,
    trials: int = 1000,
    seed: int = 0,
    on_scenario: Callable[[str, int], None] | None = None,
    options: dict[str, float | str] | None = None,
    confidence: float = 0.95,
    epochs: int | None = None,
    workers: int | None = None,
    cluster: str | Executor | Any | None = None,
) -> dict[str, Any]:
    """Every scenario's bounds as the JSON ``esa audit`` prints.

    Both columns are at the audit's δ: ``epsilon_upper`` a proven upper bound (a pure-DP
    bound holds at every δ), ``epsilon_lower`` a lower bound — the larger of
    ``epsilon_lower_exact``, the protocol's own (``honest_users_lower``, exact for one
    neighbouring pair, certain), and, with ``measure``, ``epsilon_lower_measured``, the
    distinguishing attack's, a statistical bound. The measured bounds of all s scenarios
    hold together with probability ``confidence``: each attack runs at 1 − (1 −
    confidence)/s (Bonferroni), so a lower bound above the upper bound of the same
    scenario — a contradiction, listed in ``violations`` — is a false alarm with
    probability at most 1 − ``confidence`` when every upper bound is right.

    With ``epochs`` = T, each scenario also gets ``epsilon_upper_epochs``: its ε after T
    epochs at ``delta_total`` = min(0.5, 2·T·δ), the smallest of its one-epoch bound
    composed and its dominating pair composed (:func:`scenario_epsilon_over_epochs`).

    With ``workers`` or ``cluster`` the attacks' trials run as tasks on
    :func:`esa.resolve_executor`'s executor (local processes, or a Dask cluster), every
    scenario's submitted at once; each trial is seeded from ``seed``, its hypothesis and
    its index only, so the result is the same as one after the other in this process.
    """
    if not 0.0 < confidence < 1.0:  # false for nan
        raise ParameterError(f"confidence must lie in (0, 1), got {confidence!r}")
    if protocol_name not in protocol_names():
        raise UsageError(
            f"unknown protocol {protocol_name!r}; choose one of: {', '.join(protocol_names())}"
        )
    spec = ProtocolSpec(
        epsilon=epsilon,
        delta=delta,
        n=n,
        domain=domain,
        fake_reports=fake_reports,
        shufflers=shufflers,
        options=dict(options or {}),
    )
    protocol = build_protocol(protocol_name, spec)
    family, k, note = protocol_family(protocol)
    privacy = protocol.privacy
    ku = resolve_colluding_users(colluding_users, n)
    eps_l = privacy.epsilon_local
    if protocol.messages_per_user != 1.0 and math.isfinite(eps_l) and family == "krr":
        family, note = "generic", f"{protocol_name} sends several messages: generic bounds"
    cfg = CollusionConfig(
        family=family,
        k=k,
        n=n,
        epsilon_local=eps_l,
        delta=delta,
        shufflers=shufflers,
        fake_reports=fake_reports,
        colluding_users=ku,
        colluding_shufflers=colluding_shufflers,
        # Every row is at the audit's δ: a claim proven only at a larger δ is no claim here
        # (no registered protocol does that; tests/test_protocol_contract.py checks).
        epsilon_claimed=privacy.epsilon_central if privacy.delta <= delta else None,
        claimed_bound=privacy.bound,
        epsilon_claimed_without_fakes=_claim_without_fakes(protocol_name, spec, protocol),
        honest_bound=protocol.honest_users_bound,
        honest_lower=_honest_lower(protocol),
    )
    rows = []
    violations: list[str] = []
    unmeasured: dict[str, list[str]] = {}  # why not measured -> the scenarios it hit
    scenarios = collusion_scenarios(cfg)
    # Bonferroni over the scenarios: every measured bound holds at once w.p. ≥ confidence.
    per_scenario = 1.0 - (1.0 - confidence) / len(scenarios)
    with contextlib.ExitStack() as stack:
        executor = None
        if measure and (workers is not None or cluster is not None):
            executor = stack.enter_context(esa.resolve_executor(workers, cluster))
        attacks: list[_PendingAttack | str | None] = []
        for sc in scenarios:  # every scenario's trials are submitted before any is awaited
            attack: _PendingAttack | str | None = None
            if measure:
                try:
                    setup = AttackSetup(
                        n=n,
                        shufflers=shufflers,
                        fake_reports=fake_reports,
                        colluding_users=sc.colluding_users,
                        colluding_shufflers=sc.colluding_shufflers,
                        delta=delta,
                        trials=trials,
                        seed=seed,
                    )
                    attack = _PendingAttack(
                        protocol, setup, confidence=per_scenario, executor=executor
                    )
                except ParameterError as exc:
                    attack = str(exc)  # why this scenario is not measured
            attacks.append(attack)
        try:
            for sc, attack in zip(scenarios, attacks, strict=True):
                rows.append(
                    _row(sc, attack, len(scenarios), on_scenario, unmeasured, violations)
                    | _over_epochs(sc, family, k, eps_l, delta, epochs)
                )
        except BaseException:
            for attack in attacks:
                if attack is not None and not isinstance(attack, str):
                    attack.cancel()
            raise
    return {
        "protocol": protocol_name,
        "family": family,
        "k": k,
        "note": note,
        "n": n,
        "delta": delta,
        "epsilon_local": eps_l,
        "shufflers": shufflers,
        "fake_reports_per_shuffler": fake_reports,
        "colluding_users": ku,
        "colluding_shufflers": colluding_shufflers,
        "protocol_claim": {
            "epsilon_central": privacy.epsilon_central,
            "bound": privacy.bound,
            **_method_fields(privacy.bound, n),
        },
        "epsilon_requested": epsilon,
        "privacy_warning": esa.privacy_shortfall(protocol_name, epsilon, privacy.epsilon_central),
        "measured": measure,
        "trials": trials if measure else None,
        "confidence": confidence if measure else None,
        "confidence_per_scenario": per_scenario if measure else None,
        "measure_note": "; ".join(
            f"not measured ({', '.join(names)}): {why}" for why, names in unmeasured.items()
        )
        or None,
        "violations": violations,
        **(
            {"epochs": epochs, "delta_total": min(0.5, 2.0 * epochs * delta)}
            if epochs is not None
            else {}
        ),
        "scenarios": rows,
    }


def _method_fields(bound: str, n: int) -> dict[str, BoundMethod | float | None]:
    """``bound_method`` and ``bound_tolerance`` of a value a registered bound gave at n users
    (:meth:`protocols.AmplificationBound.method_at`); null for any other accountant's."""
    known = BOUNDS.get(bound)
    method, tolerance = known.method_at(n) if known is not None else (None, None)
    return {"bound_method": method, "bound_tolerance": tolerance}


def _row(
    sc: Any,
    attack: _PendingAttack | str | None,
    count: int,
    on_scenario: Callable[[str, int], None] | None,
    unmeasured: dict[str, list[str]],
    violations: list[str],
) -> dict[str, Any]:
    """One scenario's row (its attack awaited, if measured); a violation is recorded."""
    lower = sc.epsilon_lower  # at δ, where the protocol's own accountant gives one
    measured: float | None = None
    if attack is not None and on_scenario is not None:
        on_scenario(sc.scenario, count)
    if isinstance(attack, str):
        unmeasured.setdefault(attack, []).append(sc.scenario)
    elif attack is not None:
        measured = attack.result().epsilon_lower
        lower = measured if lower is None else max(lower, measured)
    if lower is not None and lower > sc.epsilon_upper:
        violations.append(sc.scenario)
    return {
        "scenario": sc.scenario,
        "colluding_users": sc.colluding_users,
        "colluding_shufflers": sc.colluding_shufflers,
        "honest_users": sc.honest_users,
        "honest_fakes": sc.honest_fakes,
        "epsilon_upper": sc.epsilon_upper,
        "bound": sc.bound,
        # The scenario's victim is hidden among its honest users: the bound's n counts them.
        **_method_fields(sc.bound, sc.honest_users + 1),
        "epsilon_lower": lower,
        "epsilon_lower_exact": sc.epsilon_lower,
        "epsilon_lower_measured": measured,
        "explanation": sc.explanation,
        "murs_formula": sc.murs_formula,
    }


def _over_epochs(
    sc: Any, family: str, k: int, eps_l: float, delta: float, epochs: int | None
) -> dict[str, Any]:
    """The scenario's ε after ``epochs`` epochs (nothing without ``epochs``)."""
    if epochs is None:
        return {}
    eps, method = scenario_epsilon_over_epochs(
        family=family,
        k=k,
        epsilon_local=eps_l,
        honest_users=None if sc.bound in ("local_dp", "none") else sc.honest_users,
        honest_fakes=sc.honest_fakes,
        epsilon_upper=sc.epsilon_upper,
        delta=delta,
        epochs=epochs,
        delta_total=min(0.5, 2.0 * epochs * delta),
    )
    return {"epsilon_upper_epochs": eps, "epochs_method": method}
