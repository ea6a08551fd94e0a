"""Local differential privacy: the randomizers each user runs before any shuffling.

* Frequency oracles over a domain [d] (k-RR, unary encodings, local hashing, Hadamard
  response, histogram encodings): :class:`FrequencyOracle`, :data:`FREQUENCY_ORACLES`.
* Mean estimators over [-1, 1] (Laplace, Duchi, piecewise, Harmony, ...):
  :class:`MeanMechanism`, :data:`MEAN_MECHANISMS`.
* Multidimensional data, by splitting ε or sampling attributes.
* The LDP audit: the ε a randomizer really satisfies, from its exact output law.

This sub-package imports only the shared base modules of :mod:`protocols` (``_base``,
``_errors``); the shuffle protocols that run an LDP randomizer (local hashing) import it.
"""

from ._audit import AUDITABLE as AUDITABLE
from ._audit import AuditResult as AuditResult
from ._audit import audit_density as audit_density
from ._audit import audit_discrete as audit_discrete
from ._audit import audit_mechanism as audit_mechanism
from ._audit import epsilon_range as epsilon_range
from ._audit import measured_epsilon_discrete as measured_epsilon_discrete
from ._audit import measured_epsilon_log_density as measured_epsilon_log_density
from ._freq_oracles import BLH as BLH
from ._freq_oracles import FREQUENCY_ORACLES as FREQUENCY_ORACLES
from ._freq_oracles import HR as HR
from ._freq_oracles import KRR as KRR
from ._freq_oracles import OLH as OLH
from ._freq_oracles import OUE as OUE
from ._freq_oracles import SHE as SHE
from ._freq_oracles import SUE as SUE
from ._freq_oracles import THE as THE
from ._freq_oracles import FrequencyOracle as FrequencyOracle
from ._freq_oracles import lh_hash as lh_hash
from ._freq_oracles import lh_seed_params as lh_seed_params
from ._freq_oracles import lh_support_counts as lh_support_counts
from ._freq_oracles import project_simplex as project_simplex
from ._freq_oracles import unpack_unary as unpack_unary
from ._mean import DCT as DCT
from ._mean import MEAN_MECHANISMS as MEAN_MECHANISMS
from ._mean import Duchi as Duchi
from ._mean import Harmony as Harmony
from ._mean import LaplaceMean as LaplaceMean
from ._mean import MeanMechanism as MeanMechanism
from ._mean import PiecewiseMechanism as PiecewiseMechanism
from ._multidim import AttributeReports as AttributeReports
from ._multidim import SampledAttributes as SampledAttributes
