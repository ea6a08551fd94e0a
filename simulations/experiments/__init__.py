"""Survey §5 experiments: every registered protocol of a category against LDP and CDP baselines.

Wang & Meng's survey (seed 004) §5 compares the shuffle-model protocols of each problem by
RMSE, analyzer time and communication (messages per user) as ε_c, n, the domain d and the
data skew vary (Fig. 7–15), with a local-DP baseline (the same ε_c applied by every user)
and a central-DP baseline (Laplace noise on the exact statistic):

* ``counting`` (Fig. 7a, 8–10): bits ~ Ber(q); n = 10^6, ε_c = 0.9, q = 0.5; sweeps over
  ε_c, n and q. LDP: binary randomized response; CDP: Lap(1/ε_c) on the count.
* ``histogram`` (Fig. 7b, 11–13): a discretized normal over [d]; sweeps over ε_c, d and n;
  MURS shufflers add fakes worth 1 % of n. LDP: k-RR and OLH; CDP: Lap(2/ε_c) per bin.
* ``sum`` (Fig. 7c, 14–15): a normal on [0, 1]; sweeps over ε_c and n. LDP: Harmony;
  CDP: Lap(1/ε_c) on the sum.

Every shuffle protocol registered under the category (by name prefix, or by input kind for
names without a known prefix) runs through :func:`esa.run_pipeline` (``crypto="ideal"`` by
default: same statistics as the onion pipeline, see :mod:`esa`), one shuffler. A protocol that
refuses a grid point (``ParameterError``) is skipped there, with its reason in the CSV and the
log; one whose reports would exceed the message budget runs as a tally of the message
multiset when its estimator allows (PRHR, PUCM, PRRQ, Hist_MM: column ``representation``),
else it is skipped too. Outputs: ``<category>.csv``, one PNG per sweep plus an
overview PNG, and ``<category>_summary.md`` stating where our figures agree with the survey.
:func:`rebuild_experiments` writes the plots and the summary again from such a CSV, running
nothing (a full grid takes over an hour; its summary wording changes more often).

Modules: :mod:`.plan` (categories, the grid and its points, the row and result types),
:mod:`.run` (the runs, data and baselines), :mod:`.csv` (the CSV and its checks),
:mod:`.plots` (the PNGs) and :mod:`.summary` (the findings and the Markdown summary).
"""

import lazy_loader as _lazy

# Loaded on first use (the list is ``__init__.pyi``): ``esa`` registers its ``experiments``
# command without importing the runs, the pool and matplotlib's plots.
__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
