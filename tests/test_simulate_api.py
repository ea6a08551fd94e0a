"""esa.simulate (the library's one-call entry point) and ``esa simulate --data`` (users' CSVs)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import esa
from simulations.cli import main


def _cli(argv: list[str]) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # usage errors exit through argparse
            status = int(exc.code or 0)
    text = out.getvalue()
    return status, (json.loads(text) if text.strip().startswith("{") else {}), err.getvalue()


def _body(doc: dict[str, Any]) -> dict[str, Any]:
    """A run's document without what differs between two runs of the same arguments."""
    return {k: v for k, v in doc.items() if k not in ("command", "parameters", "seconds")}


def _csv(tmp_path: Path, header: str, rows: list[str]) -> Path:
    path = tmp_path / "users.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


BROWSERS = ["chrome", "firefox", "chrome", "safari", "edge", "chrome"] * 500


def test_simulate_to_json_is_the_cli_json(tmp_path: Path) -> None:
    path = _csv(tmp_path, "id,browser", [f"{i},{b}" for i, b in enumerate(BROWSERS)])
    status, cli, _ = _cli(
        ["simulate", "--protocol", "hist_kr", "--data", str(path), "--column", "browser",
         "--crypto", "ideal", "--seed", "5", "--json"]
    )  # fmt: skip
    assert status == 0
    result = esa.simulate("hist_kr", path, column="browser", crypto="ideal", rng=5)
    assert _body(result.to_json()) == _body(cli)
    assert cli["data"]["categories"] == ["chrome", "edge", "firefox", "safari"]
    assert cli["domain"] == 4  # the named categories fix the domain
    assert cli["n"] == len(BROWSERS)
    assert cli["parameters"]["n"] == len(BROWSERS)
    assert cli["distribution"] is None


def test_five_lines_of_python_on_a_list() -> None:
    result = esa.simulate("hist_kr", BROWSERS, epsilon=1.0, delta=1e-6, crypto="ideal", rng=0)
    truth = {c: BROWSERS.count(c) for c in ("chrome", "edge", "firefox", "safari")}
    assert result.truth.tolist() == list(truth.values())
    err = np.abs(result.estimate.values - result.truth)
    assert np.all(err <= 5 * result.estimate.expected_std)  # seeded; 5 stated std
    assert result.privacy.epsilon_central <= 1.0 + 1e-9


def test_an_int_seed_is_default_rng_of_it() -> None:
    a = esa.simulate("cnt_rr", n=3000, crypto="ideal", rng=11)
    b = esa.simulate("cnt_rr", n=3000, crypto="ideal", rng=np.random.default_rng(11))
    assert a.estimate.values.tolist() == b.estimate.values.tolist()


def test_reals_are_mapped_from_their_range_and_clipping_is_stated(tmp_path: Path) -> None:
    rows = [f"{v}" for v in np.linspace(-20, 120, 3000)]  # 0..100 is the range: some outside
    path = _csv(tmp_path, "score", rows)
    status, doc, _ = _cli(
        ["simulate", "--protocol", "rsum_kr", "--data", str(path), "--column", "score",
         "--range", "0:100", "--crypto", "ideal", "--json"]
    )  # fmt: skip
    assert status == 0
    clipped = int(np.sum((np.linspace(-20, 120, 3000) < 0) | (np.linspace(-20, 120, 3000) > 100)))
    assert doc["data"]["clipped"] == clipped
    assert doc["data"]["value_range"] == [0.0, 100.0]
    status, _, err = _cli(
        ["simulate", "--protocol", "rsum_kr", "--data", str(path), "--column", "score",
         "--range", "0:100", "--out-of-range", "refuse", "--crypto", "ideal"]
    )  # fmt: skip
    assert status == 2
    assert "lies outside the range [0.0, 100.0]" in err


@pytest.mark.parametrize(
    ("rows", "argv", "message"),
    [
        (["a", "", "b"], [], "missing value at row 2 (line 3)"),
        (["a", "b"], ["--n", "5"], "n = 5 but the data has 2 rows"),
        (["a", "b", "c"], ["--domain", "2"], "3 categories do not fit"),
    ],
)
def test_bad_data_is_one_line_naming_the_row(
    tmp_path: Path, rows: list[str], argv: list[str], message: str
) -> None:
    path = _csv(tmp_path, "x", rows)
    status, _, err = _cli(
        ["simulate", "--protocol", "hist_kr", "--data", str(path), "--column", "x",
         "--crypto", "ideal", *argv]
    )  # fmt: skip
    assert status == 2
    assert message in err
    assert err.count("\n") == 1


def test_column_without_data_is_a_usage_error() -> None:
    status, _, err = _cli(["simulate", "--protocol", "hist_kr", "--column", "x"])
    assert status == 2
    assert "--column needs --data" in err


def test_a_weaker_run_prints_what_it_proves_and_exits_1() -> None:
    """A held crowd leaves only the local guarantee: the output says so, the exit code too."""
    argv = ["simulate", "--protocol", "hist_kr", "--n", "500", "--crypto", "ideal",
            "--threshold", "1000", "--json"]  # fmt: skip
    status, doc, err = _cli(argv)
    assert status == 1
    assert doc["weaker_than_requested"] is True
    assert doc["epsilon_central"] > 1.0
    assert "the run that happened proves" in err
    status, doc, _ = _cli([*argv, "--allow-weaker"])
    assert status == 0
    assert doc["weaker_than_requested"] is True
    with pytest.raises(esa.WeakerThanRequested) as caught:
        esa.simulate("hist_kr", n=500, crypto="ideal", threshold=1000, rng=0)
    assert caught.value.result is not None
    assert caught.value.result.privacy.epsilon_central > 1.0


def test_a_configured_protocol_can_be_passed_in() -> None:
    import protocols

    p = protocols.build_protocol("cnt_rr", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=4000))
    result = esa.simulate(p, np.random.default_rng(0).integers(0, 2, 4000), crypto="ideal", rng=1)
    assert result.protocol is p
    assert result.extra["data"]["kind"] == "binary"


def test_a_real_columns_estimate_is_also_stated_in_its_units(tmp_path: Path) -> None:
    """Ages in [0, 100]: the protocol estimates the sum of age/100; the output also states
    the sum of ages, from the same run, in the JSON and the table."""
    ages = np.random.default_rng(3).integers(18, 90, size=5000)
    result = esa.simulate(
        "rsum_kr", ages.tolist(), epsilon=1.0, crypto="ideal", value_range=(0, 100), rng=1
    )
    units = result.extra["data"]["in_data_units"]
    assert units["truth"] == [pytest.approx(float(ages.sum()))]
    assert units["estimate"][0] == pytest.approx(100 * float(result.estimate.values[0]))
    # Seeded: the error is within 5 stated stds (false alarm < 10^-6 for a normal error).
    assert abs(units["estimate"][0] - units["truth"][0]) <= 5 * units["expected_std"][0]
    path = _csv(tmp_path, "age", [str(a) for a in ages])
    argv = ["simulate", "--protocol", "rsum_kr", "--data", str(path), "--column", "age",
            "--range", "0:100", "--crypto", "ideal", "--seed", "1"]  # fmt: skip
    status, doc, _ = _cli([*argv, "--json"])
    assert status == 0
    assert doc["data"]["in_data_units"]["truth"] == units["truth"]
    status, _, _ = _cli(argv)
    assert status == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    assert "the column's sum, in its own units" in out.getvalue()
    assert "Values in [0, 100]" in out.getvalue()
    assert f"{int(ages.sum()):,}.0" in out.getvalue()
