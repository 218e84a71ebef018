"""Lock classes for redis-py on the leasehold module: ``Lock`` is a drop-in for redis-py's own
(``r.lock(name, lock_class=leasehold.Lock)``), plus ``ReadWriteLock`` and ``Semaphore``.

Times are seconds (floats), as redis-py's ``Lock`` takes them; the module gets whole
milliseconds (``int(seconds * 1000)``, at least 1).
"""

from __future__ import annotations

import math
import os
import select
import socket
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Callable, List, Optional, Set, Tuple, Type

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
    Master,
    pools_of,
    redirected,
    session_connection_kwargs,
)
from ._protocol import (
    REDIRECTS,
    WAIT_MARGIN,
    Batch,
    Batches,
    Queued,
    TRY_AGAIN_DELAY,
    Binding,
    Grant,
    Lease,
    LockBase,
    NotReplicatedError,
    Number,
    Pipeline,
    QueuedOut,
    Renewals,
    SessionSettings,
    SessionState,
    SetOf,
    Sync,
    Term,
    Write,
    binding_of,
    deadline_of,
    fenced_command,
    guarded_reply,
    is_cluster,
    least_lease_ms,
    logger,
    new_owner,
    no_such_session,
    open_command,
    opened,
    record_binding,
    round_trip,
    session_setup,
    time_left,
    to_ms,
    unknown_command,
    writing,
)

class BudgetedPool:
    """A wait or sync pool of redis-py connections to one master: at most ``max_connections``
    open, each lent to one caller at a time; a caller that finds them all lent waits for one
    within its own budget (:data:`QUEUE_BUDGET`) and then gets redis-py's ``ConnectionError``.
    A connection comes back closed when its reply was lost (:meth:`Lock._alone`), and connects
    again when next lent; an idle one is checked for a close or unread data first, as redis-py's
    pools do. Lighter than redis-py's ``BlockingConnectionPool``, whose lock, queue, events and
    metrics at each borrowing and return were a tenth of one thread's synced acquire beside
    the round trip. Thread-safe; a child process (``os.fork``) opens its own."""

    def __init__(self, max_connections: int, connection_class: Any, **connection_kwargs: Any) -> None:
        self.max_connections = max_connections
        self.connection_class = connection_class
        self.connection_kwargs = connection_kwargs
        self._cond = threading.Condition(threading.Lock())
        self._pid = os.getpid()
        #: Connections lent or idle, to close on :meth:`disconnect`.
        self._open: Set[Any] = set()
        #: Idle connections with when each came back, the last one first to go out again.
        self._idle: List[Tuple[Any, float]] = []

    def get_connection(self) -> Any:
        """A connection, connected: an idle one, a new one while fewer than ``max_connections``
        are open, or the next one given back, waited for up to the caller's budget."""
        budget = QUEUE_BUDGET.get()
        deadline = None if budget is None else time.monotonic() + budget
        with self._cond:
            if self._pid != os.getpid():  # the parent's connections are not this process's
                self._pid, self._open, self._idle = os.getpid(), set(), []
            while True:
                if self._idle:
                    connection, since = self._idle.pop()
                    break
                if len(self._open) < self.max_connections:
                    connection, since = self.connection_class(**self.connection_kwargs), None
                    self._open.add(connection)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ConnectionError("No connection available.")
                self._cond.wait(left)
        try:
            if since is None:
                connection.connect()
            else:
                # As redis-py's pools do: one the server closed meanwhile (a restart) is
                # reconnected here, not found dead by the write it carries.
                ensure_connected(connection)
        except BaseException:
            with self._cond:
                self._open.discard(connection)
                self._cond.notify()
            connection.disconnect()
            raise
        return connection

    def release(self, connection: Any) -> None:
        """Takes back a lent connection, for the next caller. One lent before
        :meth:`disconnect` (or by the parent process) is closed."""
        with self._cond:
            if connection in self._open:
                self._idle.append((connection, time.monotonic()))
                self._cond.notify()
                return
            self._cond.notify()
        connection.disconnect()

    def disconnect(self) -> None:
        """Closes every connection, idle now and lent ones as they come back."""
        with self._cond:
            connections, self._idle = list(self._open), []
            self._open = set()
            self._cond.notify_all()
        for connection in connections:
            connection.disconnect()


def ensure_connected(connection: Any) -> None:
    """Connects ``connection`` again if the server closed it, or left data unread on it: where
    :func:`polled` can tell, one ``poll`` that does not wait (a closed connection polls readable
    too); otherwise redis-py's ``can_read``, which sets the socket's timeout twice around a read
    (an ``ioctl`` each)."""
    connection.connect()
    try:
        unread = polled(connection, 0.0)
        if unread is None:
            unread = connection.can_read()
        if not unread:
            return
    except (ConnectionError, TimeoutError, OSError):
        pass
    connection.disconnect()
    connection.connect()


def polled(connection: Any, timeout: float) -> Optional[bool]:
    """Whether data (or the server's close) is there to read on ``connection`` within
    ``timeout`` seconds, by one ``poll``: bytes redis-py's parser holds unread count. ``None``
    where a ``poll`` cannot tell — a TLS socket (it holds decrypted bytes of its own), a parser
    that buffers in C (hiredis), no ``poll`` on the platform — for the caller to ask
    ``can_read``."""
    sock = socket_of(connection)
    parser = getattr(getattr(connection, "_conn", connection), "_parser", None)
    unread_bytes = getattr(getattr(parser, "_buffer", None), "unread_bytes", None)
    if type(sock) is not socket.socket or unread_bytes is None or not hasattr(select, "poll"):
        return None
    if unread_bytes():
        return True
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(math.ceil(timeout * 1000)))


