"""Cryptography of the report path: keys, onion layers, padding, Split-Mix, randomness.

Imports nothing else of ours (DESIGN.md, "Layers"). Every primitive comes from libsodium
(pynacl), pyca/cryptography, hashlib or randomgen's ChaCha20; nothing here is home-made.
"""

from ._errors import CryptoError as CryptoError
from ._errors import CryptoParameterError as CryptoParameterError
from ._errors import InvalidKey as InvalidKey
from ._errors import InvalidReport as InvalidReport
from ._keys import KEY_SIZE as KEY_SIZE
from ._keys import KeyDirectory as KeyDirectory
from ._keys import LayerPrivateKey as LayerPrivateKey
from ._keys import PartyKeys as PartyKeys
from ._keys import PartyPublic as PartyPublic
from ._keys import analyzer_name as analyzer_name
from ._keys import shuffler_name as shuffler_name
from ._onion import HEADER_SIZE as HEADER_SIZE
from ._onion import LAYER_OVERHEAD as LAYER_OVERHEAD
from ._onion import REPORT_VERSION as REPORT_VERSION
from ._onion import LayerHeader as LayerHeader
from ._onion import ephemeral_key_of as ephemeral_key_of
from ._onion import peel_batch as peel_batch
from ._onion import peel_report as peel_report
from ._onion import report_size as report_size
from ._onion import wrap_batch as wrap_batch
from ._onion import wrap_report as wrap_report
from ._padding import pad as pad
from ._padding import pad_rows as pad_rows
from ._padding import padded_size as padded_size
from ._padding import unpad as unpad
from ._padding import unpad_rows as unpad_rows
from ._random import csprng_generator as csprng_generator
from ._random import secure_permutation as secure_permutation
from ._random import secure_uniform_ints as secure_uniform_ints
from ._splitmix import combine_shares as combine_shares
from ._splitmix import split_mix as split_mix
from ._wire import BATCH_ID_SIZE as BATCH_ID_SIZE
from ._wire import MAX_FRAME_SIZE as MAX_FRAME_SIZE
from ._wire import WIRE_VERSION as WIRE_VERSION
from ._wire import Ack as Ack
from ._wire import BadSignature as BadSignature
from ._wire import BatchChunk as BatchChunk
from ._wire import ControlCommand as ControlCommand
from ._wire import ControlFrame as ControlFrame
from ._wire import CountsFrame as CountsFrame
from ._wire import CountStatement as CountStatement
from ._wire import FrameKind as FrameKind
from ._wire import FrameTooLarge as FrameTooLarge
from ._wire import MalformedFrame as MalformedFrame
from ._wire import Query as Query
from ._wire import QueryKind as QueryKind
from ._wire import Reject as Reject
from ._wire import RejectReason as RejectReason
from ._wire import Reply as Reply
from ._wire import SubmitFrame as SubmitFrame
from ._wire import WireError as WireError
from ._wire import encode_frame as encode_frame
from ._wire import frame_length as frame_length
from ._wire import parse_ack as parse_ack
from ._wire import parse_query as parse_query
from ._wire import parse_reject as parse_reject
from ._wire import parse_reply as parse_reply
from ._wire import parse_submit as parse_submit
from ._wire import peek_kind as peek_kind
from ._wire import verify_batch as verify_batch
from ._wire import verify_control as verify_control
from ._wire import verify_counts as verify_counts
