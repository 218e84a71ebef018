"""Lock classes for redis-py on the leasehold module: ``Lock`` is a drop-in for redis-py's own
(``r.lock(name, lock_class=leasehold.Lock)``), plus ``ReadWriteLock`` and ``Semaphore``.

Times are seconds (floats), as redis-py's ``Lock`` takes them; the module gets whole
milliseconds (``int(seconds * 1000)``, at least 1).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Callable, Optional, Type

from redis.exceptions import (
    AskError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MovedError,
    RedisError,
    TimeoutError,
    TryAgainError,
)

from ._protocol import (
    REDIRECTS,
    TRY_AGAIN_DELAY,
    LockBase,
    Master,
    Number,
    SetOf,
    NotReplicatedError,
    is_cluster,
    learned,
    least_lease_ms,
    new_owner,
    to_ms,
    wait_ms,
)


class Lock(LockBase):
    """A lock on the leasehold module with redis-py's ``Lock`` interface and behaviour.

    Where it differs from redis-py's:

    - Waiting (``blocking=True``) happens in the server (``LOCK.ACQUIRE ... WAIT``): the lock is
      handed to waiters in arrival order the moment it is free, on a connection made for the
      wait with a socket timeout longer than the wait, which is never retried. ``sleep`` is
      accepted and not needed. If the reply is lost (the socket timed out, the connection
      dropped), the lock asks again with the same owner, so it never holds a lock it reported
      not getting.
    - Every holding has a fencing token, :attr:`fencing_token`: pass it to the resource you
      write to, so it can reject a holder whose lease ran out.
    - A module lock always has a lease: with ``timeout=None`` it is 30 s, renewed by the
      watchdog until release. ``watchdog=True`` turns the watchdog on for any ``timeout``: a
      thread renews the lease every third of it, stops for good at release or when a renewal
      is refused (it never takes the lock back), and then sets :attr:`lost`.
    - ``locked()`` and ``owned()`` ask the module (``GET`` on a module lock is ``WRONGTYPE``).
    - Every grant reaches the master's replicas before ``acquire`` returns (``sync``, see
      :class:`leasehold.Sync`); when fewer acknowledge in time the lock releases the grant and
      raises :class:`leasehold.NotReplicatedError`, or with time left in ``blocking_timeout``
      tries again within it.
    """

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockError as error:
            self._released_on_exit(error)

    @property
    def lost(self) -> threading.Event:
        """Set once the current holding's lease is known lost (the watchdog's renewal was
        refused, or the lease ran out while it could not renew)."""
        keeper = self.local.keeper
        return keeper.lost if keeper is not None else threading.Event()

    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Takes the lock; ``True`` once held. ``blocking=False`` returns at once;
        otherwise waits up to ``blocking_timeout`` seconds (``None``: as long as it takes).
        ``token`` picks the owner (default: a new random one)."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self.redis.get_encoder().encode(token if token is not None else new_owner())
        if blocking:
            fencing = self._wait(owner, blocking_timeout)
        else:
            fencing = self._try(owner)
        if fencing is None:
            return False
        self._held(owner, fencing)
        if self.watchdog:
            self.local.keeper = Keeper(lambda ms: self._renew(owner, ms), self._lease_ms())
        return True

    def release(self) -> None:
        """Releases the lock. ``LockNotOwnedError`` when its lease had run out."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.")
        self._forget()
        if not self._whole(self.redis.execute_command(*self._command("RELEASE", owner))):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the lease left (a set's shortest), or with
        ``replace_ttl`` makes it the lease. ``LockNotOwnedError`` when the lease had run out (it
        is not brought back). The lease left is read first: the addition is off by the round
        trip."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot extend an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout")
        lease_ms = to_ms(additional_time, "additional_time")
        if not replace_ttl:
            infos = [self.redis.execute_command("LOCK.INFO", key) for key in self._keys()]
            left = least_lease_ms(infos, owner)
            if left is None:
                raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
            lease_ms += max(left, 0)
        if not self._renew(owner, lease_ms):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        return True

    def reacquire(self) -> bool:
        """Resets the lease to ``timeout``. ``LockNotOwnedError`` when it had run out."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        if not self._renew(owner, self._lease_ms()):
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        return True

    def locked(self) -> bool:
        """True if anyone holds the lock (any lock of a set)."""
        return any([self.redis.execute_command("LOCK.FENCE", key) is not None
                    for key in self._keys()])

    def owned(self) -> bool:
        """True if this lock (this thread, with ``thread_local``) holds it (every lock of a
        set)."""
        owner = self.local.token
        if owner is None:
            return False
        return all([self.redis.execute_command("LOCK.FENCE", key, owner) is not None
                    for key in self._keys()])

    def _try(self, owner: Any) -> Optional[int]:
        try:
            wanted = self._replicas_wanted()
            if wanted:
                return self._grant(owner, wanted, waiting=False)
            return self.redis.execute_command(*self._acquire_command(owner))
        except TryAgainError:
            return None

    def _replicas_wanted(self) -> int:
        """How many replicas a grant must reach (see :class:`leasehold.Sync`)."""
        if self.sync.replicas is not None:
            return self.sync.replicas
        master = self._master()
        known = learned(master.place)
        count = known.fresh()
        return count if count is not None else known.heard(master.info())

    def _master(self) -> Master:
        """The server, or the master of the lock's slot in a ``RedisCluster``."""
        if is_cluster(self.redis):
            client = self.redis.get_node_from_key(self.name).redis_connection
        else:
            client = self.redis
        pool = client.connection_pool
        return Master(pool.connection_class, pool.connection_kwargs, pool,
                      lambda: client.info("replication"))

    def _wait(self, owner: Any, blocking_timeout: Optional[Number]) -> Optional[int]:
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return self._try(owner)
            try:
                return self._grant(owner, self._replicas_wanted(), waiting=True, left=left)
            except TryAgainError:
                time.sleep(TRY_AGAIN_DELAY)
            except NotReplicatedError:
                if deadline is None or time.monotonic() >= deadline:
                    raise
            except (TimeoutError, ConnectionError):
                granted = self._recover(owner)
                if granted is not None:
                    return granted

    def _grant(
        self, owner: Any, wanted: int, waiting: bool, left: Optional[Number] = None
    ) -> Optional[int]:
        """One ``LOCK.ACQUIRE`` on a connection of its own — with ``waiting``, waiting up to
        ``left`` seconds (``None``: as long as it takes) — then, for a grant, the ``WAIT`` for
        ``wanted`` replicas on the same connection. A grant too few replicas have is released:
        ``NotReplicatedError``."""
        command = self._acquire_command(owner, wait_ms(left) if waiting else None)
        redirect = None
        for _ in range(REDIRECTS):
            master = self._master()
            kwargs = self._own_connection_kwargs(master, left if waiting else 0, wanted, redirect)
            connection = master.connection_class(**kwargs)
            try:
                if redirect is not None:
                    connection.send_command("ASKING")
                    connection.read_response()
                connection.send_command(*command)
                token = connection.read_response()
                if token is not None and wanted:
                    connection.send_command(*self.sync.wait_command(wanted))
                    acked = self.sync.acked(connection.read_response())
                    error = self._not_synced(acked, wanted, master)
                    if error is not None:
                        self.redis.execute_command(*self._command("RELEASE", owner))
                        raise error
                return token
            except MovedError:  # the slot moved: learn where
                redirect = None
                self.redis.nodes_manager.initialize()
            except AskError as error:  # the slot is moving and the lock is free here
                redirect = (error.host, int(error.port))
            finally:
                connection.disconnect()
        raise TryAgainError("the lock's slot kept moving")

    def _recover(self, owner: Any) -> Optional[int]:
        """The reply to a wait was lost: asks again without waiting, with the same owner (a
        holder gets its token back). If even that fails, releases in the background."""
        try:
            return self._try(owner)
        except RedisError:
            threading.Thread(target=self._release_eventually, args=(owner,), daemon=True).start()
            raise

    def _release_eventually(self, owner: Any) -> None:
        for attempt in range(20):
            try:
                self.redis.execute_command(*self._command("RELEASE", owner))
                return
            except RedisError:
                time.sleep(min(0.01 * 2**attempt, 1.0))

    def _renew(self, owner: Any, lease_ms: int) -> bool:
        return self._whole(self.redis.execute_command(*self._command("RENEW", owner, lease_ms)))

    def _forget(self) -> None:
        keeper = self.local.keeper
        if keeper is not None:
            keeper.stop()
        self.local.token = None
        self.local.fencing_token = None
        self.local.fencing_tokens = None
        self.local.keeper = None


