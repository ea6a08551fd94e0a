"""LDP frequency oracles: ours vs pure-ldp and multi-freq-ldpy, side by side in one run.

For kRR, OUE, OLH and HR at ε = 1 and d ∈ {1024, 64}:

* randomize and aggregate throughput (reports/s). Ours runs on n = 10^6 users. The peers
  randomize and aggregate one report per Python call, so their cost per report is constant
  and they run on a subsample (``--peer-n``; pure-ldp's and multi-freq-ldpy's OLH aggregation,
  d hash evaluations in Python per report, on ``--peer-olh-n`` reports); the throughput is
  reports per second either way, and the output says which sample size each figure used.
* peak memory: every measurement runs in its own fresh process and reports its peak RSS
  (ru_maxrss, interpreter and numpy included).
* empirical variance of the count estimates against the closed form
  Var ĉ_i = (c_i p*(1−p*) + (n−c_i) q*(1−q*))/(p*−q*)², averaged over the bins, and the
  largest |mean error| in standard errors (a biased estimator shows up here: multi-freq-ldpy's
  "MI" estimator clips and renormalises).

Peers (optional ``bench`` extra, never a runtime dependency): ``pip install pure-ldp
multi-freq-ldpy``. Both take 1-based items by default in pure-ldp (``index_mapper`` x ↦ x−1
silently sends item 0 to d−1), so we pass the identity mapper and feed 0-based items.

Usage:
    python benchmarks/bench_ldp.py                 # full run (several minutes on 2 cores)
    python benchmarks/bench_ldp.py --quick         # smaller sizes, for a smoke test
    python benchmarks/bench_ldp.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np

MECHS = ("krr", "oue", "olh", "hr")
LIBS = ("ours", "pure-ldp", "multi-freq-ldpy")


# --- the three implementations behind one tiny interface ----------------------------------------
def _ours(mech: str, d: int, eps: float) -> tuple[Any, Any, Any]:
    from protocols import HR, KRR, OLH, OUE

    classes: dict[str, Any] = {"krr": KRR, "oue": OUE, "olh": OLH, "hr": HR}
    oracle = classes[mech](d=d, epsilon=eps)

    def randomize(x: np.ndarray, rng: np.random.Generator) -> Any:
        return oracle.randomize(x, rng=rng)

    def aggregate(reports: Any) -> np.ndarray:
        return np.asarray(oracle.aggregate(reports))

    return randomize, aggregate, oracle


def _pure(mech: str, d: int, eps: float) -> tuple[Any, Any, Any]:
    import pure_ldp.frequency_oracles as fo

    ident = lambda v: v  # noqa: E731 - 0-based items (the default mapper is x - 1)
    if mech == "krr":
        client, server = fo.DEClient(eps, d, ident), fo.DEServer(eps, d, ident)
    elif mech == "oue":
        client = fo.UEClient(eps, d, use_oue=True, index_mapper=ident)
        server = fo.UEServer(eps, d, use_oue=True, index_mapper=ident)
    elif mech == "olh":
        client = fo.LHClient(eps, d, use_olh=True, index_mapper=ident)
        server = fo.LHServer(eps, d, use_olh=True, index_mapper=ident)
    else:
        server = fo.HadamardResponseServer(eps, d, ident)
        client = fo.HadamardResponseClient(eps, d, server.get_hash_funcs(), ident)

    def randomize(x: np.ndarray, rng: np.random.Generator) -> Any:
        return [client.privatise(int(v)) for v in x]

    def aggregate(reports: Any) -> np.ndarray:
        server.reset()
        server.aggregate_all(reports)
        return np.asarray(server.estimate_all(range(d), suppress_warnings=True))

    return randomize, aggregate, None


def _mfl(mech: str, d: int, eps: float) -> tuple[Any, Any, Any]:
    from multi_freq_ldpy.pure_frequency_oracles import GRR, LH, UE

    cl: Any
    ag: Any
    if mech == "krr":
        cl, ag = (lambda v: GRR.GRR_Client(v, d, eps)), (lambda r: GRR.GRR_Aggregator_MI(r, d, eps))
    elif mech == "oue":
        cl = lambda v: UE.UE_Client(v, d, eps, optimal=True)  # noqa: E731
        ag = lambda r: UE.UE_Aggregator_MI(r, eps, optimal=True)  # noqa: E731
    elif mech == "olh":
        cl = lambda v: LH.LH_Client(v, d, eps, optimal=True)  # noqa: E731
        ag = lambda r: LH.LH_Aggregator_MI(r, d, eps, optimal=True)  # noqa: E731
    else:
        raise NotImplementedError("multi-freq-ldpy has no Hadamard response")

    def randomize(x: np.ndarray, rng: np.random.Generator) -> Any:
        return [cl(int(v)) for v in x]

    def aggregate(reports: Any) -> np.ndarray:
        # MI returns normalised frequencies (clipped, renormalised): scale back to counts
        return np.asarray(ag(reports)) * len(reports)

    return randomize, aggregate, None


BUILDERS = {"ours": _ours, "pure-ldp": _pure, "multi-freq-ldpy": _mfl}


def _data(n: int, d: int, seed: int) -> np.ndarray:
    """Zipf(1.1)-shaped values on [0, d), shuffled."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    return rng.choice(d, size=n, p=w / w.sum())


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- workers (one fresh process each) -----------------------------------------------------------
def worker_speed(
    lib: str, mech: str, d: int, eps: float, n: int, n_agg: int, best_of: int
) -> dict[str, Any]:
    randomize, aggregate, _ = BUILDERS[lib](mech, d, eps)
    x = _data(n, d, seed=1)
    rng = np.random.default_rng(2)
    aggregate(randomize(x[:20], rng))  # warm-up: numba JIT (multi-freq-ldpy), caches
    # best of k: the machine is shared, so the fastest run is the least disturbed one
    t_rand, t_agg = math.inf, math.inf
    for _ in range(best_of):
        t = time.perf_counter()
        reports = randomize(x, rng)
        t_rand = min(t_rand, time.perf_counter() - t)
        sub = reports[:n_agg]
        t = time.perf_counter()
        est = aggregate(sub)
        t_agg = min(t_agg, time.perf_counter() - t)
        assert est.shape == (d,)
        del reports, sub
    return {
        "randomize_n": n,
        "randomize_per_s": n / t_rand,
        "aggregate_n": n_agg,
        "aggregate_per_s": n_agg / t_agg,
        "best_of": best_of,
        "peak_rss_mb": _peak_rss_mb(),
    }


