"""``esa amplify`` and ``esa audit``: JSON contracts, tables, usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from simulations.cli import main

from ._cli import usage_error

SCENARIO_FIELDS = {
    "scenario", "epsilon_upper", "bound", "epsilon_lower", "explanation", "honest_users",
    "honest_fakes", "colluding_users", "colluding_shufflers", "murs_formula",
}  # fmt: skip


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_amplify_forward_every_bound(capsys: pytest.CaptureFixture[str]) -> None:
    # binary randomized response (k = 2; the commands' default domain is 16)
    out = run_json(
        capsys, "amplify", "--epsilon-local", "4", "--n", "100000", "--delta", "1e-6",
        "--domain", "2",
    )  # fmt: skip
    by = {r["bound"]: r for r in out["bounds"]}
    assert by["thm2_fmt_closed_form"]["value"] == pytest.approx(0.538, abs=0.01)
    assert by["fmt21_numerical"]["value"] == pytest.approx(0.17, abs=0.01)
    assert by["fmt23_stronger_clone"]["value"] == pytest.approx(0.12, abs=0.005)
    assert by["binary_rr_exact"]["value"] < by["fmt23_stronger_clone"]["value"]
    # Thm 1 needs ε_l ≤ 1/2: null with the reason.
    assert by["thm1_erlingsson"]["value"] is None
    assert "0.5" in by["thm1_erlingsson"]["reason"]
    assert out["tightest"]["krr"]["bound"] == "binary_rr_exact"
    assert out["tightest"]["generic"]["bound"] == "fmt21_numerical"


def test_amplify_inverse_and_single_bound(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "amplify", "--epsilon-central", "0.5", "--n", "5000", "--delta", "1e-6",
        "--bound", "fmt23_stronger_clone", "--domain", "8",
    )  # fmt: skip
    (row,) = out["bounds"]
    assert row["bound"] == "fmt23_stronger_clone"
    assert row["value"] > 0.5
    assert out["tightest"]["generic"] is None


def test_amplify_table_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["amplify", "--epsilon-local", "2", "--n", "1000"]) == 0
    text = capsys.readouterr().out
    assert "binary_rr_exact" in text
    assert "tightest" in text
    for argv in (
        ["amplify", "--n", "1000"],  # neither direction
        ["amplify", "--n", "1000", "--epsilon-local", "1", "--epsilon-central", "1"],
        ["amplify", "--n", "1000", "--epsilon-local", "1", "--bound", "nope"],
        ["amplify", "--n", "1000", "--epsilon-local", "-1"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


MURS_ARGS = (
    "audit", "--protocol", "murs", "--n", "5000", "--epsilon", "1", "--delta", "1e-6",
    "--domain", "16", "--shufflers", "3", "--fake-reports", "50", "--colluding-users", "0.1",
    "--colluding-shufflers", "1",
)  # fmt: skip


def test_audit_murs_json_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, *MURS_ARGS)
    names = [r["scenario"] for r in out["scenarios"]]
    assert names == [
        "none",
        "all shufflers",
        "m-1 shufflers",
        "500 users",
        "1 shufflers + 500 users",
        "m-1 shufflers + 500 users",
        "m-1 shufflers + all other users",
    ]
    for r in out["scenarios"]:
        assert r.keys() >= SCENARIO_FIELDS
        assert r["epsilon_lower"] is None  # not measured without --measure
    murs = out["scenarios"][-1]
    assert murs["honest_users"] == 0
    assert murs["honest_fakes"] == 50
    assert murs["bound"] == "krr_fakes_exact"
    # MURS's own formula is several times looser than the exact fakes-only number.
    assert murs["murs_formula"] > 1.5 * murs["epsilon_upper"]
    assert out["protocol_claim"]["epsilon_central"] == pytest.approx(1.0)
    assert out["violations"] == []


def test_audit_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(MURS_ARGS)) == 0
    text = capsys.readouterr().out
    for word in ("none", "all", "shufflers", "MURS", "claim"):
        assert word in text


def test_audit_measure_lower_below_upper(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(
        capsys, "audit", "--protocol", "cnt_rr", "--n", "20", "--epsilon", "1.5",
        "--delta", "1e-3", "--shufflers", "2", "--fake-reports", "3", "--colluding-users", "5",
        "--colluding-shufflers", "1", "--measure", "--trials", "150", "--seed", "1",
    )  # fmt: skip
    assert out["measured"]
    assert out["violations"] == []
    for r in out["scenarios"]:
        assert r["epsilon_lower"] is not None
        assert r["epsilon_lower"] <= r["epsilon_upper"]
    traced = next(r for r in out["scenarios"] if r["scenario"] == "all shufflers")
    assert traced["epsilon_lower"] > 0.5


def test_audit_measure_runs_on_every_core_by_default_and_prints_the_same_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trials run as tasks on local processes, every core's by default; each is seeded
    # from (seed, hypothesis, trial), so the document does not depend on how many
    # (tests/test_cluster.py: a Dask cluster too).
    import esa

    pools: list[int | None] = []
    real = esa.resolve_executor

    def spy(workers: int | None = None, cluster: object = None) -> object:
        pools.append(workers)
        return real(workers, cluster)

    monkeypatch.setattr(esa, "available_cores", lambda: 2)  # whatever this machine has
    monkeypatch.setattr(esa, "resolve_executor", spy)
    argv = [
        "audit", "--protocol", "cnt_rr", "--n", "20", "--epsilon", "1.5", "--delta", "1e-3",
        "--shufflers", "2", "--colluding-users", "5", "--colluding-shufflers", "1",
        "--measure", "--trials", "90", "--seed", "3",
    ]  # fmt: skip
    default = run_json(capsys, *argv)
    one = run_json(capsys, *argv, "--workers", "1")
    assert pools == [2, 1]
    # Only the record of the invocation differs (it lists --workers).
    assert one.pop("parameters")["workers"] == 1
    assert default.pop("parameters")["workers"] is None
    assert one.pop("command") != default.pop("command")
    assert one == default
    assert any(r["epsilon_lower_measured"] for r in default["scenarios"])
    run_json(capsys, *argv[:-5])  # no --measure: no trials, no pool
    assert pools == [2, 1]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--workers", "2"], "add --measure"),
        (["--cluster", "tcp://127.0.0.1:1"], "add --measure"),
        (["--measure", "--workers", "0"], "--workers must be >= 1"),
    ],
)
def test_audit_workers_usage_errors(
    capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    argv = ["audit", "--protocol", "cnt_rr", "--n", "20", "--epsilon", "1.5", *extra]
    assert says in usage_error(argv, capsys)


def test_audit_cnt_pure_sandwiches_each_scenario_exactly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Cnt_PURE's own accountant: an upper bound from the same-bit half of the honest users
    # and the exact ε(δ) of the dataset where they all hold 0 (a lower bound), no --measure.
    out = run_json(
        capsys, "audit", "--protocol", "cnt_pure", "--n", "400", "--epsilon", "1",
        "--colluding-users", "100",
    )  # fmt: skip
    assert out["violations"] == []
    rows = {r["scenario"]: r for r in out["scenarios"]}
    for name, honest in (("none", 399), ("100 users", 299)):
        r = rows[name]
        assert r["honest_users"] == honest
        assert r["bound"] == f"cnt_pure_exact_central[{(honest + 1) // 2} same-bit honest users]"
        assert r["epsilon_lower"] <= r["epsilon_upper"] <= out["epsilon_local"]
        assert f"when all {honest} honest others hold 0" in r["explanation"]
    assert rows["none"]["epsilon_upper"] <= 1.0
    # at δ = 10⁻⁶ the pure upper bound's tail events weigh little: 0.714 ≤ ε ≤ 0.994
    assert 0.6 < rows["none"]["epsilon_lower"] < rows["none"]["epsilon_upper"] - 0.2
    # Fewer honest users, weaker (larger) guarantee.
    assert rows["100 users"]["epsilon_lower"] > rows["none"]["epsilon_lower"]
    # only the local randomizer: the exact ε(δ) of the victim's own bits, below ε_l
    traced = rows["all shufflers"]
    assert 4.0 < traced["epsilon_lower"] <= traced["epsilon_upper"] == out["epsilon_local"]


def test_audit_cnt_sgm_shows_its_claim_fail_in_every_scenario(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_json(
        capsys, "audit", "--protocol", "cnt_sgm", "--n", "10000", "--epsilon", "1",
        "--colluding-users", "0.5", "--option", "encoding=unary",
    )  # fmt: skip
    assert out["violations"] == []
    with_users = [r for r in out["scenarios"] if r["honest_users"] or "users" in r["scenario"]]
    assert with_users
    for r in with_users:
        # the target 1 is not met, at δ too: the exact ε(δ) of the unary view
        assert 1.0 < r["epsilon_lower"] <= r["epsilon_upper"]
        assert "unary view, exact" in r["explanation"]
    assert out["epsilon_requested"] == 1.0
    assert "cnt_sgm proves" in out["privacy_warning"]
    assert "cnt_pure" in out["privacy_warning"]


def test_audit_takes_protocol_options_as_simulate_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The warning for PUT on unary counters names --option counter=cnt_pure; the audit
    # accepts it, and then the target is proven and nothing is flagged.
    args = ("audit", "--protocol", "put", "--n", "5000", "--epsilon", "1", "--domain", "16")
    unary = run_json(capsys, *args, "--option", "encoding=unary")
    assert "counter=cnt_pure" in unary["privacy_warning"]
    proven = run_json(capsys, *args, "--option", "counter=cnt_pure")
    assert proven["privacy_warning"] is None
    assert proven["protocol_claim"]["epsilon_central"] <= 1.0
    assert "cnt_pure" in proven["protocol_claim"]["bound"]


def test_audit_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["audit", "--protocol", "nope", "--n", "100", "--epsilon", "1"],
        ["audit", "--protocol", "hist_kr", "--n", "100", "--epsilon", "1",
         "--colluding-shufflers", "9"],
        ["audit", "--protocol", "hist_kr", "--n", "100", "--epsilon", "1",
         "--colluding-users", "500"],
        ["audit", "--protocol", "hist_kr", "--n", "100", "--epsilon", "1",
         "--fake-reports", "-2"],
        ["audit", "--protocol", "put", "--n", "100", "--epsilon", "1", "--option", "counter"],
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_audit_measure_states_its_confidence_jointly_over_the_scenarios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A measured lower bound is a statistical statement: the JSON says at what confidence,
    # and a "BUG" verdict over s scenarios may be wrong only with that probability in all,
    # so each scenario's attack runs at 1 − (1 − confidence)/s (Bonferroni).
    from simulations._attacks import _PendingAttack as real

    asked: list[float] = []

    def spy(
        protocol: object, setup: object, *, confidence: float = 0.95, executor: object = None
    ) -> object:
        asked.append(confidence)
        return real(protocol, setup, confidence=confidence, executor=executor)  # type: ignore[arg-type]

    monkeypatch.setattr("simulations._audit._PendingAttack", spy)
    out = run_json(
        capsys, "audit", "--protocol", "cnt_rr", "--n", "12", "--epsilon", "1.5",
        "--delta", "1e-3", "--shufflers", "2", "--fake-reports", "1", "--colluding-users", "2",
        "--colluding-shufflers", "1", "--measure", "--trials", "60",
    )  # fmt: skip
    rows = out["scenarios"]
    assert out["confidence"] == 0.95
    assert out["confidence_per_scenario"] == pytest.approx(1 - 0.05 / len(rows))
    assert len(asked) == len(rows)
    assert all(c == pytest.approx(1 - 0.05 / len(rows)) for c in asked)
    for r in rows:
        assert r["epsilon_lower_exact"] is None  # Cnt_RR has no lower bound of its own
        assert r["epsilon_lower_measured"] is not None
        assert r["epsilon_lower"] == r["epsilon_lower_measured"]
    assert main(["audit", "--protocol", "cnt_rr", "--n", "12", "--epsilon", "1.5",
                 "--delta", "1e-3", "--measure", "--trials", "30"]) == 0  # fmt: skip
    assert "95% confidence jointly" in " ".join(capsys.readouterr().out.split())


def test_audit_lower_bound_fields_say_which_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "audit", "--protocol", "cnt_pure", "--n", "50", "--epsilon", "1")
    assert out["confidence"] is None  # nothing measured: every lower bound here is exact
    for r in out["scenarios"]:
        assert r["epsilon_lower_measured"] is None
        assert r["epsilon_lower"] == r["epsilon_lower_exact"] is not None


def test_audit_refuses_a_confidence_outside_0_1(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("1", "0", "1.5", "nan"):
        err = usage_error(["audit", "--protocol", "cnt_rr", "--n", "50", "--epsilon", "1",
                           "--measure", "--confidence", bad], capsys)  # fmt: skip
        assert "--confidence" in err


def test_claim_without_fakes_is_taken_only_for_the_same_randomizer() -> None:
    # SLH calibrates ε_l with its fakes: built again without them it is another randomizer
    # (smaller ε_l), whose claim says nothing about the one deployed.
    import dataclasses

    from protocols import BoundNotApplicable, ProtocolSpec, build_protocol
    from simulations._audit import _claim_without_fakes

    spec = ProtocolSpec(epsilon=1.0, delta=1e-6, n=20000, domain=64, fake_reports=3)
    slh = build_protocol("slh", spec)
    bare = build_protocol("slh", dataclasses.replace(spec, fake_reports=0))
    assert bare.privacy.epsilon_local < slh.privacy.epsilon_local  # the premise
    # the deployed randomizer's own theorem proves nothing with no fakes (ε_c would be
    # 1.001 > 1, outside survey Thm 4), while the bare one claims 1.0
    with pytest.raises(BoundNotApplicable):
        slh.epsilon_central_for(honest_users=spec.n, honest_fakes=0)  # type: ignore[attr-defined]
    assert _claim_without_fakes("slh", spec, slh) is None
    # where the randomizer does not depend on the fakes the bare claim stands
    hist = build_protocol("hist_kr", dataclasses.replace(spec, domain=8))
    assert _claim_without_fakes("hist_kr", dataclasses.replace(spec, domain=8), hist) == (
        pytest.approx(hist.privacy.epsilon_central)
    )


def test_audit_reports_progress_against_the_scenarios_it_runs() -> None:
    # Duplicate scenarios are dropped (one shuffler, no colluding users: 3 remain), so the
    # progress total comes from audit(), not a fixed 7.
    from simulations._audit import audit

    calls: list[tuple[str, int]] = []
    out = audit(
        protocol_name="cnt_rr",
        n=50,
        epsilon=1.0,
        delta=1e-3,
        domain=2,
        shufflers=1,
        fake_reports=0,
        colluding_users=0,
        colluding_shufflers=0,
        measure=True,
        trials=30,
        on_scenario=lambda name, total: calls.append((name, total)),
    )
    names = [r["scenario"] for r in out["scenarios"]]
    assert len(names) < 7
    assert calls == [(name, len(names)) for name in names]


def test_a_claim_proven_only_at_a_larger_delta_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every row is at the audit's δ. RSum_DSG's shares give no local guarantee, so its
    # no-collusion row is its claim; proven only at δ = 10^-3 the claim says nothing at the
    # audit's 10^-6, and the row comes from its honest-users accountant, not the claim.
    import dataclasses

    import simulations._audit as audit_mod
    from protocols import build_protocol

    def loose(name: str, spec: object) -> object:
        p = build_protocol(name, spec)  # type: ignore[arg-type]
        base = type(p)
        weaker = property(lambda s: dataclasses.replace(base.privacy.fget(s), delta=1e-3))  # type: ignore[attr-defined]
        p.__class__ = type("Loose", (base,), {"privacy": weaker})
        return p

    kwargs = dict(
        protocol_name="rsum_dsg",
        n=2_000,
        epsilon=1.0,
        delta=1e-6,
        domain=2,
        shufflers=1,
        fake_reports=0,
        colluding_users=0,
        colluding_shufflers=0,
    )
    honest = audit_mod.audit(**kwargs)  # type: ignore[arg-type]
    assert honest["scenarios"][0]["scenario"] == "none"
    assert honest["scenarios"][0]["epsilon_upper"] == 1.0
    monkeypatch.setattr(audit_mod, "build_protocol", loose)
    out = audit_mod.audit(**kwargs)  # type: ignore[arg-type]
    assert out["scenarios"][0]["scenario"] == "none"
    # Not the claim: its own honest-users accountant, computed at the audit's δ, decides.
    assert out["scenarios"][0]["bound"].startswith("rsum_dsg_polya_exact")
    assert not out["scenarios"][0]["bound"].startswith("bbgn_dsg")
