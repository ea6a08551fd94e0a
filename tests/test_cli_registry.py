"""A protocol registered in ``protocols`` reaches every ``esa`` command that takes a protocol
name, and the experiments' discovery, without an edit to ``simulations/``.

The registration runs in a child process so that the registry of this test session, which
other tests iterate over, is left as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(
    """
    import contextlib, io, json, sys

    from protocols import build_protocol, register_protocol

    @register_protocol("zz_new_counter")
    def _counter(spec):
        return build_protocol("cnt_rr", spec)

    @register_protocol("zz_new_histogram")
    def _histogram(spec):
        return build_protocol("hist_kr", spec)

    from simulations.cli import main
    from simulations.experiments import category_protocols

    def run(argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(argv)
        return code, json.loads(out.getvalue())

    _, listing = run(["protocols", "--json"])
    sim_code, sim = run(["simulate", "--protocol", "zz_new_counter", "--n", "2000",
                         "--crypto", "ideal", "--shufflers", "1", "--json"])
    audit_code, audit = run(["audit", "--protocol", "zz_new_counter", "--n", "2000",
                             "--epsilon", "1", "--json"])
    print(json.dumps({
        "listed": [p["name"] for p in listing["protocols"]],
        "simulate": [sim_code, sim["protocol"]],
        "audit": [audit_code, audit["protocol"]],
        "counting": category_protocols("counting"),
        "histogram": category_protocols("histogram"),
    }))
    """
)


def test_a_newly_registered_protocol_shows_up_everywhere() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"zz_new_counter", "zz_new_histogram"} <= set(seen["listed"])
    assert seen["simulate"] == [0, "cnt_rr"]  # the factory builds Cnt_RR under the new name
    assert seen["audit"] == [0, "zz_new_counter"]
    assert "zz_new_counter" in seen["counting"]
    assert "zz_new_histogram" in seen["histogram"]
    assert "zz_new_histogram" not in seen["counting"]
