"""``esa audit``: the ε a user keeps under every collusion scenario: proven upper bounds,
and lower bounds at the same δ (the protocol's own exact ones, or measured with --measure)."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

from protocols import (
    CollusionConfig,
    ParameterError,
    ProtocolSpec,
    build_protocol,
    collusion_scenarios,
    protocol_names,
    resolve_colluding_users,
)

from .._attacks import AttackSetup, distinguishing_attack, protocol_family
from .._common import (
    UsageError,
    emit_json,
    parse_options,
    print_table,
    privacy_shortfall,
    progress,
    seed,
    status,
    users,
)

__all__ = ["audit", "register"]


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
        fake_reports=shufflers * fake_reports,
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
    violations = []
    unmeasured: dict[str, list[str]] = {}  # why not measured -> the scenarios it hit
    scenarios = collusion_scenarios(cfg)
    # Bonferroni over the scenarios: every measured bound holds at once w.p. ≥ confidence.
    per_scenario = 1.0 - (1.0 - confidence) / len(scenarios)
    for sc in scenarios:
        lower = sc.epsilon_lower  # at δ, where the protocol's own accountant gives one
        measured: float | None = None
        if measure:
            if on_scenario is not None:
                on_scenario(sc.scenario, len(scenarios))
            try:
                res = distinguishing_attack(
                    protocol,
                    AttackSetup(
                        n=n,
                        shufflers=shufflers,
                        fake_reports=fake_reports,
                        colluding_users=sc.colluding_users,
                        colluding_shufflers=sc.colluding_shufflers,
                        delta=delta,
                        trials=trials,
                        seed=seed,
                    ),
                    confidence=per_scenario,
                )
                measured = res.epsilon_lower
                lower = measured if lower is None else max(lower, measured)
            except ParameterError as exc:
                unmeasured.setdefault(str(exc), []).append(sc.scenario)
        if lower is not None and lower > sc.epsilon_upper:
            violations.append(sc.scenario)
        rows.append(
            {
                "scenario": sc.scenario,
                "colluding_users": sc.colluding_users,
                "colluding_shufflers": sc.colluding_shufflers,
                "honest_users": sc.honest_users,
                "honest_fakes": sc.honest_fakes,
                "epsilon_upper": sc.epsilon_upper,
                "bound": sc.bound,
                "epsilon_lower": lower,
                "epsilon_lower_exact": sc.epsilon_lower,
                "epsilon_lower_measured": measured,
                "explanation": sc.explanation,
                "murs_formula": sc.murs_formula,
            }
        )
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
        "protocol_claim": {"epsilon_central": privacy.epsilon_central, "bound": privacy.bound},
        "epsilon_requested": epsilon,
        "privacy_warning": privacy_shortfall(protocol_name, epsilon, privacy.epsilon_central),
        "measured": measure,
        "trials": trials if measure else None,
        "confidence": confidence if measure else None,
        "confidence_per_scenario": per_scenario if measure else None,
        "measure_note": "; ".join(
            f"not measured ({', '.join(names)}): {why}" for why, names in unmeasured.items()
        )
        or None,
        "violations": violations,
        "scenarios": rows,
    }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="ε per collusion scenario: proven upper bounds and lower bounds at the same δ",
        description="For a protocol configuration, report for each collusion scenario "
        "(none; all shufflers; m-1 shufflers; k users; combinations) the proven ε upper "
        "bound with its accountant, what still protects the user, the protocol's own ε "
        "lower bound at the same δ where it has one, and with --measure an ε lower bound "
        "from a distinguishing attack on real pipeline runs (--crypto ideal).",
    )
    p.add_argument("--protocol", required=True, help="protocol name (see `esa protocols`)")
    p.add_argument("--n", type=users, required=True, help="number of users (at most 1e10)")
    p.add_argument("--epsilon", type=float, required=True, help="target central ε_c")
    p.add_argument("--delta", type=float, default=1e-6, help="δ (default 1e-6)")
    p.add_argument("--domain", type=int, default=2, help="domain size d (default 2)")
    p.add_argument("--shufflers", type=int, default=3, help="shufflers m (default 3)")
    p.add_argument(
        "--fake-reports", type=int, default=0, help="fakes each shuffler adds (default 0)"
    )
    p.add_argument(
        "--colluding-users",
        type=float,
        default=0,
        help="colluding users: a count K >= 1 or a fraction in [0, 1) of the others",
    )
    p.add_argument(
        "--colluding-shufflers", type=int, default=0, help="colluding shufflers C (default 0)"
    )
    p.add_argument("--measure", action="store_true", help="run the distinguishing attacks")
    p.add_argument(
        "--trials", type=int, default=None, help="runs per hypothesis (--measure; default 1000)"
    )
    p.add_argument("--seed", type=seed, default=0, help="seed of the attack runs")
    p.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="probability that every measured lower bound holds, jointly over the scenarios "
        "(--measure; default 0.95)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol-specific parameter (repeatable), as for esa simulate, e.g. "
        "--option counter=cnt_pure (put)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if math.isfinite(v) else "inf"


def run(args: Any) -> int:
    if args.shufflers < 1:
        raise UsageError(f"--shufflers must be >= 1, got {args.shufflers}")
    if args.fake_reports < 0:
        raise UsageError(f"--fake-reports must be >= 0, got {args.fake_reports}")
    if args.trials is not None and not args.measure:
        raise UsageError("--trials sets the runs of --measure; add --measure")
    if args.trials is None:
        args.trials = 1000
    if args.confidence is not None and not args.measure:
        raise UsageError("--confidence is that of --measure's bounds; add --measure")
    if args.confidence is None:
        args.confidence = 0.95
    if not 0.0 < args.confidence < 1.0:  # false for nan
        raise UsageError(f"--confidence must lie in (0, 1), got {args.confidence!r}")
    if args.trials < 30:
        raise UsageError(f"--trials must be >= 30, got {args.trials}")
    with (
        progress(args.measure and not args.json) as bar,
        status(
            not args.measure and not args.json,
            f"deriving {args.protocol}'s parameters and each scenario's bounds",
        ),
    ):
        task = bar.add_task("attacks", total=None)

        def step(name: str, total: int) -> None:
            # Duplicate scenarios are dropped, so only audit() knows how many attacks run.
            bar.update(task, total=total, description=f"attack: {name}")
            bar.advance(task)

        out = audit(
            protocol_name=args.protocol,
            n=args.n,
            epsilon=args.epsilon,
            delta=args.delta,
            domain=args.domain,
            shufflers=args.shufflers,
            fake_reports=args.fake_reports,
            colluding_users=args.colluding_users,
            colluding_shufflers=args.colluding_shufflers,
            measure=args.measure,
            trials=args.trials,
            seed=args.seed,
            on_scenario=step,
            options=parse_options(args.option),
            confidence=args.confidence,
        )
    if args.json:
        emit_json(out)
    else:
        rows = [
            [
                r["scenario"],
                _fmt(r["epsilon_upper"]),
                r["bound"],
                _fmt(r["epsilon_lower"]),
                _fmt(r["murs_formula"]),
                r["explanation"],
            ]
            for r in out["scenarios"]
        ]
        claim = out["protocol_claim"]
        caption = (
            f"ε_l={_fmt(out['epsilon_local'])} ({out['family']}, k={out['k']}); protocol's own "
            f"claim ε_c={_fmt(claim['epsilon_central'])} by {claim['bound']}"
        )
        if out["note"]:
            caption += f"\n{out['note']}"
        caption += "\nε lower: the protocol's own exact lower bound at δ where it has one" + (
            f"; or measured ({out['trials']} runs per dataset), whichever is larger: the "
            f"measured ones hold with {100 * out['confidence']:g}% confidence jointly over the "
            "scenarios (Clopper–Pearson, Bonferroni)"
            if out["measured"]
            else ""
        )
        if out["measure_note"]:
            caption += f"\n{out['measure_note']}"
        print_table(
            f"collusion audit: {args.protocol}, n={args.n}, δ={args.delta:g}, "
            f"m={args.shufflers}, n_r={args.fake_reports}/shuffler",
            ["scenario", "ε upper", "bound", "ε lower", "MURS formula", "what protects the user"],
            rows,
            caption=caption,
        )
    if out["privacy_warning"]:
        print(f"warning: {out['privacy_warning']}", file=sys.stderr)
    if out["violations"]:
        kind = (
            f"lower bound (exact, or measured at {100 * out['confidence']:g}% joint confidence)"
            if out["measured"]
            else "lower bound"
        )
        print(
            f"esa audit: BUG: {kind} above the proven upper bound at δ={out['delta']:g} in: "
            + ", ".join(out["violations"]),
            file=sys.stderr,
        )
        return 1
    return 0