class Keeper:
    """The watchdog: renews the lease every third of it in a daemon thread until stopped, a
    renewal is refused, or the lease it last renewed ran out while renewals failed; then sets
    :attr:`lost`. It never takes a lost lock back."""

    def __init__(self, renew: Callable[[int], bool], lease_ms: int) -> None:
        self.lost = threading.Event()
        self._stopped = threading.Event()
        self._renew = renew
        self._lease = lease_ms / 1000
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        """Stops renewing (at release)."""
        self._stopped.set()

    def _run(self) -> None:
        held_until = time.monotonic() + self._lease
        while not self._stopped.wait(self._lease / 3):
            sent = time.monotonic()
            try:
                renewed = self._renew(int(self._lease * 1000))
            except RedisError:
                if time.monotonic() >= held_until:
                    break
                continue
            if not renewed or self._stopped.is_set():
                break
            held_until = sent + self._lease
        if not self._stopped.is_set():
            self.lost.set()


class MultiLock(SetOf, Lock):
    """Several locks taken together, exclusively, all or none (``LOCK.MACQUIRE``), with the
    interface of :class:`Lock`: ``MultiLock(r, ["{order:42}:payment", "{order:42}:stock"],
    timeout=10, blocking_timeout=5)``. Waiting is in the server, in one arrival order with every
    other waiter of any of the keys, so sets asked for in any key order never deadlock, and no
    holder of part of a set waits for the rest. :attr:`fencing_tokens` has one token per key;
    the watchdog and ``reacquire`` renew every lease together (``LOCK.MRENEW``, all or none:
    a set with one lease run out counts as lost); ``release`` frees every key
    (``LOCK.MRELEASE``). In Redis Cluster the keys must share a slot (hash tags)."""


class SharedLock(Lock):
    """A reader of a :class:`ReadWriteLock` (``SHARED``)."""

    mode = ("SHARED",)


class ReadWriteLock:
    """Many readers or one writer, fair between them: a writer queued behind readers goes
    before readers that come after it. ``read`` and ``write`` are locks with redis-py's
    interface; the arguments are theirs."""

    def __init__(self, redis: Any, name: Any, **kwargs: Any) -> None:
        self.read = SharedLock(redis, name, **kwargs)
        self.write = Lock(redis, name, **kwargs)


class Semaphore(Lock):
    """At most ``permits`` holders at once (``SHARED LIMIT permits``), each with its own lease
    and fencing token. One permit per thread with ``thread_local`` (like a lock); make one
    ``Semaphore`` object per permit you hold at a time otherwise."""

    def __init__(self, redis: Any, name: Any, permits: int, **kwargs: Any) -> None:
        super().__init__(redis, name, **kwargs)
        self.permits = permits
        self.mode = ("SHARED", "LIMIT", permits)