def close_pools(redis: Any) -> None:
    """Closes the dedicated connections the lock classes keep beside ``redis`` (its wait and
    sync pools, see :func:`leasehold.configure_pools`) — with ``redis.close()``, say — and
    ends its sessions (``LOCK.SESSION CLOSE``, see :func:`leasehold.configure_sessions`): the
    server releases the holdings tied to them at once, and their ``lost`` is set. A lock used
    on ``redis`` afterwards makes new pools and a new session."""
    pools, sessions = pools_of(redis).drain()
    for session in sessions:
        session.close()
    for pool in pools:
        pool.disconnect()


def fenced(redis: Any, fence: Any, token: int, *command: Any, sync: Sync = Sync()) -> Any:
    """Runs one Redis command on ``redis`` only when ``token`` is at least the largest fencing
    token that ran a command through the fence ``fence`` — a key of the module's own type,
    made by the first such command — and raises the fence to ``token``
    (``LOCK.FENCED fence token command...``): check, command and fence in one step. Returns the
    command's reply. ``leasehold.fenced(r, "fence:stock:42", token, "DECRBY", "stock:42", 1)``
    for a token from a lock elsewhere (another server, :meth:`Lock.fenced` for a holding's
    own). In Redis Cluster the command's keys must be in the fence's slot (hash tags).

    Synced as ``sync`` says (:class:`leasehold.Sync`; the in-sync set by default: the reply
    comes once the master's in-sync replicas have the write, on a connection of the sync pool).
    Raises :class:`leasehold.StaleTokenError` when a larger token wrote first (the command did
    not run), :class:`leasehold.NotReplicatedError` when it ran on the master but the replicas
    did not acknowledge it in time (a failover may lose its write), and the command's own
    error as redis-py raises it."""
    return Lock(redis, fence, sync=sync)._run_synced(fence, fenced_command(fence, token, sync, command))


def borrow(pool: BudgetedPool, deadline: Optional[float]) -> Any:
    """A connection of ``pool``, queueing for it until ``deadline`` (``time.monotonic()``
    seconds; ``None``: until one is free) — :class:`QueuedOut` when that passes first;
    redis-py's ``ConnectionError`` when none can be opened."""
    token = QUEUE_BUDGET.set(time_left(deadline))
    try:
        return pool.get_connection()
    except ConnectionError:
        if deadline is not None and time.monotonic() >= deadline - QUEUE_SLACK:
            raise QueuedOut() from None
        raise
    finally:
        QUEUE_BUDGET.reset(token)


def exchange(
    connection: Any, pipeline: Pipeline, until: Optional[float], keep_binding: bool = False
) -> None:
    """Sends ``pipeline`` on ``connection`` and reads every reply, then tells its write whether
    the client's own ``WAIT`` (if any) synced it. Replies later than their time (or than
    ``until``) raise ``TimeoutError``, a dropped connection ``ConnectionError`` — the caller
    closes the connection then, and the server releases a grant it still held for it (one
    waiting to be synced).

    The pipeline is fitted to the session the connection is bound to (:meth:`Pipeline.on`:
    binding it with ``LOCK.SESSION USE`` in the same round trip when it is not bound to the
    current one), and what it is bound to after is kept on the connection
    (:class:`leasehold._protocol.Binding`). A connection bound to a session is closed first
    when a write is tied to none: it goes on a new server connection, bound to none. (redis-py
    reconnects only a connection with no socket, before sending: the socket seen here is the
    one the round trip goes on, or it raises.) With ``keep_binding`` — a command that ties
    nothing, a guarded one — the binding is left as it is."""
    if not keep_binding:
        binding = binding_of(connection, socket_of(connection))
        if binding.id is not None and pipeline.untied():
            connection.disconnect()
            binding = Binding(None)
        pipeline.on(binding)
    pipeline.take(send(connection, pipeline.commands(), pipeline.within(), until))
    if not keep_binding:
        record_binding(connection, pipeline.binding_after(binding, socket_of(connection)))
    pipeline.settle()


def socket_of(connection: Any) -> Any:
    """The socket ``connection`` talks on now (of the connection a redis-py client-side cache
    wraps, for one); ``None`` when not connected."""
    return getattr(getattr(connection, "_conn", connection), "_sock", None)


def send(
    connection: Any, commands: List[List[Any]], within: Optional[float], until: Optional[float]
) -> List[Tuple[Any, float]]:
    """Sends ``commands`` in one write and reads their replies in order (an error reply as its
    exception), each with when it was read; all within ``within`` seconds (``None``: no limit)
    and by ``until``."""
    deadline = deadline_of(within, until)
    connection.send_packed_command(connection.pack_commands(commands))
    return [read(connection, deadline) for _ in commands]


def read(connection: Any, deadline: Optional[float]) -> Tuple[Any, float]:
    """The next reply, which must begin by ``deadline`` (waited for by :func:`polled`, or
    ``can_read``); the connection's socket timeout applies to the rest of it."""
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    began = None if timeout is None else polled(connection, timeout)
    if began is None:
        began = connection.can_read(timeout=timeout)
    if not began:
        raise TimeoutError("no reply in time; the connection is closed")
    try:
        reply = connection.read_response()
    except ResponseError as error:
        reply = error
    return reply, time.monotonic()


