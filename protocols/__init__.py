"""Shuffle-model mechanisms: randomizers, estimators and privacy accounting.

Pure numpy/scipy: this package knows nothing of bytes on a wire, sockets or keys, and
imports nothing else of ours (see DESIGN.md, "Layers").
"""

from ._amplification import BOUNDS as BOUNDS
from ._amplification import AmplificationBound as AmplificationBound
from ._amplification import available_bounds as available_bounds
from ._amplification import krr_epsilon_from_lambda as krr_epsilon_from_lambda
from ._amplification import krr_lambda as krr_lambda
from ._amplification import largest_local as largest_local
from ._amplification import register_bound as register_bound
from ._amplification import tightest_central as tightest_central
from ._base import Estimate as Estimate
from ._base import InputKind as InputKind
from ._base import PrivacyGuarantee as PrivacyGuarantee
from ._base import ShareSpec as ShareSpec
from ._base import ShuffleProtocol as ShuffleProtocol
from ._disele import DisEle as DisEle
from ._disele import DisEleParams as DisEleParams
from ._errors import BoundNotApplicable as BoundNotApplicable
from ._errors import InvalidMessage as InvalidMessage
from ._errors import ParameterError as ParameterError
from ._errors import ProtocolError as ProtocolError
from ._fragmenting import AttributeFragmenting as AttributeFragmenting
from ._fragmenting import OneHotFragmenting as OneHotFragmenting
from ._fragmenting import ReportFragmenting as ReportFragmenting
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
from ._hist_mm import HistMM as HistMM
from ._krr import CntRR as CntRR
from ._krr import HistKR as HistKR
from ._noise import binomial_noise as binomial_noise
from ._noise import discrete_laplace as discrete_laplace
from ._noise import distributed_geometric_shares as distributed_geometric_shares
from ._noise import geometric_alpha as geometric_alpha
from ._noise import laplace as laplace
from ._noise import polya as polya
from ._noise import polya_variance as polya_variance
from ._noise import symmetric_geometric as symmetric_geometric
from ._noise import symmetric_geometric_variance as symmetric_geometric_variance
from ._prhr import PRHR as PRHR
from ._prhr import PUCM as PUCM
from ._prrq import PRRQ as PRRQ
from ._registry import ProtocolSpec as ProtocolSpec
from ._registry import build_protocol as build_protocol
from ._registry import protocol_names as protocol_names
from ._registry import register_protocol as register_protocol
from ._slh import MURS as MURS
from ._slh import SLH as SLH
