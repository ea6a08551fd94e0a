"""``esa demo``: one meaningful run with real encryption, explained."""

from __future__ import annotations

import argparse
import math
import textwrap
from typing import Any

import numpy as np

import protocols

from .._common import emit_json, print_table
from .._data import DISTRIBUTIONS, generate_values
from .simulate import add_run_arguments, execute, show, warn

#: The one protocol the demo runs, and explains sentence by sentence (k-ary randomized
#: response, compared with plain k-RR): the demo's design, not a list of the registered
#: protocols, which ``esa simulate --protocol`` takes from the registry.
_PROTOCOL = "hist_kr"

_DEFAULTS = {"n": 20_000, "domain": 16, "shufflers": 3, "fake_reports": 200}

#: How the explanation names each synthetic distribution (of categorical values).
_DATA = {
    "zipf": "Zipf-like, P(j) ∝ 1/(j+1)^1.1",
    "uniform": "uniformly at random",
    "gaussian": "a discretized normal centred in the domain",
}

#: A shuffled run whose proven ε_c is this close to the request is compared at the request:
#: the calibration lands just under the target (bisection), not at a different privacy level.
_SAME_EPSILON = 1e-3

#: The smallest ε a randomizer takes (``protocols`` ``check_epsilon``). The shuffled run at
#: ``--epsilon 1e-6`` proves a hair below it (9.98·10^-7), where k-RR cannot be configured.
_MIN_EPSILON = 1e-6

#: Width of the explanation's paragraphs.
_WIDTH = 90


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="a default hist_kr run: real encryption, "
        f"{_DEFAULTS['shufflers']} shufflers, fakes, explained",
        description=f"Histogram of {_DEFAULTS['n']:,} synthetic users over "
        f"{_DEFAULTS['domain']} values with k-ary randomized response, onion-encrypted "
        f"through {_DEFAULTS['shufflers']} shufflers that each add {_DEFAULTS['fake_reports']} "
        "fakes, compared with a local-DP-only run at the same ε against the analyzer. The "
        "flags below change the run; the explanation printed after it describes the run "
        "actually made.",
    )
    add_run_arguments(p, n=_DEFAULTS["n"], domain=_DEFAULTS["domain"])
    # set_defaults also updates the actions' defaults; the help texts are simulate's, so
    # the ones that state a default, or simulate's options, are restated for the demo.
    p.set_defaults(
        handler=run, shufflers=_DEFAULTS["shufflers"], fake_reports=_DEFAULTS["fake_reports"]
    )
    _restate_help(p, "shufflers", "shufflers m (default %(default)s)")
    _restate_help(p, "fake_reports", "fakes each shuffler adds (default %(default)s)")
    _restate_help(
        p,
        "option",
        "hist_kr's parameter (repeatable): --option report_fragments=K splits each report "
        "into K fragments; the local-DP-only comparison run takes no options",
    )
    _restate_help(
        p,
        "bound",
        "force an amplification bound by name for the shuffled run; the local-DP-only run "
        "is compared at the ε_c that bound proves",
    )


def _restate_help(p: argparse.ArgumentParser, dest: str, text: str) -> None:
    for action in p._actions:
        if action.dest == dest:
            action.help = text
            return
    raise AssertionError(f"no {dest} argument to restate")  # pragma: no cover


def _comparison_epsilon(args: argparse.Namespace, j: dict[str, Any]) -> float:
    """The ε of the local-DP-only run: the shuffled run's proven ε_c against the analyzer.

    That is the request unless ``--bound`` (a looser bound proves less than the target) or
    the protocol (a proven ε_c above the request) moves it away. Never below the smallest ε
    k-RR takes: there local DP gets the larger ε, which favours it, not the shuffle."""
    proven = float(j["epsilon_central"])
    if math.isclose(proven, args.epsilon, rel_tol=_SAME_EPSILON):
        return max(float(args.epsilon), _MIN_EPSILON)
    return max(proven, _MIN_EPSILON)


def _local_only(args: argparse.Namespace, truth: np.ndarray, epsilon: float) -> dict[str, float]:
    """The same data under pure local DP at ε = ``epsilon``: what users pay without a
    shuffler (no amplification, so ``--bound`` does not apply; hist_kr reads no options)."""
    ldp = protocols.HistKR(domain=args.domain, epsilon_local=epsilon, n=args.n, delta=args.delta)
    data_rng, _ = np.random.default_rng(args.seed).spawn(2)  # the shuffled run's users
    values = generate_values(ldp, args.n, args.distribution, rng=data_rng)
    est = ldp.estimate(
        ldp.randomize(values, rng=np.random.default_rng([args.seed, 1])), n=args.n, n_fakes=0
    )
    err = est.values - truth
    return {
        "epsilon_local": epsilon,
        "rmse": float(np.sqrt(np.mean(err**2))),
        "expected_std": float(np.mean(np.sqrt(ldp.variance(truth, n=args.n)))),
    }


def _ratio(local_rmse: float, shuffled_rmse: float) -> float | None:
    """Local-only RMSE over the shuffled run's, or None when there is nothing to compare
    (a lost estimate has RMSE NaN, which is truthy)."""
    if not (math.isfinite(local_rmse) and math.isfinite(shuffled_rmse)) or shuffled_rmse <= 0:
        return None
    return local_rmse / shuffled_rmse


def _number(j: dict[str, Any], key: str) -> float:
    """The top-level number ``key`` of a JSON document: a ``null`` listed in ``non_finite``
    (a lost estimate's RMSE) is that non-finite value again, not an absence."""
    value = j[key]
    if value is None:
        return float(j.get("non_finite", {}).get(key, "nan"))
    return float(value)


