"""Cryptography of the report path: keys, onion layers, padding, Split-Mix, randomness,
signatures.

Imports nothing else of ours (the bottom layer, beside :mod:`protocols`). Every primitive
comes from libsodium (pynacl), pyca/cryptography, hashlib or randomgen's ChaCha20; nothing
here is home-made. The wire format the parties speak is :mod:`esa.net`'s.
"""

import typing as _typing

from ._errors import CryptoError as CryptoError
from ._errors import CryptoParameterError as CryptoParameterError
from ._errors import InvalidKey as InvalidKey
from ._errors import InvalidReport as InvalidReport
from ._errors import TLSConfigError as TLSConfigError
from ._keys import KEY_SIZE as KEY_SIZE
from ._keys import KeyDirectory as KeyDirectory
from ._keys import LayerPrivateKey as LayerPrivateKey
from ._keys import PartyKeys as PartyKeys
from ._keys import PartyPublic as PartyPublic
from ._keys import analyzer_name as analyzer_name
from ._keys import is_weak_verify_key as is_weak_verify_key
from ._keys import shuffler_name as shuffler_name
from ._onion import HEADER_SIZE as HEADER_SIZE
from ._onion import LAYER_OVERHEAD as LAYER_OVERHEAD
from ._onion import REPORT_VERSION as REPORT_VERSION
from ._onion import LayerHeader as LayerHeader
from ._onion import announce_progress as announce_progress
from ._onion import ephemeral_key_of as ephemeral_key_of
from ._onion import keep_freed_memory as keep_freed_memory
from ._onion import peel_batch as peel_batch
from ._onion import peel_records as peel_records
from ._onion import peel_report as peel_report
from ._onion import process_pool as process_pool
from ._onion import report_progress as report_progress
from ._onion import report_size as report_size
from ._onion import wrap_batch as wrap_batch
from ._onion import wrap_records as wrap_records
from ._onion import wrap_report as wrap_report
from ._padding import pad as pad
from ._padding import pad_rows as pad_rows
from ._padding import padded_size as padded_size
from ._padding import unpad as unpad
from ._padding import unpad_rows as unpad_rows
from ._random import csprng_generator as csprng_generator
from ._random import secure_permutation as secure_permutation
from ._random import secure_uniform_ints as secure_uniform_ints
from ._signatures import is_valid_signature as is_valid_signature
from ._signatures import sign as sign
from ._splitmix import combine_shares as combine_shares
from ._splitmix import split_mix as split_mix

if _typing.TYPE_CHECKING:
    from ._tls import check_certificate as check_certificate
    from ._tls import client_ssl_context as client_ssl_context
    from ._tls import issue_client_certificate as issue_client_certificate
    from ._tls import issue_party_certificate as issue_party_certificate
    from ._tls import load_certificate as load_certificate
    from ._tls import load_private_key as load_private_key
    from ._tls import make_deployment_ca as make_deployment_ca
    from ._tls import peer_common_name as peer_common_name
    from ._tls import save_certificate as save_certificate
    from ._tls import save_private_key as save_private_key
    from ._tls import server_ssl_context as server_ssl_context

# The TLS helpers (``_tls.__all__``, declared above for the type checker) load pyca/
# cryptography's X.509 module (0.07 s of CPU), which only the network parties and ``esa
# keygen`` use: :mod:`._tls` is imported on first use of one, or by ``dir(crypto)``.


def __getattr__(name: str) -> _typing.Any:
    if not name.startswith("_"):
        from . import _tls

        if name in _tls.__all__:
            value = getattr(_tls, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    from . import _tls

    return sorted({*globals(), *_tls.__all__})