def in_background(target: Callable[..., None], *args: Any) -> None:
    """Runs ``target(*args)`` in a daemon thread."""
    threading.Thread(target=target, args=args, daemon=True).start()


def release_eventually(redis: Any, release: List[Any]) -> None:
    """Sends ``release`` (a release as a holding's owner) on ``redis`` until the server answers
    it: 20 tries, backing off."""
    for attempt in range(20):
        try:
            redis.execute_command(*release)
            return
        except RedisError:
            time.sleep(min(0.01 * 2**attempt, 1.0))


def batched(redis: Any, master: Master, write: Write, sync: Sync, deadline: float) -> Write:
    """``write`` (a grant without waiting or a renewal, synced to the in-sync set or not synced
    at all) queued for a batch of ``master``'s (:class:`leasehold._protocol.Batches`), its reply taken. A caller that
    finds fewer than two senders running starts one (:func:`lead`); the others wait for their
    outcome, and take their write back when no batch took it by ``deadline`` (:class:`QueuedOut`:
    nothing was sent)."""
    pools = pools_of(redis)
    queue = pools.batches(master, write.term is None, sync.off)
    # The caller waits to acquire a lock the sender releases once it answered (lighter than an
    # Event, which is a condition and a lock).
    waiter = threading.Lock()
    waiter.acquire()
    queued = Queued(write, sync, waiter)
    try:
        if queue.push(queued) and lead(redis, pools.pool("sync", master, BudgetedPool), queue,
                                       queued, deadline):
            return write
        if not waiter.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            if queue.withdraw(queued):
                raise QueuedOut()
            # Taken: its reply comes within the batch's time, and by its ``until`` (a
            # watchdog's renewal: its lease's end, when it is reported lost rather than wait on).
            left = -1 if write.until is None else max(write.until - time.monotonic(), 0.0)
            if not waiter.acquire(timeout=left):
                raise TimeoutError("no reply in time")
    except BaseException:
        queue.withdraw(queued)
        raise
    if queued.error is not None:
        raise queued.error
    return write


def lead(redis: Any, pool: BudgetedPool, queue: Batches, queued: Queued, deadline: float) -> bool:
    """The caller whose write started a sender: borrows a sync connection by ``deadline``;
    ``True`` once it sent its own write alone (``SYNC``: one command, which the server undoes
    when it does not count — one task's latency as before batches); when others joined, a
    sender in the background sends them all (``False``: the caller waits for its outcome), and
    carries on with the writes that queued meanwhile until none waits."""
    try:
        connection = borrow(pool, deadline)
    except (QueuedOut, ConnectionError):
        # The role goes to a sender in the background, which waits as long as it takes (or
        # hands the writes the error); the caller takes its own write back, unless the other
        # sender took it meanwhile.
        taken_back = queue.withdraw(queued)
        in_background(send_batches, redis, pool, queue, None, [])
        if taken_back:
            raise
        return False
    except BaseException:
        in_background(send_batches, redis, pool, queue, None, [])
        raise
    writes = queue.take()
    if not writes:  # the other sender took them all: this role ended there
        pool.release(connection)
        return False
    if len(writes) > 1 or writes[0] is not queued:
        in_background(send_batches, redis, pool, queue, connection, writes)
        return False
    try:
        exchange(connection, Pipeline(queued.write, sync=queued.sync), queued.write.until)
    except BaseException:
        connection.disconnect()
        raise
    finally:
        more = queue.take()
        if more:
            in_background(send_batches, redis, pool, queue, connection, more)
        else:
            pool.release(connection)
    return True


def send_batches(redis: Any, pool: BudgetedPool, queue: Batches, connection: Any,
                 writes: List[Queued]) -> None:
    """A sender in the background (a thread): on ``connection`` (or one it borrows first, as
    long as that takes), ``writes`` first, then the writes waiting each time a batch is
    answered, until none waits. No connection to be had: the writes waiting get the error."""
    try:
        while True:
            if connection is None:
                try:
                    connection = borrow(pool, None)
                except Exception as error:
                    # No connection to be had: every write waiting gets the error, the role ends.
                    for one in [*writes, *queue.stop()]:
                        answer(one, error)
                    return
            if not writes:
                writes = queue.take()
                if not writes:
                    return
            sent, writes = writes, []
            if not sync_batch(redis, connection, sent):
                pool.release(connection)  # closed: the pool dials anew
                connection = None
    finally:
        if connection is not None:
            pool.release(connection)


def sync_batch(redis: Any, connection: Any, writes: List[Queued]) -> bool:
    """One round trip of a sender: a write alone as a :class:`Pipeline` (``SYNC``), several as
    a :class:`leasehold._protocol.Batch` (``NOSYNC`` each, then ``LOCK.SYNC``; see
    :func:`leasehold._protocol.round_trip` for syncing off); gives back what
    a refused batch made, and hands each caller its outcome. ``False`` when the connection was
    closed: the replies were lost — each caller gets the error, and a grant it may have made is
    released in the background."""
    sent, until = round_trip(writes)
    try:
        exchange(connection, sent, until)
    except Exception as error:
        connection.disconnect()
        for one in writes:
            if one.release is not None:
                in_background(release_eventually, redis, one.release)
            answer(one, error)
        return False
    refused = sent.refused() if isinstance(sent, Batch) else []
    for one in writes:
        if one not in refused:
            answer(one)
    return not refused or give_back(redis, connection, sent)


