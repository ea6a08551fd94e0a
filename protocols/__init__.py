"""Shuffle-model mechanisms: randomizers, estimators and privacy accounting.

Pure numpy/scipy: this package knows nothing of bytes on a wire, sockets or keys, and
imports nothing else of ours (it is the layer below ``esa``).

Layout: the shared base modules (``_errors``, ``_random``, ``_base``, ``_noise``,
``_messages``, ``_registry``); :mod:`protocols.ldp` (local randomizers and their audit) and
:mod:`protocols.accounting` (amplification bounds, numerical accountants, collusion), which
import only the base modules; and one module per shuffle protocol family on top, each
registering its protocols by name on import (:func:`register_protocol`). A new protocol is
one new module, its name in ``_registry.BUILTIN_MODULES`` and its exports in
``__init__.pyi``.
"""

import lazy_loader as _lazy

# Every public name is re-exported from the module that defines it, imported on first use:
# the list is ``__init__.pyi`` (what type checkers read too); a protocol module loads when
# one of its names is asked for, or when the registry is first consulted (``_registry``).
__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
