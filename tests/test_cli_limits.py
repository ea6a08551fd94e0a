"""Limits of the CLI's --n and --domain, and the accountants at numbers of users past them:
a one-line refusal (exit 2) or a clean step-aside, never a traceback or a huge allocation."""

from __future__ import annotations

import pytest

from protocols import BOUNDS, BoundNotApplicable, binary_rr_epsilon, epsilon_for_pair
from simulations._common import MAX_DOMAIN, MAX_USERS
from simulations.cli import main

#: 2^62 users: scipy's binomial log-pmf returns log-probabilities above 0 there, and the
#: truncated laws would have 2·10^10 points (156 GiB).
HUGE = 1 << 62


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert match in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["amplify", "--epsilon-local", "1"],
        ["amplify", "--epsilon-central", "1", "--bound", "binary_rr_exact"],
        ["audit", "--protocol", "cnt_rr", "--epsilon", "1"],
        ["simulate", "--protocol", "cnt_rr", "--crypto", "ideal"],
        ["demo", "--crypto", "ideal"],
    ],
)
@pytest.mark.parametrize("n", [MAX_USERS + 1, HUGE])
def test_n_above_the_maximum_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], n: int
) -> None:
    _refused(capsys, [*argv, "--n", str(n)], f"at most {MAX_USERS:.0e} users")


@pytest.mark.parametrize("command", ["simulate", "demo"])
def test_domain_above_the_maximum_is_refused(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv = [command, "--crypto", "ideal", "--n", "200", "--domain", str(MAX_DOMAIN + 1)]
    if command == "simulate":
        argv += ["--protocol", "hist_kr"]
    _refused(capsys, argv, f"at most {MAX_DOMAIN} (2^20)")


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("binary_rr_exact", HUGE),
        ("fmt23_stronger_clone", HUGE),
        ("fmt21_numerical", HUGE),
    ],
)
def test_numerical_bounds_step_aside_at_huge_n(name: str, n: int) -> None:
    # Where the binomial laws leave double precision (or would take gigabytes) the
    # numerical accountants say so; at 2^62 they raised IndexError or MemoryError.
    bound = BOUNDS[name]
    with pytest.raises(BoundNotApplicable):
        bound.epsilon_central(epsilon_local=1.0, n=n, delta=1e-6)
    with pytest.raises(BoundNotApplicable):
        bound.epsilon_local(epsilon_central=1.0, n=n, delta=1e-6)


@pytest.mark.parametrize("name", ["fmt23_stronger_clone", "fmt21_numerical"])
def test_clone_bounds_answer_at_the_clis_largest_n(name: str) -> None:
    # The clone bounds sum the clone count's law over at most 4096 cells, so the CLI's
    # largest n (10^10) is answered in about a second, both ways, and consistently.
    bound = BOUNDS[name]
    eps_c = bound.epsilon_central(epsilon_local=1.0, n=MAX_USERS, delta=1e-6)
    assert 0.0 < eps_c < 1.0
    eps_l = bound.epsilon_local(epsilon_central=eps_c, n=MAX_USERS, delta=1e-6)
    assert eps_l == pytest.approx(1.0, rel=1e-3)


def test_blanket_steps_aside_at_huge_n() -> None:
    with pytest.raises(BoundNotApplicable):
        BOUNDS["krr_blanket_numerical"].epsilon_local(epsilon_central=1.0, n=HUGE, delta=1e-6, k=3)


def test_binary_rr_accountant_still_answers_below_the_limits() -> None:
    assert 0.0 < binary_rr_epsilon(1.0, 999, 1e-6) < 1.0


def test_pair_without_mass_has_no_divergence() -> None:
    # A law with no finite log-probability has H = 0 (was an IndexError).
    inf = float("-inf")
    assert epsilon_for_pair([inf, inf], [inf, inf], 1e-6) == 0.0


def test_demo_runs_at_the_smallest_epsilon(capsys: pytest.CaptureFixture[str]) -> None:
    # The shuffled run proves 9.98e-7 < 1e-6, where the local-only k-RR cannot be built:
    # the comparison runs at the documented minimum and says so.
    assert main(["demo", "--crypto", "ideal", "--epsilon", "1e-6", "--n", "2000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "compared at ε_l = 1e-06" in out