def run(args: argparse.Namespace) -> int:
    result = execute(args, _PROTOCOL)
    j = result.to_json()
    eps_compare = _comparison_epsilon(args, j)
    local = _local_only(args, result.truth, eps_compare)
    j["local_dp_only"] = local
    j["rmse_ratio_local_over_shuffled"] = _ratio(local["rmse"], result.rmse)
    if args.json:
        emit_json(j)
        warn(j)
        return 0
    show(j)
    warn(j)
    lost = not math.isfinite(_number(j, "rmse"))
    print_table(
        "same privacy against the analyzer, with and without shuffling",
        ["run", "ε against the analyzer", "ε_l each user applies", "RMSE", "expected std"],
        [
            (
                "shuffled (this run)",
                j["epsilon_central"],
                j["epsilon_local"],
                "lost" if lost else j["rmse"],
                "lost" if lost else float(np.mean(j["expected_std"])),
            ),
            ("local DP only", eps_compare, eps_compare, local["rmse"], local["expected_std"]),
        ],
    )
    print(explain(args, j, local))
    return 0


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _paragraph(*sentences: str) -> str:
    return textwrap.fill(
        " ".join(sentences),
        width=_WIDTH,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )


def explain(args: argparse.Namespace, j: dict[str, Any], local: dict[str, float]) -> str:
    """What the run just made did, in words: every sentence follows its flags and results."""
    m, fakes, threshold = int(j["shufflers"]), int(j["fake_reports"]), int(j["threshold"])
    per_user = float(j["messages_per_user"])
    lost = not math.isfinite(_number(j, "rmse"))
    data = _DATA.get(args.distribution, DISTRIBUTIONS.get(args.distribution, args.distribution))
    sends = "one report" if per_user == 1 else f"{per_user:g} messages"
    notes = [] if j["protocol"] == _PROTOCOL else [str(j["protocol"])]
    if args.option:
        notes.append(f"--option {', '.join(args.option)}")
    options = f" ({'; '.join(notes)})" if notes else ""
    users = (
        f"{j['n']:,} users each hold one of {j['domain']} values ({data}). Each user "
        f"randomizes locally with k-ary randomized response at ε_l = {j['epsilon_local']:.2f} "
        f"and sends {sends}{options}."
    )
    if j["crypto"] == "onion":
        transport = (
            f"Each report is wrapped in {m + 1} onion layers (X25519 + ChaCha20-Poly1305, one "
            f"per shuffler and one for the analyzer) and goes through {_plural(m, 'shuffler')}."
        )
        hop = "Each shuffler drops invalid and replayed reports, peels its layer"
    else:
        transport = (
            f"Each report goes through {_plural(m, 'shuffler')} as a plaintext row (--crypto "
            "ideal: a stand-in for a perfect anonymous channel, with NO encryption)."
        )
        hop = "Each shuffler drops invalid and replayed reports"
    if threshold:
        hop += f", holds a crowd of fewer than {threshold:,} reports"
    if fakes:
        seeded = str(j.get("fakes_source", "")).startswith("seeded")
        hop += f", adds {fakes:,} uniform fakes" + (
            " (drawn from the run's seed)" if seeded else " (drawn from the OS CSPRNG)"
        )
    hop += " and permutes with the OS CSPRNG."
    if lost:
        analyzer = "The analyzer got no estimate out of this run (see the warning above)."
    elif fakes:
        analyzer = (
            "The analyzer removes the fakes' expected contribution and estimates the histogram."
        )
    else:
        analyzer = "The analyzer estimates the histogram."
    forced = f" (--bound {args.bound} requested)" if args.bound else ""
    privacy = (
        "Privacy: the analyzer alone sees a shuffled multiset, which is "
        f"(ε = {j['epsilon_central']:.2f}, δ = {j['delta']:g})-DP by {j['bound']}{forced}. If "
        "every shuffler colluded with the analyzer, a user would still have "
        f"ε_l = {j['epsilon_local']:.2f} from the local randomizer alone."
    )
    eps = local["epsilon_local"]
    utility = (
        f"Utility: for the same ε = {eps:.2f} against the analyzer, local DP alone (plain k-RR "
        f"at ε_l = {eps:.2f}, no shuffler, no options) gives RMSE {local['rmse']:.1f}"
    )
    if eps > float(j["epsilon_central"]) and eps == _MIN_EPSILON:
        utility = (
            f"Utility: the shuffled run proves ε = {j['epsilon_central']:.3g}, below the "
            f"{_MIN_EPSILON:g} a randomizer takes, so local DP alone (plain k-RR, no shuffler, "
            f"no options) is compared at ε_l = {eps:g}, a little more than the shuffled run "
            f"gets: it gives RMSE {local['rmse']:.1f}"
        )
    ratio = _ratio(local["rmse"], _number(j, "rmse"))
    if lost:
        utility += "; the shuffled run's estimate is lost, so there is no RMSE to compare it with."
    else:
        utility += f"; shuffling gives RMSE {j['rmse']:.1f}"
        if ratio is None:
            utility += "."
        elif ratio >= 1:
            utility += f" — {ratio:.1f}× smaller."
        else:
            utility += f" — {1 / ratio:.1f}× larger."
    return "\n".join(
        [
            "",
            "What you are looking at",
            _paragraph(users, transport, hop, analyzer),
            "",
            _paragraph(privacy),
            "",
            _paragraph(utility),
        ]
    )
