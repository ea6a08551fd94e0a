"""The chunk tasks of a run's parallel stages, as module-level functions.

Each runs wherever its executor puts it (this process, a local worker, a Dask worker), so it
takes everything it needs as arguments and returns a value that depends on them alone
(besides the OS CSPRNG the crypto draws its ephemeral keys from).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import crypto

__all__ = ["peel_chunk", "seal_chunk"]


def seal_chunk(
    codec: Any,
    payloads: npt.NDArray[np.uint8],
    crowd_ids: npt.NDArray[np.uint64],
    epoch: int,
    route: Sequence[bytes],
    first_hop: int,
) -> npt.NDArray[np.uint8]:
    """Onion records of one chunk of padded payloads (:func:`crypto.wrap_records`).

    Args:
        codec: unused (every codec's chunks share this signature).
        payloads: ``(k, P)`` padded payloads.
        crowd_ids: their crowd ids.
        epoch: epoch id bound into every layer.
        route: public keys of hops ``first_hop`` … analyzer.
        first_hop: global index of ``route[0]``.

    Returns:
        The ``(k, L)`` records.
    """
    del codec
    return crypto.wrap_records(
        payloads, route, epoch=epoch, crowd_ids=crowd_ids, first_hop=first_hop
    )


def peel_chunk(
    records: npt.NDArray[np.uint8], key: crypto.LayerPrivateKey, epoch: int, hop: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    """One hop's layer off one chunk of records (:func:`crypto.peel_records`).

    Args:
        records: ``(k, L)`` reports.
        key: the hop's layer private key.
        epoch: epoch id every layer must be bound to.
        hop: global index of the hop.

    Returns:
        ``(crowd_ids, inner, ok)`` per row.
    """
    return crypto.peel_records(records, key, epoch=epoch, hop=hop)
