"""The workers a Dask scheduler knows now, read fresh from the scheduler.

Contract
--------
:func:`scheduler_identity` returns the scheduler's identity (address,
totals, and ``workers``: address -> that worker's identity: nthreads,
memory_limit, resources, host ...) for EVERY worker, as the scheduler has
it when the call is answered. :func:`workers_info` is its ``workers`` part.
Both take a synchronous :class:`distributed.Client`.

Method: one ``identity(n_workers=-1)`` call on the scheduler, its answer
returned as it came. Not ``Client.scheduler_info(n_workers=-1)``: that
method stores its answer on the client and returns the stored value, which
the client's own periodic refresh (``distributed.client.scheduler-info-
interval``, fetched with ``n_workers=0``: no workers at all) can overwrite
between the store and the return; under load a cluster of live workers
then reads as one without any (distributed 2026.7.1, ``Client.
_update_scheduler_info``).

Encoding: plain dicts of the scheduler's ``identity`` handler.
"""
from __future__ import annotations

__all__ = ["scheduler_identity", "workers_info"]


def scheduler_identity(client) -> dict:
    """The scheduler's identity with every worker, fetched by this call."""
    return client.sync(client.scheduler.identity, n_workers=-1)


def workers_info(client) -> dict:
    """Worker address -> its identity (nthreads, memory_limit, resources, ...), fetched by this call."""
    return scheduler_identity(client)["workers"]
