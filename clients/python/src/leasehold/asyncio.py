"""The lock classes of :mod:`leasehold` over ``redis.asyncio``: the same interface with
``await``, a drop-in for ``redis.asyncio.lock.Lock`` (``r.lock(name, lock_class=...)``); the
watchdog is a task and :attr:`Lock.lost` an ``asyncio.Event``."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Any, Awaitable, Callable, Optional, Type

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
    NotReplicatedError,
    Number,
    SetOf,
    TaskLocal,
    is_cluster,
    learned,
    least_lease_ms,
    new_owner,
    to_ms,
    wait_ms,
)


class Lock(LockBase):
    """:class:`leasehold.Lock` for ``redis.asyncio`` clients; see it for the differences from
    redis-py's lock. With ``thread_local=True`` (the default) each asyncio task keeps its own
    holding, so tasks sharing one lock object exclude each other (redis-py's asyncio lock keeps
    it per thread, which every task of the loop shares): release a holding from the task that
    acquired it, or pass ``thread_local=False`` to share one holding between tasks."""

    holder_state = TaskLocal

    async def __aenter__(self) -> "Lock":
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except LockError as error:
            self._released_on_exit(error)

    @property
    def lost(self) -> asyncio.Event:
        """Set once the current holding's lease is known lost."""
        keeper = self.local.keeper
        return keeper.lost if keeper is not None else asyncio.Event()

    async def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Takes the lock; ``True`` once held (see :meth:`leasehold.Lock.acquire`)."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self.redis.get_encoder().encode(token if token is not None else new_owner())
        if blocking:
            fencing = await self._wait(owner, blocking_timeout)
        else:
            fencing = await self._try(owner)
        if fencing is None:
            return False
        self._held(owner, fencing)
        if self.watchdog:
            self.local.keeper = Keeper(lambda ms: self._renew(owner, ms), self._lease_ms())
        return True

    async def release(self) -> None:
        """Releases the lock. ``LockNotOwnedError`` when its lease had run out."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.")
        self._forget()
        if not self._whole(await self.redis.execute_command(*self._command("RELEASE", owner))):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the lease left, or replaces it."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot extend an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout")
        lease_ms = to_ms(additional_time, "additional_time")
        if not replace_ttl:
            infos = [await self.redis.execute_command("LOCK.INFO", key) for key in self._keys()]
            left = least_lease_ms(infos, owner)
            if left is None:
                raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
            lease_ms += max(left, 0)
        if not await self._renew(owner, lease_ms):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        return True

    async def reacquire(self) -> bool:
        """Resets the lease to ``timeout``."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        if not await self._renew(owner, self._lease_ms()):
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        return True

    async def locked(self) -> bool:
        """True if anyone holds the lock."""
        return any([await self.redis.execute_command("LOCK.FENCE", key) is not None
                    for key in self._keys()])

    async def owned(self) -> bool:
        """True if this lock holds it."""
        owner = self.local.token
        if owner is None:
            return False
        return all([await self.redis.execute_command("LOCK.FENCE", key, owner) is not None
                    for key in self._keys()])

    async def _try(self, owner: Any) -> Optional[int]:
        try:
            wanted = await self._replicas_wanted()
            if wanted:
                return await self._grant(owner, wanted, waiting=False)
            return await self.redis.execute_command(*self._acquire_command(owner))
        except TryAgainError:
            return None

    async def _replicas_wanted(self) -> int:
        if self.sync.replicas is not None:
            return self.sync.replicas
        master = await self._master()
        known = learned(master.place)
        count = known.fresh()
        return count if count is not None else known.heard(await master.info())

    async def _master(self) -> Master:
        """The server, or the master of the lock's slot in a ``RedisCluster`` (which learns its
        slots at its first command)."""
        if is_cluster(self.redis):
            await self.redis.initialize()
            node = self.redis.get_node_from_key(self.name)
            return Master(node.connection_class, node.connection_kwargs, node.name,
                          lambda: self.redis.execute_command("INFO", "replication", target_nodes=node))
        pool = self.redis.connection_pool
        return Master(pool.connection_class, pool.connection_kwargs, pool,
                      lambda: self.redis.info("replication"))

    async def _wait(self, owner: Any, blocking_timeout: Optional[Number]) -> Optional[int]:
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return await self._try(owner)
            try:
                return await self._grant(owner, await self._replicas_wanted(), waiting=True, left=left)
            except TryAgainError:
                await asyncio.sleep(TRY_AGAIN_DELAY)
            except NotReplicatedError:
                if deadline is None or time.monotonic() >= deadline:
                    raise
            except (TimeoutError, ConnectionError, asyncio.TimeoutError):
                granted = await self._recover(owner)
                if granted is not None:
                    return granted

    async def _grant(
        self, owner: Any, wanted: int, waiting: bool, left: Optional[Number] = None
    ) -> Optional[int]:
        """As :meth:`leasehold.Lock._grant`."""
        command = self._acquire_command(owner, wait_ms(left) if waiting else None)
        redirect = None
        for _ in range(REDIRECTS):
            master = await self._master()
            kwargs = self._own_connection_kwargs(master, left if waiting else 0, wanted, redirect)
            connection = master.connection_class(**kwargs)
            try:
                if redirect is not None:
                    await connection.send_command("ASKING")
                    await connection.read_response()
                await connection.send_command(*command)
                token = await connection.read_response()
                if token is not None and wanted:
                    await connection.send_command(*self.sync.wait_command(wanted))
                    acked = self.sync.acked(await connection.read_response())
                    error = self._not_synced(acked, wanted, master)
                    if error is not None:
                        await self.redis.execute_command(*self._command("RELEASE", owner))
                        raise error
                return token
            except MovedError:
                redirect = None
                await self.redis.nodes_manager.initialize()
            except AskError as error:
                redirect = (error.host, int(error.port))
            finally:
                await connection.disconnect()
        raise TryAgainError("the lock's slot kept moving")

    async def _recover(self, owner: Any) -> Optional[int]:
        try:
            return await self._try(owner)
        except RedisError:
            asyncio.ensure_future(self._release_eventually(owner))
            raise

    async def _release_eventually(self, owner: Any) -> None:
        for attempt in range(20):
            try:
                await self.redis.execute_command(*self._command("RELEASE", owner))
                return
            except RedisError:
                await asyncio.sleep(min(0.01 * 2**attempt, 1.0))

    async def _renew(self, owner: Any, lease_ms: int) -> bool:
        return self._whole(await self.redis.execute_command(*self._command("RENEW", owner, lease_ms)))

    def _forget(self) -> None:
        keeper = self.local.keeper
        if keeper is not None:
            keeper.stop()
        self.local.token = None
        self.local.fencing_token = None
        self.local.fencing_tokens = None
        self.local.keeper = None


