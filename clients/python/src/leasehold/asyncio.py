"""The lock classes of :mod:`leasehold` over ``redis.asyncio``: the same interface with
``await``, a drop-in for ``redis.asyncio.lock.Lock`` (``r.lock(name, lock_class=...)``); the
watchdog is a task and :attr:`Lock.lost` an ``asyncio.Event``. The pools of dedicated
connections are ``redis.asyncio``'s (:func:`configure_pools`); close them with ``await
close_pools(r)`` before the event loop ends."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Tuple, Type

import redis.asyncio
from redis.exceptions import (
    AskError,
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MovedError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

from ._pools import (
    QUEUE_BUDGET,
    QUEUE_SLACK,
    Budgeted,
    Master,
    borrow_args,
    configure_pools,
    pools_of,
    redirected,
)
from ._protocol import (
    REDIRECTS,
    TRY_AGAIN_DELAY,
    Grant,
    Learned,
    Lease,
    LockBase,
    NotReplicatedError,
    Number,
    Pipeline,
    QueuedOut,
    SetOf,
    TaskLocal,
    deadline_of,
    is_cluster,
    known_replicas,
    least_lease_ms,
    new_owner,
    to_ms,
)

if sys.version_info >= (3, 11, 3):
    from asyncio import timeout_at
else:  # what redis-py itself uses there (its dependency)
    from async_timeout import timeout_at


class BudgetedPool(Budgeted, redis.asyncio.BlockingConnectionPool):
    """A wait or sync pool: ``redis.asyncio``'s ``BlockingConnectionPool``, each caller
    queueing within its own budget."""


#: What ``BudgetedPool.get_connection`` takes on this redis-py.
BORROW_ARGS = borrow_args(redis.asyncio.BlockingConnectionPool)


__all__ = ["Lock", "MultiLock", "ReadWriteLock", "Semaphore", "SharedLock", "close_pools",
           "configure_pools"]


async def close_pools(redis: Any) -> None:
    """Closes the dedicated connections the lock classes keep beside ``redis`` (its wait and
    sync pools, see :func:`leasehold.configure_pools`): call it with ``await
    redis.aclose()``, before the event loop ends. A lock used on ``redis`` afterwards makes
    new pools; the replica counts learned are kept."""
    for pool in pools_of(redis).drain():
        await pool.disconnect()


@asynccontextmanager
async def borrowed(pool: BudgetedPool, deadline: Optional[float], wanted: int) -> AsyncIterator[Any]:
    """As :func:`leasehold.lock.borrowed`: a connection of ``pool``, queueing until
    ``deadline``; closed before it goes back if the block raised or was cancelled."""
    budget = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    token = QUEUE_BUDGET.set(budget)
    try:
        connection = await pool.get_connection(*BORROW_ARGS)
    except ConnectionError:
        if deadline is not None and time.monotonic() >= deadline - QUEUE_SLACK:
            raise QueuedOut(wanted) from None
        raise
    finally:
        QUEUE_BUDGET.reset(token)
    try:
        yield connection
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


async def exchange(connection: Any, pipeline: Pipeline, until: Optional[float]) -> None:
    """As :func:`leasehold.lock.exchange`."""
    sent = time.monotonic()
    pipeline.take(sent, await send(connection, pipeline.commands(), pipeline.within(), until))
    again = pipeline.again()
    if again is not None:
        command, within = again
        pipeline.take_again((await send(connection, [command], within, until))[0][0])


async def send(
    connection: Any, commands: List[List[Any]], within: Optional[float], until: Optional[float]
) -> List[Tuple[Any, float]]:
    """As :func:`leasehold.lock.send`; the connection's socket timeout does not apply."""
    deadline = deadline_of(within, until)
    if deadline is not None:  # on the loop's clock
        deadline += asyncio.get_running_loop().time() - time.monotonic()
    await connection.send_packed_command(connection.pack_commands(commands))
    try:
        async with timeout_at(deadline):
            return [await read(connection) for _ in commands]
    except asyncio.TimeoutError:
        raise TimeoutError("no reply in time; the connection is closed") from None


