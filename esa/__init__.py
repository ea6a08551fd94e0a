"""The ESA roles: Encoder, Shuffler, Analyzer, the pipeline, and the network services.

The in-process core (``_codec``, ``_roles``, ``_pipeline``) is here; the network services
are the sub-package :mod:`esa.net`, whose main names are re-exported here too. Every error
class of both is defined in one place and re-exported here.

Layer: imports :mod:`crypto` and :mod:`protocols`; never :mod:`simulations`.
"""

import lazy_loader as _lazy

# Every public name is re-exported from the module that defines it, imported on first use:
# the list is ``__init__.pyi`` (what type checkers read too); the network services (trio,
# esa.net) load only when one of their names is asked for.
__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