class Keeper:
    """The watchdog as a task: renews every third of the lease until stopped, refused, or the
    lease ran out while renewals failed; then sets :attr:`lost`."""

    def __init__(self, renew: Callable[[int], Awaitable[bool]], lease_ms: int) -> None:
        self.lost = asyncio.Event()
        self._renew = renew
        self._lease = lease_ms / 1000
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        """Stops renewing (at release)."""
        self._task.cancel()

    async def _run(self) -> None:
        held_until = time.monotonic() + self._lease
        while True:
            await asyncio.sleep(self._lease / 3)
            sent = time.monotonic()
            try:
                renewed = await self._renew(int(self._lease * 1000))
            except RedisError:
                if time.monotonic() >= held_until:
                    break
                continue
            if not renewed:
                break
            held_until = sent + self._lease
        self.lost.set()


class MultiLock(SetOf, Lock):
    """:class:`leasehold.MultiLock` over ``redis.asyncio``."""


class SharedLock(Lock):
    """A reader of a :class:`ReadWriteLock` (``SHARED``)."""

    mode = ("SHARED",)


class ReadWriteLock:
    """:class:`leasehold.ReadWriteLock` over ``redis.asyncio``."""

    def __init__(self, redis: Any, name: Any, **kwargs: Any) -> None:
        self.read = SharedLock(redis, name, **kwargs)
        self.write = Lock(redis, name, **kwargs)


class Semaphore(Lock):
    """:class:`leasehold.Semaphore` over ``redis.asyncio``."""

    def __init__(self, redis: Any, name: Any, permits: int, **kwargs: Any) -> None:
        super().__init__(redis, name, **kwargs)
        self.permits = permits
        self.mode = ("SHARED", "LIMIT", permits)
