"""The error of a run that proves less privacy than was asked for.

Apart from the other errors (``_errors``) because it carries the run's result: it refers to
:class:`~esa.RunResult`, whose module imports the errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import ESAError

if TYPE_CHECKING:
    from ._pipeline import RunResult

__all__ = ["WeakerThanRequested"]


class WeakerThanRequested(ESAError):
    """A run proves a larger ε than requested, and a weaker guarantee was not accepted.

    Raised before anything runs when the configuration itself cannot prove the request; after
    the run when the run that happened proves less than its calibration (users lost or held,
    fakes missing), with the run's :class:`~esa.RunResult` as ``result`` so nothing is lost.
    """

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result