async def read(connection: Any) -> Tuple[Any, float]:
    """The next reply (an error reply as its exception), with when it was read."""
    try:
        reply = await connection.read_response(timeout=math.inf)
    except ResponseError as error:
        reply = error
    return reply, time.monotonic()


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
            grant = await self._wait(owner, blocking_timeout)
        else:
            grant = await self._try(owner)
        if grant is None:
            return False
        self._held(owner, grant)
        if self.watchdog:
            lease = self.local.lease
            self.local.keeper = Keeper(lambda ms, until: self._renew(owner, ms, lease, until),
                                       self._lease_ms(), lease)
        return True

    async def release(self) -> None:
        """Releases the lock (not synced). ``LockNotOwnedError`` when its lease had run out."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.")
        self._forget()
        if not self._whole(await self.redis.execute_command(*self._command("RELEASE", owner))):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned")

    async def extend(self, additional_time: Number, replace_ttl: bool = False) -> bool:
        """Adds ``additional_time`` seconds to the lease left, or replaces it; synced (see
        :meth:`leasehold.Lock.extend`)."""
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
        if not await self._renew(owner, lease_ms, self.local.lease):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        return True

    async def reacquire(self) -> bool:
        """Resets the lease to ``timeout``; synced (see :meth:`leasehold.Lock.reacquire`)."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        if not await self._renew(owner, self._lease_ms(), self.local.lease):
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

    async def _try(self, owner: Any) -> Optional[Grant]:
        try:
            if self.sync.off:
                sent = time.monotonic()
                reply = await self.redis.execute_command(*self._acquire_command(owner))
                return None if reply is None else Grant(reply, sent)
            try:
                pipeline = await self._exchange(
                    "sync", self._sync_deadline(None),
                    lambda learned, asking: self._try_pipeline(owner, learned, asking))
            except QueuedOut as queued:
                raise queued.not_replicated() from None
            return await self._kept(owner, pipeline)
        except TryAgainError:
            return None

    async def _wait(self, owner: Any, blocking_timeout: Optional[Number]) -> Optional[Grant]:
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return await self._try(owner)
            try:
                return await self._kept(owner, await self._exchange(
                    "wait", deadline,
                    lambda learned, asking: self._wait_pipeline(owner, learned, asking, deadline)))
            except QueuedOut:
                return None
            except TryAgainError:
                await asyncio.sleep(TRY_AGAIN_DELAY)
            except NotReplicatedError:
                if deadline is None or time.monotonic() >= deadline:
                    raise
            except (TimeoutError, ConnectionError):
                granted = await self._recover(owner)
                if granted is not None:
                    return granted

    async def _kept(self, owner: Any, pipeline: Pipeline) -> Optional[Grant]:
        """As :meth:`leasehold.Lock._kept`."""
        reply = pipeline.outcome()
        if reply is None:
            return None
        problem = pipeline.not_synced()
        if problem is not None:
            await self.redis.execute_command(*self._command("RELEASE", owner))
            raise problem
        return Grant(reply, pipeline.started)

    async def _exchange(
        self,
        kind: str,
        deadline: Optional[float],
        build: Callable[[Learned, bool], Pipeline],
        until: Optional[float] = None,
    ) -> Pipeline:
        """As :meth:`leasehold.Lock._exchange`."""
        pools = pools_of(self.redis)
        redirect = None
        for _ in range(REDIRECTS):
            master = await self._master(redirect)
            learned = pools.learned(master)
            pool = pools.pool(kind, master, BudgetedPool)
            async with borrowed(pool, deadline, known_replicas(self.sync, learned)) as connection:
                pipeline = build(learned, redirect is not None)
                await exchange(connection, pipeline, until)
            if isinstance(pipeline.reply, MovedError):
                redirect = None
                await self.redis.nodes_manager.initialize()
            elif isinstance(pipeline.reply, AskError):
                redirect = (pipeline.reply.host, int(pipeline.reply.port))
            else:
                return pipeline
        raise TryAgainError("the lock's slot kept moving")

    async def _master(self, redirect: Optional[Tuple[str, int]] = None) -> Master:
        """The server, or the master of the lock's slot in a ``RedisCluster`` (which learns its
        slots at its first command), or the one an ``ASK`` named."""
        if not is_cluster(self.redis):
            pool = self.redis.connection_pool
            return Master(None, pool.connection_class, pool.connection_kwargs)
        await self.redis.initialize()
        node = self.redis.get_node_from_key(self.name)
        master = Master(node.name, node.connection_class, node.connection_kwargs)
        return master if redirect is None else redirected(master, *redirect)

    async def _recover(self, owner: Any) -> Optional[Grant]:
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

    async def _renew(
        self, owner: Any, lease_ms: int, lease: Lease, until: Optional[float] = None
    ) -> bool:
        """As :meth:`leasehold.Lock._renew`."""
        if self.sync.off:
            sent = time.monotonic()
            reply = await self.redis.execute_command(*self._command("RENEW", owner, lease_ms))
            return self._whole(reply) and self._counted(lease, sent, lease_ms)
        try:
            pipeline = await self._exchange(
                "sync", self._sync_deadline(until),
                lambda learned, asking: self._renew_pipeline(owner, lease_ms, learned, asking, until),
                until)
        except QueuedOut as queued:
            raise queued.not_replicated() from None
        return self._renewal_counts(pipeline, lease, lease_ms)


class Keeper:
    """The watchdog as a task (see :class:`leasehold.lock.Keeper`): renews every third of the
    lease until stopped or refused; sets :attr:`lost` when the last synced lease ends first."""

    def __init__(
        self, renew: Callable[[int, float], Awaitable[bool]], lease_ms: int, lease: Lease
    ) -> None:
        self.lost = asyncio.Event()
        self._renew = renew
        self._lease_ms = lease_ms
        self._lease = lease
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        """Stops renewing (at release); a renewal in flight is cancelled, its connection closed."""
        self._task.cancel()

    async def _run(self) -> None:
        period = self._lease_ms / 3000
        renew_at = time.monotonic() + period
        while True:
            await asyncio.sleep(max(min(renew_at, self._lease.end) - time.monotonic(), 0))
            now = time.monotonic()
            if now >= self._lease.end:
                break
            if now < renew_at:
                continue
            renew_at = now + period
            try:
                if not await self._renew(self._lease_ms, self._lease.end):
                    break
            except RedisError:
                continue  # not synced, or no reply: try again while the lease lasts
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
