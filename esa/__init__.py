"""The ESA roles: Encoder, Shuffler, Analyzer, the pipeline, and the network services.

Layer: imports :mod:`crypto` and :mod:`protocols`; never :mod:`simulations`.
"""

from crypto import CryptoError as CryptoError
from crypto import InvalidReport as InvalidReport
from protocols import ParameterError as ParameterError
from protocols import ProtocolError as ProtocolError

from ._errors import ConfigError as ConfigError
from ._errors import ESAError as ESAError
from ._errors import ReplayedReport as ReplayedReport
from ._errors import ThresholdNotMet as ThresholdNotMet
