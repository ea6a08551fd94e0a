"""The ESA roles: Encoder, Shuffler, Analyzer, the pipeline, and the network services.

The in-process core (``_codec``, ``_roles``, ``_pipeline``) is here; the network services
are the sub-package :mod:`esa.net`, whose main names are re-exported here too. Every error
class of both is defined in one place and re-exported here.

Layer: imports :mod:`crypto` and :mod:`protocols`; never :mod:`simulations`.
"""

import typing as _typing  # private: every public name here is an explicit re-export

from crypto import CryptoError as CryptoError
from crypto import InvalidReport as InvalidReport
from protocols import ParameterError as ParameterError
from protocols import ProtocolError as ProtocolError
from protocols import RNGLike as RNGLike
from protocols import as_generator as as_generator

from ._codec import HopCodec as HopCodec
from ._codec import IdealCodec as IdealCodec
from ._codec import OnionCodec as OnionCodec
from ._codec import make_codec as make_codec
from ._data import DISTRIBUTIONS as DISTRIBUTIONS
from ._data import PreparedData as PreparedData
from ._data import as_column as as_column
from ._data import prepare_values as prepare_values
from ._data import read_column as read_column
from ._data import synthetic_values as synthetic_values
from ._document import json_document as json_document
from ._errors import BadSignature as BadSignature
from ._errors import ConfigError as ConfigError
from ._errors import ConflictingBatch as ConflictingBatch
from ._errors import DataError as DataError
from ._errors import EpochAhead as EpochAhead
from ._errors import ESAError as ESAError
from ._errors import FrameRefused as FrameRefused
from ._errors import FrameTooLarge as FrameTooLarge
from ._errors import GuaranteeMismatch as GuaranteeMismatch
from ._errors import InboxDamaged as InboxDamaged
from ._errors import InboxError as InboxError
from ._errors import MalformedFrame as MalformedFrame
from ._errors import PeerClosed as PeerClosed
from ._errors import PeerRejected as PeerRejected
from ._errors import ReadTimeout as ReadTimeout
from ._errors import ReplayedReport as ReplayedReport
from ._errors import ThresholdNotMet as ThresholdNotMet
from ._errors import TrapsNotProcessed as TrapsNotProcessed
from ._errors import UnknownKind as UnknownKind
from ._errors import UnsupportedVersion as UnsupportedVersion
from ._errors import WireError as WireError
from ._executor import available_cores as available_cores
from ._executor import resolve_executor as resolve_executor
from ._guarantee import RunFacts as RunFacts
from ._guarantee import RunGuarantee as RunGuarantee
from ._guarantee import run_facts as run_facts
from ._guarantee import run_guarantee as run_guarantee
from ._pipeline import PipelineConfig as PipelineConfig
from ._pipeline import RunResult as RunResult
from ._pipeline import check_held as check_held
from ._pipeline import encode_users as encode_users
from ._pipeline import run_pipeline as run_pipeline
from ._roles import Analyzer as Analyzer
from ._roles import AnalyzerOutput as AnalyzerOutput
from ._roles import Encoder as Encoder
from ._roles import HopCounters as HopCounters
from ._roles import Shuffler as Shuffler
from ._roles import reports_per_fake as reports_per_fake
from ._roles import split_messages as split_messages
from ._simulate import DEFAULT_DOMAIN as DEFAULT_DOMAIN
from ._simulate import WeakerThanRequested as WeakerThanRequested
from ._simulate import privacy_shortfall as privacy_shortfall
from ._simulate import resolve_data as resolve_data
from ._simulate import simulate as simulate
from ._simulate import users_values as users_values
from ._version import SCHEMA_VERSION as SCHEMA_VERSION
from ._version import __version__ as __version__

# Network services (trio TCP, durable inboxes): see docs/network.md. Loaded on first use
# (PEP 562), so that ``import esa`` and the commands that never talk to a party do not pay
# for trio and the services at start-up; ``from esa import serve`` works as before.
_NET_NAMES = frozenset(
    {
        "Address",
        "PartyConfig",
        "PartyService",
        "SubmitStats",
        "TrapSet",
        "chain_route",
        "close_epoch",
        "close_epochs_together",
        "commit_traps",
        "load_config",
        "load_protocol",
        "make_traps",
        "open_traps",
        "parse_address",
        "query",
        "serve",
        "submit_reports",
    }
)

if _typing.TYPE_CHECKING:
    from .net import Address as Address
    from .net import PartyConfig as PartyConfig
    from .net import PartyService as PartyService
    from .net import SubmitStats as SubmitStats
    from .net import TrapSet as TrapSet
    from .net import chain_route as chain_route
    from .net import close_epoch as close_epoch
    from .net import close_epochs_together as close_epochs_together
    from .net import commit_traps as commit_traps
    from .net import load_config as load_config
    from .net import load_protocol as load_protocol
    from .net import make_traps as make_traps
    from .net import open_traps as open_traps
    from .net import parse_address as parse_address
    from .net import query as query
    from .net import serve as serve
    from .net import submit_reports as submit_reports


def __getattr__(name: str) -> _typing.Any:
    """Import :mod:`esa.net` when one of its re-exported names is first asked for.

    The value is not cached in this module's namespace: the names stay :mod:`esa.net`'s
    (documented there), and ``dir(esa)`` lists the in-process core only.
    """
    if name in _NET_NAMES:
        from . import net

        return getattr(net, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
