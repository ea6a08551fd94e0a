"""The worked example of docs/design.md: a new protocol is one module plus its import.

The test takes the Python block of "Worked example: a new protocol" verbatim, loads it as the
module ``protocols._cnt_flip`` (what the import line in ``protocols/__init__.py`` would do),
and runs it through the command line and the pipeline without any other change. It runs in a
child process so the registration does not leak into the rest of the session.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "design.md"

_DRIVER = textwrap.dedent(
    """
    import contextlib, importlib.util, io, json, sys
    import numpy as np
    import protocols

    code = sys.stdin.read()
    spec = importlib.util.spec_from_loader("protocols._cnt_flip", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "protocols"
    sys.modules[spec.name] = module
    exec(compile(code, "protocols/_cnt_flip.py", "exec"), module.__dict__)

    import esa
    from simulations.cli import main

    def run(argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(argv)
        return status, json.loads(out.getvalue())

    report = {"names": protocols.protocol_names()}
    report["simulate"] = run(
        ["simulate", "--protocol", "cnt_flip", "--n", "5000", "--crypto", "ideal",
         "--seed", "3", "--json"]
    )
    report["audit"] = run(
        ["audit", "--protocol", "cnt_flip", "--n", "5000", "--epsilon", "1", "--json"]
    )
    p = protocols.build_protocol(
        "cnt_flip", protocols.ProtocolSpec(epsilon=1.0, delta=1e-6, n=5000)
    )
    x = np.random.default_rng(0).integers(0, 2, size=5000)
    result = esa.run_pipeline(
        p, x, esa.PipelineConfig(shufflers=2, fake_reports=100, crypto="onion", workers=1),
        rng=np.random.default_rng(1),
    )
    report["onion"] = {
        "estimate": float(result.estimate.values[0]),
        "std": float(result.estimate.expected_std[0]),
        "truth": float(result.truth[0]),
    }
    report["family"] = [p.randomizer_family().kind, p.randomizer_family().k]
    print(json.dumps(report))
    """
)


def _example_code() -> str:
    text = DOC.read_text()
    section = text.split("## Worked example: a new protocol", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the worked example has exactly one Python block"
    return blocks[0]


def test_the_worked_example_is_a_protocol_like_the_others() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=_example_code(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "cnt_flip" in report["names"]

    status, sim = report["simulate"]
    assert status == 0
    assert sim["protocol"] == "cnt_flip"
    # the amplified guarantee meets the default request (ε_c = 1) with ε_l well above it
    assert sim["epsilon_central"] <= 1.0 + 1e-9
    assert sim["epsilon_local"] > 1.0
    # unbiased estimate: within 5 stated standard deviations of the truth (seeded)
    (estimate,), (truth,), (std,) = sim["estimate"], sim["truth"], sim["expected_std"]
    assert abs(estimate - truth) <= 5 * std

    status, audit = report["audit"]
    assert status == 0
    assert json.dumps(audit).count("cnt_flip") >= 1

    onion = report["onion"]
    assert abs(onion["estimate"] - onion["truth"]) <= 5 * onion["std"]
    # the audit's randomizer family comes from the protocol object: 2-ary randomized response
    assert report["family"] == ["krr", 2]
