"""The names of the layers below that :mod:`esa` re-exports, so that every error of a run
and the ``rng`` type are importable from ``esa`` alone (documented with their packages)."""

from crypto import CryptoError as CryptoError
from crypto import InvalidReport as InvalidReport
from protocols import ParameterError as ParameterError
from protocols import ProtocolError as ProtocolError
from protocols import RNGLike as RNGLike
from protocols import as_generator as as_generator