def give_back(redis: Any, connection: Any, batch: Batch) -> bool:
    """Gives back what ``batch`` made before its refused ``LOCK.SYNC``, as the server gives
    back a refused ``SYNC`` write — each grant released by its owner on ``connection`` (in the
    background when that fails), a renewal not counted — then tells their callers
    (:meth:`leasehold._protocol.Batch.given_back`). ``False`` when the connection was closed."""
    releases, replies, usable = batch.releases(), [], True
    if releases:
        try:
            replies = [reply for reply, _ in send(connection, releases, WAIT_MARGIN, None)]
        except Exception:
            connection.disconnect()
            usable = False
    for queued, error, later in batch.given_back(replies):
        if later is not None:
            in_background(release_eventually, redis, later)
        answer(queued, error)
    return usable


def answer(queued: Queued, error: Optional[BaseException] = None) -> None:
    """Hands a write's caller its outcome: its reply is the write's, or ``error``."""
    queued.error = error
    queued.waiter.release()


class Line:
    """A session's connection (``None`` while there is none), apart from the session so that
    its heartbeat can close it once the session is gone."""

    def __init__(self) -> None:
        self.connection: Any = None

    def drop(self) -> None:
        """Closes the connection (a reply may be unread); the next call makes a new one."""
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.disconnect()


class Session:
    """This client's session on one master (see :func:`leasehold.configure_sessions`): opened
    at the first acquire on a connection of its own, attached by a heartbeat thread every third
    of the grace (reconnecting when the connection dropped), reopened when the server no longer
    has it (its holdings then renewed with the new one), closed by :func:`close_pools`. A
    watcher thread sets the lost signal of every holding of a term whose deadline passed
    (:class:`leasehold._protocol.Term`), whatever the heartbeat's I/O is doing. Every thread
    using the client shares it. The connections of the pools are bound to its current id
    (``LOCK.SESSION USE``) by the round trips that carry grants and renewals (see
    :func:`exchange`): a new session needs nothing of its own for them."""

    def __init__(self, master: Master, settings: SessionSettings) -> None:
        self.master = master
        #: The process it belongs to (a forked child makes its own).
        self.pid = os.getpid()
        self.state = SessionState(settings)
        self._io = threading.Lock()
        self._line = Line()
        self._stopped = threading.Event()
        self._running = False
        weakref.finalize(self, self.state.stop)

    def term(self) -> Optional[Term]:
        """The session to tie a holding to: the current one, opened or attached again first
        when its deadline passed (the heartbeat started again if idle); ``None`` when the
        server has no sessions. Raises what the server's connection raised, or its error reply
        to ``OPEN``."""
        term = self.state.usable()
        if (term is not None and self._running) or self.state.unsupported or self._stopped.is_set():
            return term
        with self._io:
            term = self.state.usable()
            if term is None and not self.state.unsupported:
                self._refresh()
                term = self.state.usable()
            if term is not None:
                self._start()
        return term

    def gone(self, term: Term) -> None:
        """A command naming ``term`` was told ``no such session``: a new session replaces it
        (unless one did already), and its holdings are renewed with the new one."""
        with self._io:
            if self.state.current is term and term.holds():
                self._open(replaced=term)

    def close(self) -> None:
        """Ends the session (``LOCK.SESSION CLOSE`` on its connection if that is up: the server
        releases its holdings at once; else it ends a grace after the connection closed), stops
        the heartbeat and the watcher, and closes the connection. Its holdings are lost."""
        self._stopped.set()
        with self._io:
            term = self.state.current
            if term is not None and self._line.connection is not None:
                try:
                    self._call([["LOCK.SESSION", "CLOSE", term.id]], reconnect=False)
                except Exception as error:  # ends on its own after the grace
                    logger.debug("closing session %s: %r", term.id, error)
            self._line.drop()
            self.state.close()

    def _refresh(self) -> None:
        """Under the I/O lock: confirms the current term (``ATTACH``, reconnecting first if the
        connection dropped), or opens a session when there is none or the current one expired
        (closing that one: its holdings are already counted lost), or when the server no longer
        has it (then its holdings are renewed with the new one)."""
        self.state.expire_due()
        term = self.state.current
        if term is not None and term.holds():
            (reply,), sent = self._call([["LOCK.SESSION", "ATTACH", term.id]])
            if not isinstance(reply, Exception):
                self.state.confirmed(term, sent)
            elif no_such_session(reply):
                self._open(replaced=term)
            else:
                raise reply
            return
        stale = () if term is None else (["LOCK.SESSION", "CLOSE", term.id],)
        self._open(before=stale)

    def _open(self, replaced: Optional[Term] = None, before: Tuple[List[Any], ...] = ()) -> None:
        """Opens a session (after ``before``, whose replies do not matter) that replaces the
        current one; renews ``replaced``'s holdings with it."""
        replies, sent = self._call([*before, open_command(self.state.settings)])
        reply = replies[-1]
        if unknown_command(reply):
            logger.warning("the server has no sessions (LOCK.SESSION): holdings keep their "
                           "leases alone")
            self.state.unsupported = True
            return
        if isinstance(reply, Exception):
            raise reply
        new = self.state.opened(*opened(reply), sent)
        self._start()
        if replaced is not None:
            self._retie(replaced, new)

    def _retie(self, old: Term, new: Term) -> None:
        """Renews every live holding of ``old`` with ``new``'s id at once, one pipeline on the
        session's connection, each to the lease it has left (never longer): renewed, it is
        ``new``'s; refused, lost."""
        plan = self.state.to_retie(old)
        if not plan:
            return
        commands = [[*command, "SESSION", new.id] for _, _, command in plan]
        try:
            replies, sent = self._call(commands)
        except Exception as error:
            replies, sent = [error] * len(plan), time.monotonic()
        for (lease, ms, _), reply in zip(plan, replies):
            self.state.retied(old, new, lease, reply, sent, ms)

    def _call(self, commands: List[List[Any]], reconnect: bool = True) -> Tuple[List[Any], float]:
        """Sends ``commands`` on the session's connection — a new one first if there is none
        (``reconnect``), set up as a session's (:func:`leasehold._protocol.session_setup`) —
        and reads their replies (error replies as exceptions) within the grace. Returns them
        with when they were sent. A dropped connection, or no reply in time, closes it and
        raises ``ConnectionError`` / ``TimeoutError`` — except that a connection found dropped
        the first time it is used again (the server restarted, an idle ``timeout`` closed it)
        is replaced once, and the commands sent again (each may be: ``ATTACH`` and the
        renewals are idempotent, an ``OPEN`` whose reply was lost ends a grace later, empty)."""
        reused = self._line.connection is not None
        try:
            return self._send(commands, reconnect)
        except ConnectionError:
            if not (reused and reconnect):
                raise
        return self._send(commands, reconnect)

    def _send(self, commands: List[List[Any]], reconnect: bool) -> Tuple[List[Any], float]:
        """One try of :meth:`_call`."""
        grace = self.state.grace()
        connection, setup = self._line.connection, []
        if connection is None:
            if not reconnect:
                raise ConnectionError("the session's connection is closed")
            kwargs = session_connection_kwargs(self.master.connection_kwargs, grace)
            connection = self._line.connection = self.master.connection_class(**kwargs)
            setup = session_setup()
        try:
            if setup:
                connection.connect()
            sent = time.monotonic()
            replies = send(connection, [*setup, *commands], grace, None)
        except BaseException:
            self._line.drop()
            raise
        return [reply for reply, _ in replies[len(setup):]], sent

    def _beat(self) -> Optional[float]:
        """One heartbeat (:meth:`_refresh`); how long until the next, in seconds: a third of the
        grace, or a tenth after a failure while the session's holdings still count. ``None``
        to stop: closed, or idle (no holding, no acquire or renewal for
        :data:`leasehold._protocol.IDLE_AFTER`)."""
        with self._io:
            if self._stopped.is_set():
                return None
            if self.state.idle():
                self._running = False
                self.state.stop_watching()
                return None
            try:
                self._refresh()
                failed = False
            except Exception as error:
                logger.debug("session heartbeat: %r", error)
                self._line.drop()
                failed = True
        grace = self.state.grace()
        return grace / 10 if failed and self.state.usable() is not None else grace / 3

    def _start(self) -> None:
        """Starts the heartbeat and the watcher unless they run. Under the I/O lock."""
        if self._running:
            return
        self._running = True
        threading.Thread(target=heartbeat, args=(weakref.ref(self), self._line, self._stopped),
                         name="leasehold-session-heartbeat", daemon=True).start()
        if self.state.start_watching():
            threading.Thread(target=self.state.watch, name="leasehold-session-watcher",
                             daemon=True).start()


