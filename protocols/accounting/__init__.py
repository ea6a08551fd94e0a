"""Privacy accounting for the shuffle model: what ε a configuration proves, and what it cannot.

* Amplification theorems (the survey's Theorems 1–4, both directions) and the registry of
  bounds they and the numerical accountants join: :data:`BOUNDS`, :func:`tightest_central`,
  :func:`largest_local`, and :func:`resolve_bound` behind every ``bound=`` argument.
* Numerical accountants, one module each: the exact ε(δ) of shuffled binary randomized
  response, the clone reductions (FMT'21, FMT'23), the numerical k-RR privacy blanket, and
  the exact ε of shuffled k-RR for the worst all-equal dataset; :func:`shuffled_epsilon`
  picks the tightest of them for the audit.
* The laws they share: the exact hockey-stick divergence of two discrete laws and the
  binomial laws (:func:`epsilon_for_pair`, :func:`binomial_window`).
* Composition over epochs (:func:`compose`, :func:`per_epoch_epsilon`): PLD composition of
  :class:`PrivacyProfile` dominating pairs, (ε, δ) points (optimal: :func:`kov_epsilon`)
  and ε(δ) curves, with Rényi, naive and advanced numbers beside it; one epoch of a
  configured protocol as a profile (:func:`protocol_profile`, drop-outs included) and several
  metrics composed (:func:`compose_protocols`, :func:`fit_budget` for the inverse).
* Collusion scenarios (:func:`collusion_scenarios`) and the exact ε of the shuffled
  histogram at small n (:func:`worst_pair_epsilon`), the lower bound no proof can beat.

This sub-package imports only the shared base modules of :mod:`protocols` (``_base``,
``_errors``, ``_distributions``); the shuffle protocols import it.
"""

from ._amplification import BOUNDS as BOUNDS
from ._amplification import AmplificationBound as AmplificationBound
from ._amplification import BoundMethod as BoundMethod
from ._amplification import available_bounds as available_bounds
from ._amplification import krr_epsilon_from_lambda as krr_epsilon_from_lambda
from ._amplification import krr_lambda as krr_lambda
from ._amplification import largest_local as largest_local
from ._amplification import register_bound as register_bound
from ._amplification import resolve_bound as resolve_bound
from ._amplification import tightest_central as tightest_central
from ._binary_rr import binary_rr_epsilon as binary_rr_epsilon
from ._blanket import KRR_BLANKET_BOUND as KRR_BLANKET_BOUND
from ._blanket import krr_blanket_epsilon as krr_blanket_epsilon
from ._blanket import krr_blanket_reference_epsilon as krr_blanket_reference_epsilon
from ._blanket import krr_fakes_only_epsilon as krr_fakes_only_epsilon
from ._clones import clone_epsilon as clone_epsilon
from ._clones import fmt21_numerical_epsilon as fmt21_numerical_epsilon
from ._clones import stronger_clone_epsilon as stronger_clone_epsilon
from ._collusion import CollusionConfig as CollusionConfig
from ._collusion import ScenarioBound as ScenarioBound
from ._collusion import collusion_scenarios as collusion_scenarios
from ._collusion import murs_formula as murs_formula
from ._collusion import pair_lower_epsilon as pair_lower_epsilon
from ._collusion import resolve_colluding_users as resolve_colluding_users
from ._compose import ComposedGuarantee as ComposedGuarantee
from ._compose import CompositionMethod as CompositionMethod
from ._compose import PrivacyProfile as PrivacyProfile
from ._compose import ProfileKind as ProfileKind
from ._compose import binary_rr_profile as binary_rr_profile
from ._compose import clone_profile as clone_profile
from ._compose import compose as compose
from ._compose import fmt21_profile as fmt21_profile
from ._compose import kov_delta as kov_delta
from ._compose import kov_epsilon as kov_epsilon
from ._compose import krr_profile as krr_profile
from ._compose import per_epoch_epsilon as per_epoch_epsilon
from ._compose import stronger_clone_profile as stronger_clone_profile
from ._exact_shuffle import ExactPair as ExactPair
from ._exact_shuffle import histogram_distribution as histogram_distribution
from ._exact_shuffle import krr_matrix as krr_matrix
from ._exact_shuffle import pair_epsilon as pair_epsilon
from ._exact_shuffle import worst_pair_epsilon as worst_pair_epsilon
from ._krr_exact import krr_exact_epsilon as krr_exact_epsilon
from ._laws import binomial_window as binomial_window
from ._laws import epsilon_for_pair as epsilon_for_pair
from ._laws import hockey_stick as hockey_stick
from ._profiles import MetricProfile as MetricProfile
from ._profiles import ProtocolComposition as ProtocolComposition
from ._profiles import compose_protocols as compose_protocols
from ._profiles import fit_budget as fit_budget
from ._profiles import protocol_population as protocol_population
from ._profiles import protocol_profile as protocol_profile
from ._profiles import scenario_epsilon_over_epochs as scenario_epsilon_over_epochs
from ._shuffled import shuffled_epsilon as shuffled_epsilon