def worker_variance(
    lib: str, mech: str, d: int, eps: float, n: int, repeats: int
) -> dict[str, Any]:
    randomize, aggregate, _ = BUILDERS[lib](mech, d, eps)
    closed = BUILDERS["ours"](mech, d, eps)[2]
    x = _data(n, d, seed=3)
    truth = np.bincount(x, minlength=d)
    rng = np.random.default_rng(4)
    np.random.seed(5)  # the peers draw from numpy's and Python's global generators
    import random

    random.seed(6)
    est = np.stack([aggregate(randomize(x, rng)) for _ in range(repeats)])
    var_closed = closed.variance(truth, n)
    z = (est.mean(axis=0) - truth) / np.sqrt(var_closed / repeats)
    return {
        "n": n,
        "repeats": repeats,
        "var_ratio": float(est.var(axis=0, ddof=1).mean() / var_closed.mean()),
        "var_ratio_se": math.sqrt(2 / (repeats - 1) / d),
        "max_abs_mean_error_se": float(np.abs(z).max()),
        "mean_error_rms_se": float(np.sqrt(np.mean(z**2))),
    }


def _run_worker(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", *args]
    env = dict(os.environ)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--domains", default="1024,64")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--peer-n", type=int, default=20_000, help="peer randomize/aggregate sample")
    ap.add_argument("--peer-olh-n", type=int, default=2_000, help="peer OLH aggregation sample")
    ap.add_argument("--var-n", type=int, default=1_000)
    ap.add_argument("--var-repeats", type=int, default=100)
    ap.add_argument("--var-domain", type=int, default=64)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--mechs", default=",".join(MECHS))
    ap.add_argument("--best-of", type=int, default=3, help="timing runs per cell (fastest kept)")
    ap.add_argument("--skip-variance", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    warnings.simplefilter("ignore")
    if a.worker:
        kind, lib, mech, d, eps, n, m, k = a.worker
        if kind == "speed":
            res = worker_speed(lib, mech, int(d), float(eps), int(n), int(m), int(k))
        else:
            res = worker_variance(lib, mech, int(d), float(eps), int(n), int(m))
        print(json.dumps(res))
        return

    if a.quick:
        a.n, a.peer_n, a.peer_olh_n, a.var_n, a.var_repeats = 100_000, 2_000, 200, 500, 30
    domains = [int(v) for v in a.domains.split(",")]
    libs = [v for v in a.libs.split(",") if v]
    mechs = [v for v in a.mechs.split(",") if v]
    load = os.getloadavg()
    print(f"# bench_ldp  eps={a.epsilon}  n={a.n}  domains={domains}  cores={os.cpu_count()}  "
          f"loadavg(1,5,15)={load[0]:.1f},{load[1]:.1f},{load[2]:.1f}")  # fmt: skip
    results: dict[str, Any] = {"config": vars(a) | {"loadavg": load}, "speed": [], "variance": []}

    print("\n## throughput (reports/s) and peak RSS (MB), one fresh process per cell")
    print(f"{'d':>5} {'mech':5} {'library':16} {'randomize/s':>13} {'(n)':>9} "
          f"{'aggregate/s':>13} {'(n)':>9} {'RSS MB':>7}")  # fmt: skip
    for d in domains:
        for mech in mechs:
            row: dict[str, Any] = {}
            for lib in libs:
                if lib == "multi-freq-ldpy" and mech == "hr":
                    continue
                n = a.n if lib == "ours" else a.peer_n
                n_agg = n if (lib == "ours" or mech != "olh") else a.peer_olh_n
                res = _run_worker(
                    [
                        "speed",
                        lib,
                        mech,
                        str(d),
                        str(a.epsilon),
                        str(n),
                        str(n_agg),
                        str(a.best_of),
                    ],
                    3600,
                )
                row[lib] = res
                results["speed"].append({"d": d, "mech": mech, "lib": lib, **res})
                if "error" in res:
                    print(f"{d:>5} {mech:5} {lib:16} error: {res['error']}")
                    continue
                print(f"{d:>5} {mech:5} {lib:16} {res['randomize_per_s']:>13,.0f} "
                      f"{res['randomize_n']:>9} {res['aggregate_per_s']:>13,.0f} "
                      f"{res['aggregate_n']:>9} {res['peak_rss_mb']:>7.0f}")  # fmt: skip
            ours = row.get("ours", {})
            for lib in ("pure-ldp", "multi-freq-ldpy"):
                peer = row.get(lib, {})
                if "randomize_per_s" in ours and "randomize_per_s" in peer:
                    rr = ours["randomize_per_s"] / peer["randomize_per_s"]
                    ra = ours["aggregate_per_s"] / peer["aggregate_per_s"]
                    print(f"{'':>5} {'':5} {'ratio vs ' + lib:16} randomize {rr:,.0f}x   "
                          f"aggregate {ra:,.0f}x")  # fmt: skip
                    results["speed"].append(
                        {"d": d, "mech": mech, "ratio_vs": lib, "randomize": rr, "aggregate": ra}
                    )

    dv = a.var_domain
    if a.skip_variance:
        mechs = []
    else:
        print(f"\n## empirical variance / closed form at d={dv}, n={a.var_n}, "
              f"{a.var_repeats} repeats (mean over bins; ± is one standard error)")  # fmt: skip
        print(f"{'mech':5} {'library':16} {'var ratio':>14} {'max|err|/SE':>12} {'rms err/SE':>11}")
    for mech in mechs:
        for lib in libs:
            if lib == "multi-freq-ldpy" and mech == "hr":
                continue
            res = _run_worker(
                ["var", lib, mech, str(dv), str(a.epsilon), str(a.var_n), str(a.var_repeats), "1"],
                3600,
            )
            results["variance"].append({"mech": mech, "lib": lib, **res})
            if "error" in res:
                print(f"{mech:5} {lib:16} error: {res['error']}")
                continue
            ratio, se = res["var_ratio"], res["var_ratio_se"]
            zmax, zrms = res["max_abs_mean_error_se"], res["mean_error_rms_se"]
            print(f"{mech:5} {lib:16} {ratio:>8.3f} ± {se:.3f} {zmax:>12.1f} {zrms:>11.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