def heartbeat(ref: "weakref.ref[Session]", line: Line, stopped: threading.Event) -> None:
    """A session's heartbeat thread: beats until the session is closed, or collected (its
    client is gone: its connection is closed then, and the server ends it after the grace)."""
    while True:
        session = ref()
        if session is None:
            line.drop()
            return
        pause = session._beat()
        del session
        if pause is None or stopped.wait(pause):
            return


class Lock(LockBase):
    """A lock on the leasehold module with redis-py's ``Lock`` interface and behaviour.

    Where it differs from redis-py's:

    - Waiting (``blocking=True``) happens in the server (``LOCK.ACQUIRE ... WAIT``): the lock is
      handed to waiters in arrival order the moment it is free, on a connection of the
      client's wait pool (see :func:`leasehold.configure_pools`) whose reply may take as long
      as the wait, and which is never retried. ``sleep`` is accepted and not needed. If the
      reply is lost (no reply in time, the connection dropped), that connection is closed and
      the lock asks again with the same owner, so it never holds a lock it reported not
      getting.
    - Every holding has a fencing token, :attr:`fencing_token`: pass it to the resource you
      write to, so it can reject a holder whose lease ran out.
    - A module lock always has a lease: with ``timeout=None`` it is 30 s, renewed by the
      watchdog until release. ``watchdog=True`` turns the watchdog on for any ``timeout``: a
      thread renews the lease every third of it (one that did not count, again soon: see
      :class:`Keeper`), stops for good at release or when a renewal is refused because the
      lock is no longer held (it never takes the lock back), and then sets :attr:`lost`.
    - ``locked()`` and ``owned()`` ask the module (``GET`` on a module lock is ``WRONGTYPE``).
    - Every holding is tied to the client's session (see
      :func:`leasehold.configure_sessions`): the server releases it a grace after the client's
      session connection closed (a crashed process), and :attr:`lost` is set before that. The
      pooled connections are bound to the session once each (``LOCK.SESSION USE``), so grants
      and renewals carry no ``SESSION id``.
    - Every grant and every renewal reaches the master's replicas before it counts (``sync``,
      see :class:`leasehold.Sync`): by default it says ``SYNC`` and the server replies once
      its in-sync replicas have it (lock module 0.7.0 or later). A grant that does not count
      raises :class:`leasehold.NotReplicatedError` — released by the server (``NOREPLICAS``),
      or by the client after its own ``WAIT`` with ``Sync(replicas=n)`` — or with time left in
      ``blocking_timeout`` the lock tries again within it; such a renewal raises it from
      ``extend`` / ``reacquire`` and leaves :attr:`lease_end` where it was; the watchdog tries
      again every half second after each refusal and sets :attr:`lost` when that lease ends
      first. Releases are not synced.
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
        """Set once the current holding is known lost: the watchdog's renewal was refused, or
        :attr:`lease_end` came while no renewal could be synced, or — watched or not — its
        session's deadline passed without an answered heartbeat (the server may end the
        session and hand the lock on after it), or its session was closed
        (:func:`close_pools`) or could not take it over after a failover. Without a watchdog
        or a session, never set."""
        lease = self.local.lease
        return lease.lost if lease is not None else threading.Event()

    def acquire(
        self,
        sleep: Optional[Number] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[Number] = None,
        token: Optional[Any] = None,
    ) -> bool:
        """Takes the lock; ``True`` once held. ``blocking=False`` returns at once;
        otherwise waits up to ``blocking_timeout`` seconds (``None``: as long as it takes),
        queueing for a connection of the wait pool within that time when every one is waiting
        (see :func:`leasehold.configure_pools`). ``token`` picks the owner (default: a new
        random one). :class:`leasehold.NotReplicatedError` when the grant did not count — the
        master refused it (``NOREPLICAS``: its in-sync replicas did not all acknowledge within
        ``lock.sync-timeout-ms``, or the set is too small) and released it, see
        :class:`leasehold.Sync` — and no wait is left; the lock is free of this grant then.
        ``LockError`` when the server's module is older than 0.7.0 (no ``SYNC`` /
        ``NOSYNC``)."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self.redis.get_encoder().encode(token if token is not None else new_owner())
        if blocking:
            grant = self._wait(owner, blocking_timeout)
        else:
            grant = self._try(owner)
        if grant is None:
            return False
        self._held(owner, grant)
        if self.watchdog:
            lease = self.local.lease
            self.local.keeper = Keeper(lambda ms, until: self._renew(owner, ms, lease, until),
                                       self._lease_ms(), lease)
        return True

    def release(self) -> None:
        """Releases the lock (not synced: a lost release only delays the next holder).
        ``LockNotOwnedError`` when its lease had run out."""
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
        trip. Synced like a grant: :class:`leasehold.NotReplicatedError` when the master refused
        to count the renewal (``NOREPLICAS``: the lease before it is the one that counts) or
        the client's own ``WAIT`` did not sync it — it does not count, and :attr:`lease_end`
        stays where the last counted grant or renewal put it (sooner if the renewal asked for
        less than was left)."""
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
        if not self._renew(owner, lease_ms, self.local.lease):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        return True

    def reacquire(self) -> bool:
        """Resets the lease to ``timeout``. ``LockNotOwnedError`` when it had run out;
        :class:`leasehold.NotReplicatedError` when it did not count (as :meth:`extend`)."""
        owner = self.local.token
        if owner is None:
            raise LockError("Cannot reacquire an unlocked lock")
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout")
        if not self._renew(owner, self._lease_ms(), self.local.lease):
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        return True

    def guard(self, *command: Any) -> Any:
        """Runs one Redis command — ``lock.guard("DECRBY", "stock:42", 1)`` — only while this
        holding holds the lock, with its fencing token (``LOCK.GUARD name owner TOKEN token
        command...``): the server checks and runs it in one step, so a holder whose lease ended,
        or whose lock was lost and taken again (by anyone, itself too), changes nothing. Returns
        the command's reply as the server gave it (raw, as ``execute_command`` returns a module
        command's reply).

        Synced like a renewal (:attr:`sync`): by default it says ``SYNC``, goes on a connection
        of the sync pool, and the server replies once its in-sync replicas have the write
        (a command that does not write replies at once). In Redis Cluster the command's keys must
        be in the lock's slot (hash tags: ``{order:42}:lock``, ``{order:42}:stock``).

        Raises :class:`leasehold.NotHeldError` (a ``LockNotOwnedError``) when the server refused
        it — the lock is free, held by another owner, or held with another token: the command did
        not run; :class:`leasehold.NotReplicatedError` when it ran on the master but the
        replicas did not acknowledge it in time (a failover may lose its write); the command's
        own error as redis-py raises it; ``LockError`` when not held, or on a ``MultiLock``."""
        return self._run_synced(self.name, self._guarded(command))

    def fenced(self, fence: Any, *command: Any) -> Any:
        """Runs one Redis command through the fence ``fence`` with this holding's fencing token
        (``LOCK.FENCED fence token command...``, see :func:`leasehold.fenced`): only when no
        larger token ran a command through it before, and the fence then keeps this token.
        Returns the command's reply. For writers whose lock is elsewhere (another server,
        Redlock): the fence refuses every holder older than the newest that wrote.

        Synced as :meth:`guard` is. Raises :class:`leasehold.StaleTokenError` when a larger
        token wrote first (the command did not run), :class:`leasehold.NotReplicatedError` as
        :meth:`guard`, the command's own error; ``LockError`` when not held."""
        return self._run_synced(fence, self._fenced_by_holding(fence, command))

    def _run_synced(self, key: Any, command: List[Any]) -> Any:
        """A guarded or fenced ``command`` (saying ``SYNC`` or ``NOSYNC``), routed by ``key``:
        with syncing off on the client's own connection; otherwise on a connection of the sync
        pool — the server may hold its reply until the in-sync set has the write — queueing for
        one within the sync timeout, and with the client's own ``WAIT`` behind it for a fixed
        count. The connection's session binding is left as it is: these commands tie nothing."""
        write = Write(command, lambda reply: True, mapped=guarded_reply)
        if self.sync.off:
            try:
                write.reply = self.redis.execute_command(*command)
            except ResponseError as error:
                write.reply = guarded_reply(error)
            return write.outcome()
        deadline = self._sync_deadline(None)

        def send_to(master: Master, asking: bool, term: Optional[Term]) -> Write:
            # These commands tie nothing: the connection's session binding is left as it is.
            return self._alone(
                "sync", master, deadline, lambda: Pipeline(write, sync=self.sync, asking=asking),
                keep_binding=True)

        try:
            self._routed(send_to, key=key, sessions=False)
        except QueuedOut as queued:
            raise queued.not_replicated() from None
        reply = write.outcome()
        if write.problem is not None:
            raise write.problem
        return reply

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

    def _try(self, owner: Any) -> Optional[Grant]:
        """One grant without waiting, synced as :attr:`sync` says; ``None`` when the lock is
        busy."""
        try:
            return self._kept(owner, self._synced(self._grant_write(owner)))
        except TryAgainError:
            return None

    def _wait(self, owner: Any, blocking_timeout: Optional[Number]) -> Optional[Grant]:
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return self._try(owner)
            try:
                return self._kept(owner, self._waited(owner, deadline))
            except QueuedOut:
                return None  # the wait ran out while queued for a connection
            except TryAgainError:
                time.sleep(TRY_AGAIN_DELAY)
            except NotReplicatedError as refused:
                # Not again with an owner being released in the background (left_behind).
                if deadline is None or time.monotonic() >= deadline or refused.left_behind:
                    raise
            except (TimeoutError, ConnectionError):
                granted = self._recover(owner)
                if granted is not None:
                    return granted

    def _kept(self, owner: Any, write: Write) -> Optional[Grant]:
        """The grant a write made, once synced; ``None`` when there was none. A grant the
        server refused to count (``NOREPLICAS``) raises :class:`NotReplicatedError` here and is
        not released: the server released it — unless a master that became a replica says it
        released nothing, then it is released (owner-checked) in the background, wherever the
        client's connection finds the master. One that counted there and cannot be kept
        (:meth:`_unkept`) is released (owner-checked), and the reason raised."""
        try:
            reply = write.outcome()
        except NotReplicatedError as refused:
            if refused.left_behind:
                threading.Thread(target=self._release_eventually, args=(owner,),
                                 daemon=True).start()
            raise
        if reply is None:
            return None
        unkept = self._unkept(write)
        if unkept is not None:
            self.redis.execute_command(*self._command("RELEASE", owner))
            raise unkept
        return Grant(reply, write.started, write.term)

    def _waited(self, owner: Any, deadline: Optional[float]) -> Write:
        """A blocking acquire on a connection of the wait pool, queueing for one until
        ``deadline`` (:class:`QueuedOut` after), waiting in the server until then, and
        synced."""
        return self._routed(lambda master, asking, term: self._alone(
            "wait", master, deadline,
            lambda: self._wait_pipeline(owner, asking, deadline, term)))

    def _synced(self, write: Write) -> Write:
        """``write`` (a grant without waiting, or a renewal) on a connection of its master's
        sync pool, held by the server until synced (``SYNC``), or followed by the client's own
        ``WAIT``, or with syncing off answered at once (``NOSYNC``; see :class:`leasehold.Sync`);
        with those sent at the same time when they can go together (:func:`batched`).
        :class:`NotReplicatedError` when no sync connection came free within the sync timeout
        (nothing was sent)."""
        deadline = self._sync_deadline(write.until)
        try:
            return self._routed(lambda master, asking, term: self._synced_to(
                master, asking, write, deadline, term))
        except QueuedOut as queued:
            raise queued.not_replicated() from None

    def _synced_to(
        self, master: Master, asking: bool, write: Write, deadline: float, term: Optional[Term]
    ) -> Write:
        """``write`` sent to ``master`` (see :meth:`_synced`) naming ``term``'s session,
        queueing for a connection until ``deadline``."""
        write.tie(term)
        if not asking and write.undo is not None and self.sync.batches:
            return batched(self.redis, master, write, self.sync, deadline)
        return self._alone(
            "sync", master, deadline,
            lambda: Pipeline(write, sync=self.sync, asking=asking), write.until)

    def _routed(
        self,
        send: Callable[[Master, bool, Optional[Term]], Write],
        key: Any = None,
        sessions: bool = True,
    ) -> Write:
        """The write ``send(master, asking, term)`` sends to the lock's master (``key``'s, when
        given) naming the client's session there (``term``; ``None`` with sessions off, or
        without ``sessions``: a command that ties nothing); follows ``MOVED`` (the client
        relearns the slots) and ``ASK`` (``asking`` then: ``ASKING`` first, on the importing
        master), and sends it again with a new session when the server had no such session
        (after a failover or a restart)."""
        redirect = None
        for attempt in range(REDIRECTS):
            master = self._master(redirect, key)
            session = pools_of(self.redis).session(master, Session) if sessions else None
            with writing(session):
                term = None if session is None else session.term()
                write = send(master, redirect is not None, term)
            if isinstance(write.reply, MovedError):
                redirect = None
                self.redis.nodes_manager.initialize()
            elif isinstance(write.reply, AskError):
                redirect = (write.reply.host, int(write.reply.port))
            elif no_such_session(write.reply) and term is not None and attempt < REDIRECTS - 1:
                session.gone(term)
            else:
                return write
        raise TryAgainError("the lock's slot kept moving")

    def _alone(
        self,
        kind: str,
        master: Master,
        deadline: Optional[float],
        build: Callable[[], Pipeline],
        until: Optional[float] = None,
        keep_binding: bool = False,
    ) -> Write:
        """The write of the pipeline ``build()`` makes, sent on a connection of ``master``'s
        ``kind`` pool (``"wait"`` or ``"sync"``), queueing for one until ``deadline``
        (:class:`QueuedOut` after), every reply by ``until``; with ``keep_binding``, leaving the
        connection's session binding as it is (see :func:`exchange`)."""
        pool = pools_of(self.redis).pool(kind, master, BudgetedPool)
        # Lent for the exchange only: closed first if it raised, since a reply it was sent may
        # then be unread (the server releases a grant it held for it), then given back.
        connection = borrow(pool, deadline)
        try:
            pipeline = build()
            exchange(connection, pipeline, until, keep_binding)
        except BaseException:
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        return pipeline.write

    def _master(self, redirect: Optional[Tuple[str, int]] = None, key: Any = None) -> Master:
        """The server, or the master of the lock's slot (``key``'s, when given) in a
        ``RedisCluster`` (or the one an ``ASK`` named)."""
        if not is_cluster(self.redis):
            pool = self.redis.connection_pool
            return Master(None, pool.connection_class, pool.connection_kwargs)
        node = self.redis.get_node_from_key(self.name if key is None else key)
        pool = node.redis_connection.connection_pool
        master = Master(node.name, pool.connection_class, pool.connection_kwargs)
        return master if redirect is None else redirected(master, *redirect)

    def _recover(self, owner: Any) -> Optional[Grant]:
        """The reply to a wait was lost: asks again without waiting, with the same owner (a
        holder gets its token back). If even that fails, releases in the background."""
        try:
            return self._try(owner)
        except RedisError:
            threading.Thread(target=self._release_eventually, args=(owner,), daemon=True).start()
            raise

    def _release_eventually(self, owner: Any) -> None:
        release_eventually(self.redis, self._command("RELEASE", owner))

    def _renew(self, owner: Any, lease_ms: int, lease: Lease, until: Optional[float] = None) -> bool:
        """Renews to ``lease_ms``; ``True`` once the renewal counts (synced), ``False`` when
        the lease had run out. :class:`NotReplicatedError` when it did not count; its replies
        must come by ``until`` (the watchdog's: the lease's end)."""
        write = self._renew_write(owner, lease_ms, until)
        try:
            write = self._synced(write)
        except Exception:
            self._unsure(lease, write.started, lease_ms)
            raise
        return self._renewal_counts(write, lease, lease_ms)


