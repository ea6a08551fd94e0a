"""The ESA roles: Encoder, Shuffler, Analyzer, the pipeline, and the network services.

Layer: imports :mod:`crypto` and :mod:`protocols`; never :mod:`simulations`.
"""

from crypto import CryptoError as CryptoError
from crypto import InvalidReport as InvalidReport
from protocols import ParameterError as ParameterError
from protocols import ProtocolError as ProtocolError

from ._codec import HopCodec as HopCodec
from ._codec import IdealCodec as IdealCodec
from ._codec import OnionCodec as OnionCodec
from ._codec import make_codec as make_codec

# Network services (trio TCP, durable inboxes): see docs/network.md.
from ._config import Address as Address
from ._config import PartyConfig as PartyConfig
from ._config import chain_route as chain_route
from ._config import load_config as load_config
from ._config import parse_address as parse_address
from ._errors import ConfigError as ConfigError
from ._errors import ESAError as ESAError
from ._errors import ReplayedReport as ReplayedReport
from ._errors import ThresholdNotMet as ThresholdNotMet
from ._net import SubmitStats as SubmitStats
from ._net import TrapSet as TrapSet
from ._net import close_epoch as close_epoch
from ._net import close_epochs_together as close_epochs_together
from ._net import commit_traps as commit_traps
from ._net import make_traps as make_traps
from ._net import open_traps as open_traps
from ._net import query as query
from ._net import submit_reports as submit_reports
from ._pipeline import PipelineConfig as PipelineConfig
from ._pipeline import RunResult as RunResult
from ._pipeline import check_held as check_held
from ._pipeline import run_pipeline as run_pipeline
from ._roles import Analyzer as Analyzer
from ._roles import AnalyzerOutput as AnalyzerOutput
from ._roles import Encoder as Encoder
from ._roles import HopCounters as HopCounters
from ._roles import Shuffler as Shuffler
from ._roles import reports_per_fake as reports_per_fake
from ._roles import split_messages as split_messages
from ._service import PartyService as PartyService
from ._service import load_protocol as load_protocol
from ._service import serve as serve
