"""Cryptography of the report path: keys, onion layers, padding, Split-Mix, wire format.

Imports nothing else of ours (DESIGN.md, "Layers"). Every primitive comes from libsodium
(pynacl) or pyca/cryptography; nothing here is a home-made primitive.
"""

from ._errors import CryptoError as CryptoError
from ._errors import CryptoParameterError as CryptoParameterError
from ._errors import InvalidKey as InvalidKey
from ._errors import InvalidReport as InvalidReport
