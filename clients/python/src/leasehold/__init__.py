"""Lock classes for redis-py on the leasehold Redis module (module ``lock``, the ``LOCK.*``
commands).

``leasehold.Lock`` is a drop-in for redis-py's ``Lock``::

    import redis, leasehold

    r = redis.Redis(host="127.0.0.1", port=6379)
    with r.lock("invoice:42", timeout=30, blocking_timeout=5, lock_class=leasehold.Lock) as lock:
        write_invoice(data, fencing_token=lock.fencing_token)

with waiting in the server (fair, on a connection of its own whose socket timeout is longer
than the wait), a fencing token for every holding, grants synced to the master's replicas
before they are returned (:class:`Sync`), an optional watchdog, and
``ReadWriteLock``, ``Semaphore`` and ``MultiLock`` (several locks taken together, all or
none, without deadlock). ``leasehold.asyncio`` has the same classes for
``redis.asyncio``. Times are seconds, as in redis-py.
"""

from redis.exceptions import LockError, LockNotOwnedError

from ._protocol import SYNC_OFF, NotReplicatedError, Sync
from .lock import Lock, MultiLock, ReadWriteLock, Semaphore, SharedLock

__all__ = [
    "Lock",
    "MultiLock",
    "ReadWriteLock",
    "Semaphore",
    "SharedLock",
    "Sync",
    "SYNC_OFF",
    "LockError",
    "LockNotOwnedError",
    "NotReplicatedError",
]
__version__ = "0.3.0"
