"""Cryptography of the report path: keys, onion layers, padding, Split-Mix, randomness,
signatures.

Imports nothing else of ours (the bottom layer, beside :mod:`protocols`). Every primitive
comes from libsodium (pynacl), pyca/cryptography, hashlib or randomgen's ChaCha20; nothing
here is home-made. The wire format the parties speak is :mod:`esa.net`'s.
"""

import lazy_loader as _lazy

# Every public name is re-exported from the module that defines it, imported on first use:
# the list is ``__init__.pyi`` (what type checkers read too); the TLS helpers (pyca/
# cryptography's X.509) load only when one of them is asked for.
__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
