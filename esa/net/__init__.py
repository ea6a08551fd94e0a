"""The ESA parties over the network: the wire format, clients, and the party service.

A deployment runs each shuffler and the analyzer as a trio TCP service (``esa serve``,
:class:`PartyService`) with a durable SQLite inbox (:class:`Inbox`); clients submit
reports (:func:`submit_reports`), the operator closes epochs (:func:`close_epoch`), an
auditor runs the trap audit (:func:`make_traps`, :func:`commit_traps`, :func:`open_traps`).
The frames they exchange are the wire format (:class:`FrameKind` and the frame classes),
signed through :mod:`crypto`'s Ed25519 API. Its errors live in :mod:`esa` with every other
(``esa.WireError`` …) and are re-exported here too. See docs/network.md.

Layer: imports :mod:`esa`'s in-process core, :mod:`crypto` and :mod:`protocols`; the core
never imports this package.
"""

from .._errors import BadSignature as BadSignature
from .._errors import ConflictingBatch as ConflictingBatch
from .._errors import EpochAhead as EpochAhead
from .._errors import FrameRefused as FrameRefused
from .._errors import FrameTooLarge as FrameTooLarge
from .._errors import InboxDamaged as InboxDamaged
from .._errors import InboxError as InboxError
from .._errors import MalformedFrame as MalformedFrame
from .._errors import PeerClosed as PeerClosed
from .._errors import PeerRejected as PeerRejected
from .._errors import ReadTimeout as ReadTimeout
from .._errors import TrapsNotProcessed as TrapsNotProcessed
from .._errors import UnknownKind as UnknownKind
from .._errors import UnsupportedVersion as UnsupportedVersion
from .._errors import WireError as WireError
from ._admission import Admission as Admission
from ._admission import address_group as address_group
from ._admission import mint_token as mint_token
from ._chain import batch_id_for as batch_id_for
from ._chain import check_chain as check_chain
from ._chain import check_thresholds as check_thresholds
from ._client import SubmitStats as SubmitStats
from ._client import close_epoch as close_epoch
from ._client import close_epochs_together as close_epochs_together
from ._client import query as query
from ._client import submit_reports as submit_reports
from ._config import Address as Address
from ._config import EpochRule as EpochRule
from ._config import Limits as Limits
from ._config import PartyConfig as PartyConfig
from ._config import TlsSettings as TlsSettings
from ._config import chain_route as chain_route
from ._config import config_from_dict as config_from_dict
from ._config import load_config as load_config
from ._config import load_protocol as load_protocol
from ._config import parse_address as parse_address
from ._config import protocol_table as protocol_table
from ._epochs import CONTROL_MAX_SKEW_MS as CONTROL_MAX_SKEW_MS
from ._epochs import CONTROL_WINDOW_MS as CONTROL_WINDOW_MS
from ._frames import ACCEPT_RETRY_SECONDS as ACCEPT_RETRY_SECONDS
from ._frames import FrameStream as FrameStream
from ._frames import expect_ack as expect_ack
from ._frames import request as request
from ._frames import serve_listeners as serve_listeners
from ._inbox import EpochRecord as EpochRecord
from ._inbox import Inbox as Inbox
from ._inbox import InboxCheck as InboxCheck
from ._inbox import OutboxEntry as OutboxEntry
from ._inbox import StoredEpoch as StoredEpoch
from ._inbox import TrapOpening as TrapOpening
from ._inbox import report_digest as report_digest
from ._manifest import Manifest as Manifest
from ._manifest import ManifestError as ManifestError
from ._manifest import load_manifest as load_manifest
from ._manifest import make_manifest as make_manifest
from ._manifest import parse_manifest as parse_manifest
from ._service import PartyService as PartyService
from ._service import serve as serve
from ._statedir import INBOX_FILE as INBOX_FILE
from ._statedir import LOCK_FILE as LOCK_FILE
from ._statedir import StateLock as StateLock
from ._statedir import lock_state_dir as lock_state_dir
from ._statedir import state_dir_in_use as state_dir_in_use
from ._tlsfiles import tls_client_context as tls_client_context
from ._tlsfiles import write_tls_material as write_tls_material
from ._traps import TRAP_COMMITMENT_SIZE as TRAP_COMMITMENT_SIZE
from ._traps import TRAP_KEY_SIZE as TRAP_KEY_SIZE
from ._traps import TRAP_NONCE_SIZE as TRAP_NONCE_SIZE
from ._traps import TrapAudit as TrapAudit
from ._traps import TrapSet as TrapSet
from ._traps import commit_traps as commit_traps
from ._traps import make_traps as make_traps
from ._traps import open_traps as open_traps
from ._traps import trap_commitment as trap_commitment
from ._traps import trap_statement as trap_statement
from ._wire import BATCH_ID_SIZE as BATCH_ID_SIZE
from ._wire import CONTROL_VERSION as CONTROL_VERSION
from ._wire import FRAME_HEADER_SIZE as FRAME_HEADER_SIZE
from ._wire import MAX_FRAME_SIZE as MAX_FRAME_SIZE
from ._wire import SIGNATURE_SIZE as SIGNATURE_SIZE
from ._wire import STATEMENT_SIZE as STATEMENT_SIZE
from ._wire import WIRE_VERSION as WIRE_VERSION
from ._wire import Ack as Ack
from ._wire import BatchChunk as BatchChunk
from ._wire import ClientToken as ClientToken
from ._wire import ControlCommand as ControlCommand
from ._wire import ControlFrame as ControlFrame
from ._wire import CountsFrame as CountsFrame
from ._wire import CountStatement as CountStatement
from ._wire import FrameKind as FrameKind
from ._wire import Query as Query
from ._wire import QueryKind as QueryKind
from ._wire import Reject as Reject
from ._wire import RejectReason as RejectReason
from ._wire import Reply as Reply
from ._wire import SubmitFrame as SubmitFrame
from ._wire import encode_frame as encode_frame
from ._wire import frame_length as frame_length
from ._wire import parse_ack as parse_ack
from ._wire import parse_query as parse_query
from ._wire import parse_reject as parse_reject
from ._wire import parse_reply as parse_reply
from ._wire import parse_submit as parse_submit
from ._wire import parse_token as parse_token
from ._wire import peek_kind as peek_kind
from ._wire import reports_header as reports_header
from ._wire import unverified_key_epoch as unverified_key_epoch
from ._wire import verify_batch as verify_batch
from ._wire import verify_control as verify_control
from ._wire import verify_counts as verify_counts
