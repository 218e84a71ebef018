"""Lock classes for redis-py on the leasehold Redis module (module ``lock``, the ``LOCK.*``
commands).

``leasehold.Lock`` is a drop-in for redis-py's ``Lock``::

    import redis, leasehold

    r = redis.Redis(host="127.0.0.1", port=6379)
    with r.lock("invoice:42", timeout=30, blocking_timeout=5, lock_class=leasehold.Lock) as lock:
        write_invoice(data, fencing_token=lock.fencing_token)

with waiting in the server (fair, on a pooled connection of its own whose reply may take as
long as the wait), a fencing token for every holding, grants and renewals synced to the
master's in-sync replicas before they count (:class:`Sync`: the write says ``SYNC`` and the
server replies once they have it, or ``NOREPLICAS``, raised as :class:`NotReplicatedError`; on
a pooled connection, :func:`configure_pools`), every holding tied to the client's session,
released by the server
soon after the client's process dies (:func:`configure_sessions`), an optional watchdog, and
``ReadWriteLock``, ``Semaphore`` and ``MultiLock`` (several locks taken together, all or
none, without deadlock), and ``Election`` (a leader chosen among candidates, in arrival
order: a campaign is a lock held by its leader, with an epoch that fences and a ``lost``
signal, see :mod:`leasehold.election`). A holding runs a Redis command only while it holds
the lock (``lock.guard("DECRBY", "stock:42", 1)``, ``LOCK.GUARD``: :class:`NotHeldError`
otherwise), and a command through a fence only with a token no smaller than the last that
wrote (``lock.fenced(fence, ...)``, :func:`fenced`: :class:`StaleTokenError` otherwise).
``leasehold.asyncio`` has the same classes for
``redis.asyncio``. Times are seconds, as in redis-py. Needs the leasehold lock module 0.7.0 or
later (synced writes: ``SYNC`` / ``NOSYNC``).
"""

from redis.exceptions import LockError, LockNotOwnedError

from ._pools import configure_pools, configure_sessions
from ._protocol import SYNC_OFF, NotHeldError, NotReplicatedError, StaleTokenError, Sync
from .election import Election, ElectionState, Leadership
from .lock import Lock, MultiLock, ReadWriteLock, Semaphore, SharedLock, close_pools, fenced

__all__ = [
    "Election",
    "ElectionState",
    "Leadership",
    "Lock",
    "MultiLock",
    "ReadWriteLock",
    "Semaphore",
    "SharedLock",
    "Sync",
    "SYNC_OFF",
    "configure_pools",
    "configure_sessions",
    "close_pools",
    "fenced",
    "LockError",
    "LockNotOwnedError",
    "NotHeldError",
    "NotReplicatedError",
    "StaleTokenError",
]
__version__ = "0.5.0"