class Keeper:
    """The watchdog: renews the lease every third of it in a daemon thread until stopped (at
    release) or a renewal is refused because the lock is no longer held — it never takes a
    lost lock back. A renewal counts once the replicas acknowledged it (see
    :class:`leasehold.Sync`); one that does not, or gets no reply, is tried again soon (see
    :class:`leasehold._protocol.Renewals`: at once on a fresh connection when its connection
    was dead, else half a second after) and again until one counts or the lease that counted
    ends — then the watchdog sets :attr:`lost` and stops."""

    def __init__(self, renew: Callable[[int, float], bool], lease_ms: int, lease: Lease) -> None:
        """``renew(lease_ms, until)`` renews, ending by ``until``; ``lease`` is the holding's,
        which a renewal that counts moves, and whose lost signal it sets."""
        self.lost = lease.lost
        self._stopped = threading.Event()
        self._renew = renew
        self._lease_ms = lease_ms
        self._lease = lease
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        """Stops renewing (at release)."""
        self._stopped.set()

    def _run(self) -> None:
        renewals = Renewals(self._lease_ms)
        while not self._stopped.wait(max(min(renewals.due, self._lease.end) - time.monotonic(), 0)):
            now = time.monotonic()
            if now >= self._lease.end:
                break
            if now < renewals.due:
                continue
            try:
                if not self._renew(self._lease_ms, self._lease.end):
                    break
            except RedisError as error:
                renewals.failed(error)  # not synced, or no reply: again soon, while the lease lasts
            else:
                renewals.counted(now)
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
