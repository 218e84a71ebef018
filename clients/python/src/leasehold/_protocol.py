"""What the sync and asyncio lock classes share without I/O: the module's commands, time
conversion, the sync settings and the round trip that carries a write, and a holder's state."""

from __future__ import annotations

import collections
import contextvars
import itertools
import logging
import os
import re
import secrets
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import (Any, Callable, ContextManager, List, NamedTuple, Optional, Sequence,
                    Set, Tuple, Union)

from redis.exceptions import ConnectionError, LockError, LockNotOwnedError, ResponseError

Number = Union[int, float]

logger = logging.getLogger("leasehold")

#: The lease of a lock made with ``timeout=None``, in seconds. redis-py's lock then never
#: expires; a module lock always has a lease, so the watchdog renews this one until release,
#: and a crashed holder's lock ends 30 s later instead of never.
DEFAULT_LEASE = 30.0

#: How long, in seconds, a reply on a dedicated connection may take beyond the time the server
#: may take for it (a wait's, a synced write's, a ``WAIT``'s); after it the reply counts as
#: lost, the connection is closed, and the client finds out for itself whether it got the lock.
WAIT_MARGIN = 1.0

#: The longest the server holds a synced write unless its operator set more
#: (``lock.sync-timeout-ms``'s default, 1000 ms), in seconds.
SERVER_SYNC_TIMEOUT = 1.0

#: The lock module release this package needs: the first with synced writes (``SYNC`` /
#: ``NOSYNC`` on ``LOCK.ACQUIRE``, ``LOCK.RENEW``, ``LOCK.MACQUIRE`` and ``LOCK.MRENEW``).
MODULE_NEEDED = "0.7.0"

#: How long a loop waits before asking again after ``TRYAGAIN`` (the server could not issue a
#: fencing token yet), in seconds.
TRY_AGAIN_DELAY = 0.01


def to_ms(seconds: Number, what: str = "timeout") -> int:
    """``seconds`` (a float or int, as redis-py takes times) in whole milliseconds, at least 1.

    Raises ``LockError`` for zero, a negative time, or less than a millisecond."""
    ms = int(seconds * 1000)
    if ms < 1:
        raise LockError(f"{what} must be at least 0.001 s, not {seconds!r}")
    return ms


@dataclass(frozen=True)
class Sync:
    """Whether and how grants and renewals reach the replicas before they count.

    ``replicas=None`` (the default): the master's **in-sync replica set**, synced by the server
    (lock module 0.7.0 or later). Every grant and renewal says ``SYNC``, and the master replies
    to it only once every member of its in-sync set — the replicas that have every write the
    master counted; the others make themselves unpromotable — acknowledged it and the set has
    at least ``lock.min-insync-replicas`` members (default 1; none on a server never part of a
    replication group). A grant made without waiting, or a renewal, goes on a connection of
    the client's sync pool, a blocking acquire on one of its wait pool (the server holds a grant
    handed over after the wait the same way; see :func:`leasehold.configure_pools`). Grants
    and renewals sent at the same time go together: ``NOSYNC`` each, then one ``LOCK.SYNC``,
    which the server holds the same way, the client undoing what the server would for a
    refused batch (:class:`Batch`); a write alone says ``SYNC`` itself, one command, one
    reply. When the master cannot count it within its
    ``lock.sync-timeout-ms`` (default 1000 ms) it replies ``NOREPLICAS`` — the set too small, a
    member did not acknowledge, it is no longer a master — having released the grant itself
    (a renewal stays applied on the master, and the lease before it is the one that counts),
    and :class:`NotReplicatedError` is raised with its reason. So while a member of the set is
    down, every grant and renewal fails after the server's sync timeout, until the master drops
    it from the set (``lock.insync-timeout-ms`` + ``lock.insync-drop-delay-ms`` + 2 s after it
    went silent, about 25 s with the defaults); then they count again without it — unless
    fewer members than ``lock.min-insync-replicas`` are left, which refuses every one.

    ``replicas=n`` waits for exactly ``n`` on the client's side: the write says ``NOSYNC``
    (the master replies at once) and ``WAIT n timeout`` follows it on the same connection; a
    grant ``WAIT`` counted fewer than ``n`` for is released by the client. **Not safe when
    the master has more than ``n`` replicas**: a failover may promote a replica that did not
    acknowledge — a ten-minute ``make chaos`` run (888e1d5, two replicas) found 16 double
    grants among grants synced to one replica, all after ``SENTINEL FAILOVER`` (later runs:
    docs/guarantees.md). ``replicas=0`` (:data:`SYNC_OFF`) turns syncing off: grants and
    renewals say ``NOSYNC`` and count at once; they go on the sync pool as synced ones do, those
    sent at the same time together in one pipeline (with no ``LOCK.SYNC`` behind them), and
    queue for a connection within ``timeout`` too.

    ``aof=True`` wants the master's AOF fsynced too: ``WAITAOF 1 n timeout`` instead of
    ``WAIT`` with ``replicas=n``, ``WAITAOF 1 0 timeout`` after the server-synced write with
    the in-sync set (Redis 7.2 or later); a grant not fsynced in time is released by the client.

    ``timeout`` is in seconds (default 1 s): how long a write may queue for a connection of the
    sync pool, and with ``replicas=n`` or ``aof`` the ``WAIT`` / ``WAITAOF`` timeout. With the
    in-sync set the server's ``lock.sync-timeout-ms`` decides how long it holds a write; the
    client waits for the reply the longer of ``timeout`` and 1 s (that setting's default) plus
    a margin of 1 s (:data:`WAIT_MARGIN`), then counts it lost and closes the connection — the
    master releases a grant it still held for a client that left. Set ``timeout`` to at least
    ``lock.sync-timeout-ms`` when the server's is longer than 1 s. ``LockError`` for a timeout
    under 1 ms. A grant handed over after a wait in the server counts from its reply: the
    server makes a ``SYNC`` grant with ``WAIT`` longer by its sync timeout while the reply is
    held, and sets its lease from the moment it counted (module 0.7.0).

    A grant that does not count raises :class:`NotReplicatedError`, saying why; with time left
    in ``blocking_timeout`` a blocking acquire tries again within it. For a renewal that does
    not count (the master may have made it), ``extend`` / ``reacquire`` raise it, the lease end
    the holding believes (``lease_end``) stays the last counted one, and the watchdog tries
    again half a second after each such refusal (:class:`Renewals`) and reports the holding
    lost when that lease ends first."""

    replicas: Optional[int] = None
    timeout: Number = 1.0
    aof: bool = False

    def __post_init__(self) -> None:
        to_ms(self.timeout, "sync timeout")

    @property
    def off(self) -> bool:
        """Whether syncing is off (``replicas=0``)."""
        return self.replicas == 0

    @property
    def batches(self) -> bool:
        """Whether grants and renewals sent at the same time go together (the in-sync set with
        no AOF, or syncing off: see :class:`Batch`)."""
        return self.off or (self.replicas is None and not self.aof)

    @property
    def option(self) -> str:
        """What a grant or renewal says: ``SYNC`` for the in-sync set (the server syncs it),
        else ``NOSYNC`` (the master replies at once)."""
        return "SYNC" if self.replicas is None else "NOSYNC"

    def held(self) -> float:
        """How long the server may hold a write's reply until it is synced, in seconds: the
        longer of ``timeout`` and :data:`SERVER_SYNC_TIMEOUT` for the in-sync set; 0 for
        ``NOSYNC``."""
        return max(self.timeout, SERVER_SYNC_TIMEOUT) if self.replicas is None else 0.0

    def wait_command(self, timeout: Number) -> Optional[List[Any]]:
        """What follows the write on its connection, ``timeout`` seconds (at least 1 ms): ``WAIT
        n timeout-ms`` (``WAITAOF 1 n timeout-ms`` with ``aof``) for a fixed count;
        ``WAITAOF 1 0 timeout-ms`` with ``aof`` for the in-sync set; else nothing."""
        ms = max(int(timeout * 1000), 1)
        if self.off or (self.replicas is None and not self.aof):
            return None
        replicas = self.replicas or 0
        return ["WAITAOF", 1, replicas, ms] if self.aof else ["WAIT", replicas, ms]

    def waited(self, reply: Any) -> Tuple[int, bool]:
        """What a ``WAIT`` / ``WAITAOF`` reply says: how many replicas have the write, and
        whether the master fsynced it to its AOF (always ``True`` without ``aof``)."""
        if self.aof:
            local, replicas = (int(n) for n in reply)
            return replicas, local >= 1
        return int(reply), True


#: No syncing: a grant or renewal counts as soon as the master made it.
SYNC_OFF = Sync(replicas=0)


class NotReplicatedError(LockError):
    """A grant or renewal that did not count: the master refused it (``NOREPLICAS``: its
    in-sync set was smaller than ``lock.min-insync-replicas``, a member did not acknowledge
    within ``lock.sync-timeout-ms``, or it is no longer a master) — it released the grant
    itself (a master that became a replica could not: :attr:`left_behind`, the lock then
    releases it in the background, owner-checked), and a renewal stays applied there without
    counting; or with ``Sync(replicas=n)``
    the ``WAIT`` counted fewer than ``n`` in time (or with ``aof`` the master did not fsync),
    and the client released the grant (owner-checked); or no connection of the sync pool was
    free within the sync timeout (nothing was sent); or a grant came only after its lease
    ended, or after the deadline of the session it is tied to (see
    :func:`leasehold.configure_sessions`), and the client released it. A renewal that does not
    count leaves the lease end believed at the last counted one. Not "busy": the lock was
    there, the replicas (or the session) were not."""

    def __init__(
        self,
        acked: Optional[int],
        wanted: Optional[int],
        reason: Optional[str] = None,
        message: Optional[str] = None,
    ) -> None:
        reason = reason or f"reached {acked} of the {wanted} replicas wanted in time"
        message = message or reason
        super().__init__(message)
        # redis-py 5.1 to 6.x's LockError keeps its message without passing it on to Exception,
        # whose str() would then show every argument given here.
        self.args = (message,)
        #: Why, in a few words: for a refusal by the server, its error up to ``; `` without
        #: ``NOREPLICAS`` (``not every in-sync replica acknowledged within 1000 ms``); the
        #: message is its whole text.
        self.reason = reason
        #: With ``Sync(replicas=n)``: how many replicas the ``WAIT`` counted; else ``None``.
        self.acked = acked
        #: With ``Sync(replicas=n)``: ``n``; else ``None``.
        self.wanted = wanted

    @property
    def left_behind(self) -> bool:
        """Whether a grant refused by the server may still be held: a master that became a
        replica released nothing (``the grant was not released here: the new master may have
        it, release it there``)."""
        return "was not released" in str(self)

    @classmethod
    def refused(cls, error: str) -> "NotReplicatedError":
        """The server's ``NOREPLICAS <what was missing>; <what it means>`` as raised."""
        what = error[len("NOREPLICAS "):] if error.startswith("NOREPLICAS ") else error
        return cls(None, None, what.split("; ", 1)[0], error)


class NotHeldError(LockNotOwnedError):
    """A guarded command (:meth:`leasehold.Lock.guard`, ``LOCK.GUARD``) was refused: the lock
    is free, held by another owner, or held by this owner with another fencing token (the
    holding was lost and taken again) — the server's words say which. The command did not run.
    A ``LockNotOwnedError``, as ``extend`` and ``release`` raise for a lock no longer held."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        # redis-py 5.1 to 6.x's LockError keeps its message without passing it on to Exception.
        self.args = (message,)


class StaleTokenError(LockError):
    """A fenced command (:meth:`leasehold.Lock.fenced`, :func:`leasehold.fenced`,
    ``LOCK.FENCED``) was refused: its token is below the largest that already ran a command
    through the fence — a newer holder wrote first. The command did not run."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.args = (message,)
        found = re.match(r"STALE token (\d+) is below (\d+)", message)
        #: The token the command came with.
        self.token: Optional[int] = int(found.group(1)) if found else None
        #: The largest token that ran a command through the fence.
        self.largest: Optional[int] = int(found.group(2)) if found else None


def guarded_reply(reply: Any) -> Any:
    """A guarded or fenced command's reply (``LOCK.GUARD`` / ``LOCK.FENCED``) as the lock takes
    it: ``NOTHELD ...`` as :class:`NotHeldError`, ``STALE ...`` as :class:`StaleTokenError`,
    ``NOREPLICAS ...`` as :class:`NotReplicatedError` (the command ran on the master, but the
    in-sync set did not acknowledge it: a failover may lose its write); the command's own reply,
    or its own error, as it is."""
    if not isinstance(reply, ResponseError):
        return reply
    error = str(reply)
    if error.startswith("NOTHELD"):
        return NotHeldError(error)
    if error.startswith("STALE"):
        return StaleTokenError(error)
    if error.startswith("NOREPLICAS"):
        return NotReplicatedError.refused(error)
    return reply


def guard_command(name: Any, owner: Any, token: int, sync: Sync, command: Sequence[Any]) -> List[Any]:
    """``LOCK.GUARD name owner TOKEN token SYNC|NOSYNC command...``."""
    if not command:
        raise LockError("guard needs a command to run")
    return ["LOCK.GUARD", name, owner, "TOKEN", token, sync.option, *command]


def fenced_command(fence: Any, token: int, sync: Sync, command: Sequence[Any]) -> List[Any]:
    """``LOCK.FENCED fence token SYNC|NOSYNC command...``."""
    if not command:
        raise LockError("fenced needs a command to run")
    return ["LOCK.FENCED", fence, int(token), sync.option, *command]


def write_reply(reply: Any) -> Any:
    """A grant's or renewal's reply as the lock takes it: ``NOREPLICAS ...`` as
    :class:`NotReplicatedError` (the server undid what it could), ``ERR syntax error`` as a
    ``LockError`` saying the module is too old for ``SYNC`` / ``NOSYNC``; anything else as
    it is."""
    if not isinstance(reply, ResponseError):
        return reply
    error = str(reply)
    if error.startswith("NOREPLICAS"):
        return NotReplicatedError.refused(error)
    if error.lower() in ("syntax error", "err syntax error"):
        return LockError(
            f"the server answered '{error}' to a grant or renewal saying SYNC or NOSYNC: this "
            f"package needs the leasehold lock module {MODULE_NEEDED} or later (synced writes)")
    return reply


class Grant(NamedTuple):
    """A grant as ``acquire`` keeps it."""

    #: ``LOCK.ACQUIRE``'s reply (a token), or ``LOCK.MACQUIRE``'s (one per key).
    reply: Any
    #: When its lease began at the earliest, ``time.monotonic()`` seconds: when it was sent,
    #: or for a wait when it was answered.
    started: float
    #: The session it is tied to (``None``: none).
    term: Optional["Term"] = None


#: Guards the lost signals made when first asked for (:attr:`Lease.lost`).
_SIGNALS = threading.Lock()


class Lease:
    """When a holding's lease ends as last synced, ``time.monotonic()`` seconds — and, for a
    holding tied to a session, no later than that session's deadline (:class:`Term`): what
    ``lease_end`` says and when the watchdog reports the holding lost. Shared by the holder,
    its watchdog (which renews in another thread or task) and its session."""

    def __init__(self, end: float, signal: Callable[[], Any] = threading.Event) -> None:
        """``end`` the lease's own end; ``signal`` makes the holding's lost signal (a
        ``threading.Event``, or an ``asyncio.Event`` for the asyncio classes) when first
        asked for (:attr:`lost`)."""
        #: The lease's own end (``time.monotonic()`` seconds), as last synced.
        self.own = end
        #: The session the holding is tied to (``None``: none, the lease alone counts).
        self.term: Optional["Term"] = None
        self._signal = signal
        self._lost: Any = None
        #: ``LOCK.RENEW`` (a set's ``LOCK.MRENEW``) of the holding to a lease of ``ms``, and
        #: whether a reply to it renewed every key: how its session ties it to a new one.
        self.renew_command: Optional[Callable[[int], List[Any]]] = None
        self.renewed: Callable[[Any], bool] = lambda reply: reply == 1

    @property
    def lost(self) -> Any:
        """Set once the holding is known lost: by the watchdog, or by its session. Made when
        first asked for (a ``threading.Event`` is a condition and a lock: most holdings are
        released unwatched and never ask), once, whichever thread asks."""
        lost = self._lost
        if lost is None:
            with _SIGNALS:
                if self._lost is None:
                    self._lost = self._signal()
                lost = self._lost
        return lost

    @property
    def end(self) -> float:
        """When the holding stops counting: its lease's end, or its session's deadline when
        that is sooner."""
        term = self.term
        return self.own if term is None else min(self.own, term.deadline)

    def lose(self) -> None:
        """The holding is lost now (its session could not keep it)."""
        self.own = min(self.own, time.monotonic())
        self.lost.set()


def counted_lease(lease_ms: int) -> float:
    """How long a lease of ``lease_ms`` counts for its holder, in seconds from when it began:
    the lease less a clock drift allowance of 1% and 2 ms, the drift factor of the Redlock
    algorithm (the server's clock may run a little fast, and a grant handed over after a wait
    was made a little before its reply came)."""
    return max(lease_ms - lease_ms / 100 - 2, 0) / 1000


#: How long a watchdog pauses before trying again a renewal that did not count (not synced,
#: a server's error, or no reply), in seconds — a tenth of the lease when that is shorter:
#: each synced try has already waited up to the sync timeout for the replicas.
RETRY_PAUSE = 0.5


class Renewals:
    """When a watchdog renews next (:attr:`due`, ``time.monotonic()`` seconds): a third of the
    lease after the start of the last renewal that counted; after one that did not count or
    got no reply, again soon — at once when its connection was found dead
    (``ConnectionError``: the next try goes on a fresh connection) unless the try before failed
    so too (the server may be down), else :data:`RETRY_PAUSE` after it — so that a renewal
    refused while a dead replica is still in the master's in-sync set counts soon after the
    master drops it. The watchdog gives up when the lease that counted ends."""

    def __init__(self, lease_ms: int) -> None:
        """``lease_ms``: the lease each renewal asks for, in ms."""
        self.period = lease_ms / 3000
        self.pause = min(RETRY_PAUSE, lease_ms / 10_000)
        self.due = time.monotonic() + self.period
        self._dead = False

    def counted(self, started: float) -> None:
        """The renewal begun at ``started`` (``time.monotonic()`` seconds) counted."""
        self.due = started + self.period
        self._dead = False

    def failed(self, error: Exception) -> None:
        """The renewal just tried did not count, or got no reply: ``error`` says why."""
        dead = isinstance(error, ConnectionError)
        at_once = dead and not self._dead
        self._dead = dead
        self.due = time.monotonic() + (0.0 if at_once else self.pause)


class QueuedOut(Exception):
    """Every connection of a pool stayed borrowed until the caller's budget ran out."""

    def __init__(self) -> None:
        super().__init__("no dedicated connection was free within the budget")

    def not_replicated(self) -> NotReplicatedError:
        """What a synced grant or renewal raises for it."""
        return NotReplicatedError(
            None, None, "no connection of the sync pool was free within the sync timeout")


class Write:
    """One write that counts only once synced — a grant or a renewal, saying ``SYNC`` or
    ``NOSYNC`` (:attr:`Sync.option`) — as its caller sends it, and what it got: its reply, and
    why it does not count if it was applied and the client's own ``WAIT`` did not sync it."""

    def __init__(
        self,
        command: List[Any],
        applied: Callable[[Any], bool],
        until: Optional[float] = None,
        mapped: Callable[[Any], Any] = write_reply,
    ) -> None:
        """``command`` the write; ``applied`` whether its reply means it was made; ``until`` the
        ``time.monotonic()`` by which its replies must have come (a watchdog's renewal: its
        lease's end), ``None`` for the sync timeout alone; ``mapped`` what its reply becomes
        (:func:`write_reply`; :func:`guarded_reply` for a guarded or fenced command)."""
        #: The write naming its session: the command, with ``SESSION id`` once tied
        #: (:meth:`tie`). How it goes on a connection not bound to that session (see
        #: :meth:`sent_on`).
        self.command = command
        self.applied = applied
        self.until = until
        self.mapped = mapped
        #: The session it names (``None``: none).
        self.term: Optional[Term] = None
        self._base = command
        #: When its lease began at the earliest, ``time.monotonic()`` seconds: when its caller
        #: sent it (before it queued for a connection), or for a wait when it was answered
        #: (:meth:`Pipeline.take`).
        self.started = time.monotonic()
        #: The write's reply (an exception for an error reply: :class:`NotReplicatedError`
        #: for ``NOREPLICAS``, see :func:`write_reply`), once taken.
        self.reply: Any = None
        #: Why an applied write does not count by the client's own ``WAIT`` (see
        #: :meth:`Pipeline.not_synced`), once settled.
        self.problem: Optional[Exception] = None
        #: What the client gives back of it when it was made in a batch whose ``LOCK.SYNC`` was
        #: refused (:class:`Undo`); ``None`` for a write that never goes in a batch.
        self.undo: Optional[Undo] = None

    def tie(self, term: Optional["Term"]) -> None:
        """Names ``term``'s session in the write (``SESSION id``), or none for ``None``."""
        self.term = term
        self.command = self._base if term is None else [*self._base, "SESSION", term.id]

    def sent_on(self, bound: Optional[str]) -> List[Any]:
        """The write as sent on a connection bound to session ``bound`` (``LOCK.SESSION USE``;
        ``None``: to none): without ``SESSION id`` when that is its own session's id — the
        server ties it exactly as if it named it, and refuses it with ``ERR no such session``
        once that session ended — else naming its session (:attr:`command`). A write tied to
        no session goes only on a connection bound to none (see :meth:`Pipeline.untied`)."""
        term = self.term
        return self._base if term is not None and term.id == bound else self.command

    def in_batch(self, named: bool, bound: Optional[str]) -> List[Any]:
        """The write as a batch sends it: ``NOSYNC`` in place of ``SYNC`` (the batch's
        ``LOCK.SYNC`` syncs it), naming its session when ``named`` (a ``USE`` goes ahead of it)
        or the connection is bound to another one (``bound``) — see :meth:`sent_on`."""
        base = [*self._base[:-1], "NOSYNC"]
        term = self.term
        if term is None or (not named and term.id == bound):
            return base
        return [*base, "SESSION", term.id]

    def outcome(self) -> Any:
        """The reply if the write was applied, else ``None``; raises the error reply it got
        (:class:`NotReplicatedError` when the server refused to count it)."""
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply if self.applied(self.reply) else None


class Binding(NamedTuple):
    """What a pooled connection's socket is bound to (``LOCK.SESSION USE``), as this client
    knows it. The binding belongs to the server's connection, so it is kept per socket: a
    connection that reconnected (a new socket) is bound to nothing again. Only ever what a
    ``USE`` on that socket replied ``OK`` to."""

    #: The socket it was recorded for (``None``: not connected).
    socket: Any
    #: The session id the socket is bound to; ``None`` for none.
    id: Optional[str] = None
    #: A ``USE`` on this socket was refused with an error other than ``no such session`` (a
    #: module without ``USE``, ``READONLY``): no more are sent on it, the writes name their
    #: sessions.
    refused: bool = False


#: The attribute of a redis-py connection object that keeps its :class:`Binding`.
BINDING = "_leasehold_binding"


def binding_of(connection: Any, socket: Any) -> Binding:
    """What ``connection`` is bound to, ``socket`` being its socket now (``None``: not
    connected): what was recorded for that very socket (:func:`record_binding`), else nothing
    — a new server connection."""
    known = getattr(connection, BINDING, None)
    if socket is None or known is None or known.socket is not socket:
        return Binding(socket)
    return known


def record_binding(connection: Any, binding: Binding) -> None:
    """Keeps ``binding`` (its socket the one the round trip went on) on ``connection``."""
    setattr(connection, BINDING, binding)


def bound_after(use: Optional[str], used: Any, binding: Binding, socket: Any) -> Binding:
    """What a connection bound as ``binding`` is bound to after a round trip on ``socket``
    that sent ``LOCK.SESSION USE use`` first (``None``: none), ``used`` its reply (see
    :meth:`Pipeline.binding_after`)."""
    if use is None or no_such_session(used):
        return binding._replace(socket=socket)
    if isinstance(used, Exception):
        return binding._replace(socket=socket, refused=True)
    return Binding(socket, use)


#: A command of a :class:`Pipeline` with what it is for (a name, or its :class:`Write`) and how
#: long its reply may take, in seconds.
Part = Tuple[Any, List[Any], float]


class Pipeline:
    """One write — a grant or a renewal — to one master on a dedicated connection, as one plain
    pipeline: what is sent, and what the replies mean; the I/O is the lock's::

        [LOCK.SESSION USE id]; [ASKING]; the write ... SYNC|NOSYNC; [WAIT n t | WAITAOF 1 n t]

    The write is a grant or a renewal sent without waiting, or a blocking acquire (``...
    WAIT``). With the in-sync set (``Sync()``) it says ``SYNC`` and its reply comes once the
    master synced it (or ``NOREPLICAS``), nothing follows it (``WAITAOF 1 0 t`` with
    ``aof``); with ``Sync(replicas=n)`` it says ``NOSYNC`` and ``WAIT n t`` follows, ``t`` the
    sync timeout ending no later than the write's ``until``; with the sync off, ``NOSYNC``
    and nothing more. ``ASKING`` comes before a write an ``ASK`` redirection sent to another
    cluster master.

    Fitted to its connection (:meth:`on`), a write tied to the session the connection is bound
    to goes without ``SESSION id``; when the connection is not bound to the client's current
    session, ``LOCK.SESSION USE id`` goes first (before ``ASKING``, which covers only the
    command after it) and the write names its session, so that the next round trips on it
    need not (:meth:`binding_after`)."""

    def __init__(
        self,
        write: Write,
        *,
        sync: Sync,
        waiting: bool = False,
        wait_left: Optional[Number] = None,
        asking: bool = False,
    ) -> None:
        """``waiting`` for a blocking acquire that may wait ``wait_left`` seconds in the server
        (``None``: no limit); ``asking`` after an ``ASK``."""
        self.write = write
        self.sync = sync
        self.waiting = waiting
        self.wait_left = wait_left
        self.asking = asking
        self.sync_timeout = sync_timeout(sync, write)
        #: The session id the connection is bound to, and the one ``USE`` binds it to first
        #: (``None``: no ``USE``); :meth:`on` sets them.
        self.bound: Optional[str] = None
        self.use: Optional[str] = None
        #: The reply to that ``USE``.
        self.used: Any = None
        self._sent = self._parts()
        #: How many replicas the ``WAIT`` counted, and whether the master fsynced the write to
        #: its AOF (``True`` with ``aof`` off).
        self.waited = 0
        self.fsynced = True
        #: An error replied to ``WAIT`` / ``WAITAOF``.
        self.error: Optional[Exception] = None

    def untied(self) -> bool:
        """Whether the write is tied to no session (sessions off, or none to be had): it must
        go on a connection bound to none — the server would tie it to the bound one, and end it
        with that session, unbeknownst to its holder."""
        return self.write.term is None

    def on(self, binding: Binding) -> None:
        """Fits the round trip to the connection it goes on, bound as ``binding`` (bound to no
        session when :meth:`untied`): a write tied to the bound session goes without ``SESSION
        id``, any other names its session; and ``LOCK.SESSION USE id`` goes first when the
        write is tied to the client's current session and the connection is not bound to it
        (and no ``USE`` was refused on its socket). A write behind a ``USE`` names its session,
        so a ``USE`` refused (``no such session``: that session ended) changes nothing: the
        write fails the same way, or is tied as it names."""
        if binding.id is not None and self.untied():
            raise ValueError("a write tied to no session on a connection bound to one")
        self.bound = binding.id
        term = self.write.term
        wanted = term is not None and term.current and term.id != binding.id
        self.use = term.id if wanted and not binding.refused else None  # type: ignore[union-attr]
        self._sent = self._parts()

    def binding_after(self, binding: Binding, socket: Any) -> Binding:
        """What the connection, bound as ``binding`` before the round trip (:meth:`on`), is
        bound to after it, on ``socket`` (the one it went on), once every reply was taken: the
        session ``USE`` bound it to when that replied ``OK``; as before when there was no
        ``USE`` or it got ``no such session`` (the server leaves the binding then); as before,
        refusing further ``USE`` on this socket, for any other error."""
        return bound_after(self.use, self.used, binding, socket)

    def commands(self) -> List[List[Any]]:
        """What to send, in order."""
        return [command for _, command, _ in self._sent]

    def within(self) -> Optional[float]:
        """How long the replies may take, in seconds: what the server may take (the wait, the
        sync of a ``SYNC`` write, the ``WAIT``) plus :data:`WAIT_MARGIN` for each command;
        ``None`` for a wait without a limit."""
        if self.waiting and self.wait_left is None:
            return None
        write = (self.wait_left if self.waiting else 0.0) + self.sync.held() + WAIT_MARGIN
        return write + sum(within for part, _, within in self._sent if part is not self.write)

    def _parts(self) -> List[Part]:
        """What to send (the write's own time counts in :meth:`within`)."""
        use = [("use", ["LOCK.SESSION", "USE", self.use], WAIT_MARGIN)] if self.use else []
        asking = [("asking", ["ASKING"], WAIT_MARGIN)] if self.asking else []
        parts: List[Part] = [*use, *asking, (self.write, self.write.sent_on(self.bound), 0.0)]
        wait = self.sync.wait_command(self.sync_timeout)
        if wait is not None:
            parts.append(("wait", wait, self.sync_timeout + WAIT_MARGIN))
        return parts

    def take(self, replies: Sequence[Tuple[Any, float]]) -> None:
        """Takes the replies, each with when it was read (``time.monotonic()`` seconds): the
        write's as :func:`write_reply` makes it. A blocking acquire's lease counts from its
        reply: the server replies the moment it grants, and a grant it held to sync it was made
        longer meanwhile and its lease set from the moment it counted."""
        for (part, _, _), (reply, answered) in zip(self._sent, replies):
            if part is self.write:
                self.write.reply = self.write.mapped(reply)
                if self.waiting:
                    self.write.started = answered
            elif part == "use":
                self.used = reply
            elif part == "wait":
                if isinstance(reply, Exception):
                    self.error = reply
                else:
                    self.waited, self.fsynced = self.sync.waited(reply)

    def settle(self) -> None:
        """Tells the write why it does not count, if so (:meth:`not_synced`), once every reply
        was taken."""
        self.write.problem = self.not_synced()

    def not_synced(self) -> Optional[Exception]:
        """For an applied write, why the client's own wait says it does not count (an error
        replied to ``WAIT`` / ``WAITAOF``, or :class:`NotReplicatedError` with the reason);
        else ``None``. (A write the server refused has that refusal as its reply.)"""
        if self.error is not None or self.sync.wait_command(self.sync_timeout) is None:
            return self.error
        ms = int(self.sync_timeout * 1000)
        wanted = self.sync.replicas
        if wanted is not None and self.waited < wanted:
            return NotReplicatedError(self.waited, wanted)
        if not self.fsynced:
            return NotReplicatedError(
                None if wanted is None else self.waited, wanted,
                f"the master did not fsync its AOF within {ms} ms")
        return None


class Undo(NamedTuple):
    """What the client gives back of a write made in a batch whose ``LOCK.SYNC`` was refused,
    as the server gives back a refused ``SYNC`` write (:class:`Batch`)."""

    #: The release of a grant as its owner (``LOCK.RELEASE`` / ``LOCK.MRELEASE``: one hold, as
    #: the server releases), also sent in the background when the batch's replies were lost;
    #: ``None`` for a write that stays made and does not count (a renewal).
    release: Optional[List[Any]]
    #: What a write with no release means when it does not count, as the server words it.
    kept: str = ""


#: A renewal's :class:`Undo`: nothing to give back, the lease before it counts.
RENEWAL_UNDO = Undo(None, "the renewal does not count: the lease before it does")

#: The most writes one batch carries.
BATCH_MOST = 128

#: The most senders of batches to one master at once (:class:`Batches`). Two keep a write from
#: waiting a whole round trip behind a batch in flight when the other is free, and make
#: batches large under load (the Rust package measured one to sixteen: issue 55).
SENDERS = 2


class Queued:
    """A write waiting for a batch (:class:`Batches`): its sync settings, and where its caller
    waits for it (an ``asyncio.Future``, or a ``threading.Lock`` it holds until the sender
    releases it, with :attr:`error`)."""

    __slots__ = ("write", "sync", "waiter", "error")

    def __init__(self, write: Write, sync: Sync, waiter: Any) -> None:
        self.write = write
        self.sync = sync
        self.waiter = waiter
        #: Why it failed, for a sync caller (``None``: its reply is the write's).
        self.error: Optional[BaseException] = None

    @property
    def release(self) -> Optional[List[Any]]:
        """The release of the grant it may make (:attr:`Undo.release`): sent in the background
        when the batch's replies were lost, or when its caller left and it was granted."""
        undo = self.write.undo
        return None if undo is None else undo.release

    def unclaimed(self, error: Optional[BaseException]) -> Optional[List[Any]]:
        """What to release for a caller that left before its outcome (``error``, or ``None``
        for the write's reply) came: a grant it was made."""
        return self.release if error is None and made(self.write.reply) else None


class Batches:
    """The writes to one master waiting to go in a batch, and its senders: each borrows a sync
    connection and sends the writes waiting then as one :class:`Batch`, then the writes that
    queued meanwhile as soon as that one is answered, until none waits. At most
    :data:`SENDERS` run at once, so that under load writes queue behind a batch in flight and
    go together rather than each on a connection of its own. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: "collections.deque[Queued]" = collections.deque()
        self._senders = 0

    def push(self, queued: Queued) -> bool:
        """Queues a write; whether its caller is to start a sender (fewer than
        :data:`SENDERS` run)."""
        with self._lock:
            self._writes.append(queued)
            start = self._senders < SENDERS
            self._senders += start
            return start

    def take(self) -> List[Queued]:
        """For a sender: up to :data:`BATCH_MOST` writes, the longest waiting first; none when
        none waits, and then the sender stops."""
        with self._lock:
            writes = self._writes
            if not writes:
                self._senders -= 1
                return []
            if len(writes) <= BATCH_MOST:
                taken = list(writes)
                writes.clear()
                return taken
            return [writes.popleft() for _ in range(BATCH_MOST)]

    def stop(self) -> List[Queued]:
        """For a sender that stops before none waits (no connection to be had, cancelled): every
        write waiting, for it to answer; the sender's role ends."""
        with self._lock:
            taken = list(self._writes)
            self._writes.clear()
            self._senders -= 1
            return taken

    def withdraw(self, queued: Queued) -> bool:
        """Takes back a write no batch took; ``False`` when one did."""
        with self._lock:
            try:
                self._writes.remove(queued)
            except ValueError:
                return False
            return True


def made(reply: Any) -> bool:
    """Whether a write's reply says it made something: not null, not an error, not 0 (a
    renewal of nothing)."""
    return reply is not None and not isinstance(reply, Exception) and reply != 0


def batch_refused(refusal: Any, meaning: str) -> NotReplicatedError:
    """The error of a made write of a batch whose ``LOCK.SYNC`` got ``refusal``, worded as the
    server words a refused ``SYNC`` write: ``NOREPLICAS <what was missing>; <meaning>`` (the
    grant was released, or the renewal does not count)."""
    error = str(refusal)
    if error.startswith("UNBLOCKED") or "no longer a master" in error:
        missing = "this server is no longer a master"
    else:
        missing = error[len("NOREPLICAS "):] if error.startswith("NOREPLICAS ") else error
        missing = missing.split("; the writes before it", 1)[0]
    return NotReplicatedError.refused(f"NOREPLICAS {missing}; {meaning}")


class Batch:
    """Several writes — grants without waiting and renewals, each tied to the client's session
    or each to none — to one master as one round trip on a connection of its sync pool, with
    ``NOSYNC`` each and, when they are synced, one ``LOCK.SYNC`` behind them, which the server
    answers once its in-sync set has every write before it::

        [LOCK.SESSION USE id]; write NOSYNC; write NOSYNC; ...; [LOCK.SYNC]

    (With syncing off, :data:`SYNC_OFF`, a batch is the writes alone: each counts at once, and
    several share one round trip rather than one each — the Python cost around each round trip
    is what limits many tasks, issue 55.)

    (A write alone goes as a :class:`Pipeline`, saying ``SYNC``: one command, which the server
    undoes when it does not count.) The same interface as :class:`Pipeline` for the round trip
    (the I/O is the lock's). The server undoes nothing after ``LOCK.SYNC``: when it is refused
    (``NOREPLICAS``, or ``UNBLOCKED`` as the master turns replica), each write that made
    something is given back by the client as the server gives back a refused ``SYNC`` write
    (:attr:`Write.undo`, :meth:`refused`); the others get their own replies."""

    def __init__(self, queued: Sequence[Queued]) -> None:
        self.queued = list(queued)
        #: Whether ``LOCK.SYNC`` goes behind the writes (the writes of a batch share one sync).
        self.synced = not self.queued[0].sync.off
        self.bound: Optional[str] = None
        self.use: Optional[str] = None
        self.used: Any = None
        #: ``LOCK.SYNC``'s error reply (``None``: ``OK``, or not read yet).
        self.refusal: Optional[Exception] = None

    def untied(self) -> bool:
        """Whether its writes are tied to no session (a batch's are all tied, or all not)."""
        return self.queued[0].write.term is None

    def on(self, binding: Binding) -> None:
        """As :meth:`Pipeline.on`, for every write: one ``USE`` ahead of them when one is tied
        to the client's current session and the connection is not bound to it."""
        if binding.id is not None and self.untied():
            raise ValueError("writes tied to no session on a connection bound to one")
        self.bound = binding.id
        self.use = None
        if not binding.refused:
            for queued in self.queued:
                term = queued.write.term
                if term is not None and term.current and term.id != binding.id:
                    self.use = term.id
                    break

    def commands(self) -> List[List[Any]]:
        """What to send, in order."""
        named = self.use is not None
        use = [["LOCK.SESSION", "USE", self.use]] if named else []
        writes = [queued.write.in_batch(named, self.bound) for queued in self.queued]
        return [*use, *writes, *([["LOCK.SYNC"]] if self.synced else [])]

    def within(self) -> float:
        """How long the replies may take, in seconds: the longest sync any write's settings
        allow, and :data:`WAIT_MARGIN` (twice with a ``USE``)."""
        held = max(queued.sync.held() for queued in self.queued)
        return held + WAIT_MARGIN * (2 if self.use is not None else 1)

    def until(self) -> Optional[float]:
        """By when every reply must have come: the latest of the writes' ``until``, ``None``
        when one has none."""
        untils = [queued.write.until for queued in self.queued]
        return None if None in untils else max(untils)  # type: ignore[type-var]

    def take(self, replies: Sequence[Tuple[Any, float]]) -> None:
        """Takes the replies: each write's as :func:`write_reply` makes it, the ``USE``'s, and
        ``LOCK.SYNC``'s when it was sent."""
        replies = list(replies)
        if self.use is not None:
            self.used = replies.pop(0)[0]
        for queued, (reply, _) in zip(self.queued, replies):
            queued.write.reply = queued.write.mapped(reply)
        synced = replies[-1][0] if self.synced else None
        self.refusal = synced if isinstance(synced, Exception) else None

    def binding_after(self, binding: Binding, socket: Any) -> Binding:
        """As :meth:`Pipeline.binding_after`."""
        return bound_after(self.use, self.used, binding, socket)

    def settle(self) -> None:
        """Nothing to settle: the batch's writes are synced by the server or refused."""

    def refused(self) -> List[Queued]:
        """The writes that made something while ``LOCK.SYNC`` was refused: the client gives
        them back (:meth:`releases`) before their callers get :meth:`given_back`."""
        if self.refusal is None:
            return []
        return [queued for queued in self.queued if made(queued.write.reply)]

    def releases(self) -> List[List[Any]]:
        """The releases of the grants among :meth:`refused`, in order, sent in one round trip
        on the batch's connection."""
        return [queued.release for queued in self.refused() if queued.release is not None]

    def given_back(
        self, replies: Sequence[Any]
    ) -> List[Tuple[Queued, NotReplicatedError, Optional[List[Any]]]]:
        """Each of :meth:`refused` with its error (:func:`batch_refused`) and the release still
        to send in the background (its own failed: ``replies``, those of :meth:`releases`, an
        error or missing), ``None`` for none."""
        released = iter(replies)
        given = []
        for queued in self.refused():
            release = queued.release
            later = None
            if release is None:
                meaning = queued.write.undo.kept  # type: ignore[union-attr]
            elif isinstance(next(released, None), (type(None), Exception)):
                meaning, later = "the grant is being released by the client", release
            else:
                meaning = "the grant was released"
            given.append((queued, batch_refused(self.refusal, meaning), later))
        return given


def round_trip(writes: Sequence[Queued]) -> Tuple[Any, Optional[float]]:
    """What a sender sends for ``writes`` and by when their replies must come: a write alone
    as a :class:`Pipeline` (``SYNC``: the server undoes it when it does not count; ``NOSYNC``
    with syncing off), several as a :class:`Batch` (``NOSYNC`` each, then ``LOCK.SYNC`` unless
    syncing is off)."""
    if len(writes) == 1:
        return Pipeline(writes[0].write, sync=writes[0].sync), writes[0].write.until
    batch = Batch(writes)
    return batch, batch.until()


def sync_timeout(sync: Sync, write: Write) -> float:
    """The ``WAIT`` timeout of a round trip carrying ``write``, in seconds: the sync's, ending
    no later than its ``until`` (at least 1 ms)."""
    if write.until is None:
        return sync.timeout
    return max(min(sync.timeout, write.until - time.monotonic()), 0.001)


def deadline_of(within: Optional[float], until: Optional[float]) -> Optional[float]:
    """The ``time.monotonic()`` by which replies that may take ``within`` seconds from now
    (``None``: no limit) must have come, and no later than ``until``."""
    deadline = None if within is None else time.monotonic() + within
    if until is None:
        return deadline
    return until if deadline is None else min(deadline, until)


def time_left(deadline: Optional[float]) -> Optional[float]:
    """Seconds until ``deadline`` (``time.monotonic()``), at least 0; ``None`` for none."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def is_cluster(redis: Any) -> bool:
    """True for a redis-py ``RedisCluster`` (sync or asyncio)."""
    return hasattr(redis, "get_node_from_key")


#: How many ``MOVED`` / ``ASK`` redirections a grant on a connection of its own follows.
REDIRECTS = 5


class Owners:
    """New owners, 32 hex digits as redis-py's tokens are: 64 random bits drawn once per process
    (again in a child after ``os.fork``) and a count. Unique as a random UUID is, without a call
    for randomness and a ``UUID`` each time (4% of an asyncio acquire + release). An owner is
    no secret: ``LOCK.INFO`` shows it."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.prefix = f"{secrets.randbits(64):016x}"
        self.count = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.count) & 0xFFFFFFFFFFFFFFFF:016x}"


OWNERS = Owners()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OWNERS.renew)


def new_owner() -> str:
    """A new owner, unique among every client's (:class:`Owners`)."""
    return OWNERS.next()


def wait_ms(left: Optional[Number]) -> int:
    """The ``WAIT`` argument of ``LOCK.ACQUIRE`` for ``left`` seconds: whole ms, at least 1;
    0 (no limit) for ``None``."""
    return 0 if left is None else max(int(left * 1000), 1)


def own_ttl_ms(info: Any, owner: Any) -> Optional[int]:
    """The lease left of ``owner``'s holding in a ``LOCK.INFO`` reply (RESP2 or RESP3, bytes or
    str), or ``None`` when it holds nothing."""
    fields = as_map(info)
    if fields is None:
        return None
    if text(fields.get("mode")) != "shared":
        return int(fields["ttl"]) if text(fields.get("owner")) == text(owner) else None
    for holder in fields.get("owners") or []:
        holder = as_map(holder) or {}
        if text(holder.get("owner")) == text(owner):
            return int(holder["ttl"])
    return None


def least_lease_ms(infos: Sequence[Any], owner: Any) -> Optional[int]:
    """The shortest lease left of ``owner``'s holdings in ``LOCK.INFO`` replies (one per key of
    a lock or a set), or ``None`` when it does not hold every one."""
    lefts = [own_ttl_ms(info, owner) for info in infos]
    return None if any(left is None for left in lefts) else min(lefts)  # type: ignore[type-var]


def as_map(reply: Any) -> Optional[dict]:
    """A reply map (RESP3 dict or RESP2 flat list) with text keys."""
    if reply is None:
        return None
    if isinstance(reply, dict):
        return {text(key): value for key, value in reply.items()}
    return {text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}


def text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if value is None else str(value)


#: The name a session's connection gives itself (``CLIENT SETNAME``): how an operator finds it
#: in ``CLIENT LIST``.
SESSION_CONNECTION_NAME = "leasehold-session"

#: The grace assumed before the server said a session's (``lock.session-grace-ms``'s default),
#: in seconds: how long the session's connection may take to connect or to answer.
DEFAULT_GRACE = 3.0

#: How long, in seconds, a session with no holding and no acquire or renewal (a blocking acquire
#: counts while it waits) keeps its heartbeat (and its watcher) running: then they stop — a
#: client no longer used costs no thread and no traffic — and the next acquire attaches the
#: session again (or opens a new one) first.
IDLE_AFTER = 10.0


@dataclass(frozen=True)
class SessionSettings:
    """Whether a client ties its holdings to a session, and the grace it asks for in ms
    (``None``: the server's, ``lock.session-grace-ms``); see
    :func:`leasehold.configure_sessions`."""

    enabled: bool = True
    grace_ms: Optional[int] = None


#: What :func:`writing` gives with sessions off: nothing to do.
NOT_WRITING = nullcontext()


def writing(session: Any) -> ContextManager[None]:
    """:meth:`SessionState.writing` of ``session`` (a lock module's ``Session``); nothing when
    sessions are off (``None``)."""
    return NOT_WRITING if session is None else session.state


class Term:
    """One session the server opened for this client on one master (``LOCK.SESSION OPEN``), and
    its **deadline**: the holder learns first. A reply to ``LOCK.SESSION ATTACH`` (or ``OPEN``)
    sent at ``t`` (``time.monotonic()``) means the session was attached at some moment after
    ``t``; the server ends a session only a grace after its connection closed, so not before
    ``t + grace``. Its holdings count until ``t + grace`` less the drift allowance of leases
    (:func:`counted_lease`), ``t`` being the send time of the last attach answered; once that
    passes unconfirmed they are lost — before the server can hand any of them over."""

    def __init__(self, state: "SessionState", id: str, grace_ms: int, sent: float) -> None:
        self.state = state
        #: The session's id, 16 hex digits.
        self.id = id
        #: How long, in ms, the session outlives its connection on the server.
        self.grace_ms = grace_ms
        #: Until when its holdings count, ``time.monotonic()`` seconds.
        self.deadline = sent + counted_lease(grace_ms)
        #: The client's current session: attached by the heartbeat, holdings tied to it. Not
        #: once another replaced it (the server had no such session) or the client closed it.
        self.current = True
        #: Its deadline passed unconfirmed, or it was closed: its holdings are lost, the
        #: deadline moves no more.
        self.expired = False
        #: The live holdings tied to it.
        self.leases: Set[Lease] = set()

    def holds(self) -> bool:
        """Whether a holding may be tied to it now: current, and its deadline not passed."""
        return self.current and not self.expired and time.monotonic() < self.deadline

    @property
    def grace(self) -> float:
        """The grace in seconds."""
        return self.grace_ms / 1000


class SessionState:
    """What one session of a client on one master is, without I/O (that is the lock modules'):
    its current :class:`Term`, the terms replaced whose holdings still count, and the holdings
    of each. Thread-safe; its lock is :attr:`cond`'s, whose waiters are told of every new term
    (a sync client's watcher thread waits on it)."""

    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        self.cond = threading.Condition(threading.Lock())
        #: The session now; ``None`` before the first is opened.
        self.current: Optional[Term] = None
        #: The server does not know ``LOCK.SESSION`` (a module older than sessions): none then.
        self.unsupported = False
        #: Closed (``close_pools``) or dropped: no heartbeat, no watcher.
        self.stopped = False
        #: Called (under the lock) when a term opens or the state stops: an asyncio watcher's
        #: wake-up.
        self.on_change: Optional[Callable[[], None]] = None
        #: Whether the watcher is to run (not while the session is idle), and how many
        #: watcher threads run.
        self.watching = False
        self.watchers = 0
        self._watched: List[Term] = []
        #: The acquires and renewals under way (:meth:`writing`), and when the last one started
        #: or ended (``time.monotonic()`` seconds).
        self._writes = 0
        self._used = time.monotonic()

    def writing(self) -> "SessionState":
        """An acquire or a renewal under way, as a context manager (the state itself), from
        before it asks for its term until its reply came: the session is not idle meanwhile,
        however long a blocking acquire waits (a grant tied to a term the heartbeat stopped
        attaching would come too late to count)."""
        return self

    def __enter__(self) -> None:
        with self.cond:
            self._writes += 1
            self._used = time.monotonic()

    def __exit__(self, *exc: Any) -> None:
        # The state itself rather than a generator (contextmanager): lighter, on every write.
        with self.cond:
            self._writes -= 1
            self._used = time.monotonic()

    def idle(self) -> bool:
        """Whether the heartbeat may stop: no holding, and no acquire or renewal under way or
        for :data:`IDLE_AFTER`."""
        with self.cond:
            return (self._writes == 0 and time.monotonic() - self._used > IDLE_AFTER
                    and not any(term.leases for term in self._watched))

    def usable(self) -> Optional[Term]:
        """The current term if holdings may be tied to it now (:meth:`Term.holds`)."""
        with self.cond:
            term = self.current
            return term if term is not None and term.holds() else None

    def grace(self) -> float:
        """The grace of the current term, in seconds (before one: the one asked, else
        :data:`DEFAULT_GRACE`)."""
        with self.cond:
            if self.current is not None:
                return self.current.grace
            asked = self.settings.grace_ms
            return DEFAULT_GRACE if asked is None else asked / 1000

    def opened(self, id: str, grace_ms: int, sent: float) -> Term:
        """A session was opened by an ``OPEN`` sent at ``sent``: it replaces the current one,
        whose holdings count until its own deadline unless tied to the new one
        (:meth:`retied`)."""
        with self.cond:
            if self.current is not None:
                self.current.current = False
            term = Term(self, id, grace_ms, sent)
            self.current = term
            self._watched.append(term)
            self._changed()
            return term

    def confirmed(self, term: Term, sent: float) -> None:
        """An ``ATTACH`` of ``term`` sent at ``sent`` was answered: its deadline moves to
        ``sent`` + grace (less the drift allowance) — unless it expired meanwhile (never
        brought back)."""
        with self.cond:
            if term.current and not term.expired:
                term.deadline = max(term.deadline, sent + counted_lease(term.grace_ms))

    def expire_due(self) -> None:
        """Expires every term whose deadline passed: its holdings are lost (their lost signals
        set)."""
        with self.cond:
            self._expire_due()

    def next_deadline(self) -> Optional[float]:
        """The soonest deadline to watch (``time.monotonic()`` seconds): the current term's
        and those of replaced terms with holdings; ``None`` for none."""
        with self.cond:
            return min((term.deadline for term in self._watched if not term.expired), default=None)

    def watch(self) -> None:
        """Expires terms as their deadlines pass, until :attr:`stopped` or no longer
        :attr:`watching`: a sync client's watcher thread, independent of the heartbeat's I/O (a
        connect or a reply may hang; the deadline does not wait for it)."""
        with self.cond:
            self.watchers += 1
            try:
                while not self.stopped and self.watching:
                    self._expire_due()
                    deadline = min((term.deadline for term in self._watched if not term.expired),
                                   default=None)
                    left = 1.0 if deadline is None else deadline - time.monotonic()
                    self.cond.wait(min(max(left, 0.0), 1.0))
            finally:
                self.watchers -= 1

    def start_watching(self) -> bool:
        """The watcher is to run; whether a new watcher thread must start (none runs)."""
        with self.cond:
            self.watching = True
            return self.watchers == 0

    def stop_watching(self) -> None:
        """The session is idle: the watcher stops."""
        with self.cond:
            self.watching = False
            self._changed()

    def tie(self, lease: Lease, term: Term) -> None:
        """Ties a new holding, granted with ``term``'s id, to it; lost at once when ``term`` no
        longer holds (its grant came too late)."""
        with self.cond:
            lease.term = term
            if term.holds():
                term.leases.add(lease)
            else:
                lease.lose()

    def move(self, lease: Lease, term: Term) -> None:
        """A renewal with ``term``'s id counted: the holding is ``term``'s from now on — unless
        it is lost (its session's deadline passed: never brought back) or ``term`` no longer
        holds."""
        with self.cond:
            old = lease.term
            if old is term or lease.lost.is_set() or not term.holds():
                return
            if old is not None:
                if old.expired or time.monotonic() >= old.deadline:
                    return
                old.leases.discard(lease)
            lease.term = term
            term.leases.add(lease)

    def untie(self, lease: Lease) -> None:
        """The holding was released."""
        with self.cond:
            if lease.term is not None:
                lease.term.leases.discard(lease)

    def to_retie(self, old: Term) -> List[Tuple[Lease, int, List[Any]]]:
        """Each live holding of ``old`` (a term the server no longer has: a failover, a restart)
        with a renewal to the lease it has left (as counted, in ms: never longer than it was);
        holdings with nothing left are lost now. The renewal names no session yet."""
        now = time.monotonic()
        plan = []
        with self.cond:
            for lease in list(old.leases):
                ms = int((lease.own - now) * 1000)
                if ms < 1 or lease.renew_command is None:
                    old.leases.discard(lease)
                    lease.lose()
                else:
                    plan.append((lease, ms, lease.renew_command(ms)))
        return plan

    def retied(self, old: Term, new: Term, lease: Lease, reply: Any, sent: float, ms: int) -> None:
        """The reply to a renewal of ``lease`` (of ``old``) to ``ms``, tied to ``new``, sent at
        ``sent``: renewed in time, the holding is ``new``'s; refused (or an error, or ``old``
        expired first), lost — unless it was released or moved meanwhile."""
        with self.cond:
            if lease not in old.leases:
                return
            old.leases.discard(lease)
            renewed = not isinstance(reply, Exception) and lease.renewed(reply)
            in_time = not old.expired and time.monotonic() < old.deadline and new.holds()
            if renewed and in_time:
                lease.own = min(lease.own, sent + counted_lease(ms))
                lease.term = new
                new.leases.add(lease)
            else:
                lease.lose()

    def close(self) -> None:
        """The client closed the session (``LOCK.SESSION CLOSE`` released its holdings): every
        holding is lost, and the heartbeat and watcher stop."""
        with self.cond:
            now = time.monotonic()
            for term in [*self._watched, *([self.current] if self.current else [])]:
                term.current = False
                term.deadline = min(term.deadline, now)
            self._expire_due()
            self.stopped = True
            self._changed()

    def stop(self) -> None:
        """The client is gone (collected): the watcher stops."""
        with self.cond:
            self.stopped = True
            self._changed()

    def _expire_due(self) -> None:
        now = time.monotonic()
        for term in self._watched:
            if not term.expired and now >= term.deadline:
                term.expired = True
                for lease in term.leases:
                    lease.lost.set()
                term.leases.clear()
        self._watched = [term for term in self._watched
                         if not term.expired and (term is self.current or term.leases)]

    def _changed(self) -> None:
        self.cond.notify_all()
        if self.on_change is not None:
            self.on_change()


def session_setup() -> List[List[Any]]:
    """What a session's connection sends first: ``CLIENT NO-EVICT on`` (kept under memory
    pressure; an error on servers before 7.0 is ignored) and ``CLIENT SETNAME
    leasehold-session``."""
    return [["CLIENT", "NO-EVICT", "on"], ["CLIENT", "SETNAME", SESSION_CONNECTION_NAME]]


def open_command(settings: SessionSettings) -> List[Any]:
    """``LOCK.SESSION OPEN [GRACE grace-ms]``."""
    grace = [] if settings.grace_ms is None else ["GRACE", settings.grace_ms]
    return ["LOCK.SESSION", "OPEN", *grace]


def opened(reply: Any) -> Tuple[str, int]:
    """The id and the grace (ms) of an ``OPEN`` reply."""
    id, grace_ms = reply
    return str(text(id)), int(grace_ms)


def no_such_session(reply: Any) -> bool:
    """Whether a reply is ``ERR no such session``: the server has not (or no longer) the
    session — after a failover or a restart, or it ended."""
    return isinstance(reply, ResponseError) and "no such session" in str(reply)


def unknown_command(reply: Any) -> bool:
    """Whether a reply says the server does not know the command (a module without
    sessions)."""
    return isinstance(reply, ResponseError) and "unknown command" in str(reply).lower()


class Local(threading.local):
    """What one holder (one thread, with ``thread_local=True``) keeps: redis-py's ``token``
    (the owner), the fencing tokens, the lease, and the watchdog."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    lease: Optional[Lease] = None
    keeper: Any = None

    def update(self, **fields: Any) -> None:
        """Sets several fields at once."""
        for name, value in fields.items():
            setattr(self, name, value)


class Shared:
    """What one holder keeps when ``thread_local=False``: the same fields, for every thread."""

    token: Any = None
    fencing_token: Optional[int] = None
    fencing_tokens: Optional[List[int]] = None
    lease: Optional[Lease] = None
    keeper: Any = None

    def update(self, **fields: Any) -> None:
        """Sets several fields at once."""
        for name, value in fields.items():
            setattr(self, name, value)


class TaskLocal:
    """What one holder (one asyncio task, with ``thread_local=True``) keeps: the fields of
    :class:`Local`, in a context variable. The tasks of one thread share a ``threading.local``,
    so with it two tasks on one lock would overwrite each other's owner, and one would release
    the other's holding; each task runs in a context of its own. A task started by a holder
    starts with a copy of what the holder kept then."""

    _FIELDS = ("token", "fencing_token", "fencing_tokens", "lease", "keeper")

    def __init__(self) -> None:
        state: contextvars.ContextVar[dict] = contextvars.ContextVar("leasehold_holder", default={})
        object.__setattr__(self, "_state", state)

    def __getattr__(self, name: str) -> Any:
        if name not in TaskLocal._FIELDS:
            raise AttributeError(name)
        return self._state.get().get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in TaskLocal._FIELDS:
            raise AttributeError(name)
        self.update(**{name: value})

    def update(self, **fields: Any) -> None:
        """Sets several fields at once: one new dict (a grant and a release each set four or
        five, and copying the dict for each was a tenth of an asyncio acquire + release)."""
        for name in fields:
            if name not in TaskLocal._FIELDS:
                raise AttributeError(name)
        # A new dict each time: the one a context holds may be its parent's too.
        self._state.set({**self._state.get(), **fields})


class LockBase:
    """What the sync and asyncio ``Lock`` share: redis-py's constructor (same arguments and
    defaults, plus ``watchdog``), the current holding's state, and the lease and command they
    send. The I/O is theirs."""

    #: The module's options for this kind of lock (``SHARED``, ``LIMIT n``).
    mode: Sequence[Any] = ()

    #: The keys of a set taken together (``LOCK.MACQUIRE``, :class:`leasehold.MultiLock`);
    #: ``None`` for one lock, ``name``.
    names: Optional[List[Any]] = None

    #: Where a holder's state lives with ``thread_local=True``: per thread (per task for asyncio).
    holder_state: type = Local

    #: A holding's lost signal (:attr:`Lease.lost`): ``threading.Event`` (``asyncio.Event``).
    lost_signal: type = threading.Event

    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        watchdog: bool = False,
        sync: Sync = Sync(),
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.watchdog = watchdog or timeout is None
        self.sync = sync
        self.local: Union[Local, TaskLocal, Shared] = self.holder_state() if self.thread_local else Shared()

    @property
    def fencing_token(self) -> Optional[int]:
        """The fencing token of the current holding, ``None`` when not held. For a set, the
        largest of its tokens: the one its newly taken keys share."""
        return self.local.fencing_token

    @property
    def fencing_tokens(self) -> Optional[List[int]]:
        """The fencing tokens of the current holding, one per key (for a set in the order of
        its names; a key the owner held before keeps its older token); ``None`` when not
        held."""
        return self.local.fencing_tokens

    @property
    def lease_end(self) -> Optional[float]:
        """When the current holding's lease ends as this client knows it, in
        ``time.monotonic()`` seconds: its grant's lease counted from when the grant was sent
        (for a wait, answered), moved by every renewal that counted — synced to the replicas
        like grants (:class:`leasehold.Sync`), counted from when it was sent — and no later than
        its session's deadline (see :func:`leasehold.configure_sessions`), which each answered
        heartbeat moves on. ``None`` when not held. The watchdog reports the holding lost at
        this time."""
        lease = self.local.lease
        return None if lease is None else lease.end

    def _guarded(self, command: Sequence[Any]) -> List[Any]:
        """``LOCK.GUARD`` of ``command`` by the current holding: its owner, and its fencing
        token, so that a holding lost and taken again by the same owner runs nothing.
        ``LockError`` when not held, or for a set (``LOCK.GUARD`` checks one lock)."""
        owner, token = self.local.token, self.local.fencing_token
        if owner is None or token is None:
            raise LockError("Cannot guard a command with a lock that's not held")
        if self.names is not None:
            raise LockError("a MultiLock cannot guard a command: LOCK.GUARD checks one lock")
        return guard_command(self.name, owner, token, self.sync, command)

    def _fenced_by_holding(self, fence: Any, command: Sequence[Any]) -> List[Any]:
        """``LOCK.FENCED`` of ``command`` through ``fence`` with the current holding's fencing
        token (a set's largest). ``LockError`` when not held."""
        token = self.local.fencing_token
        if token is None:
            raise LockError("Cannot run a fenced command with a lock that's not held")
        return fenced_command(fence, token, self.sync, command)

    def _keys(self) -> List[Any]:
        """The lock's key, or a set's keys."""
        return [self.name] if self.names is None else list(self.names)

    def _command(self, verb: str, owner: Any, *rest: Any) -> List[Any]:
        """``LOCK.<verb> name owner rest...``, or for a set ``LOCK.M<verb> numkeys names...
        owner rest...``."""
        if self.names is None:
            return [f"LOCK.{verb}", self.name, owner, *rest]
        return [f"LOCK.M{verb}", len(self.names), *self.names, owner, *rest]

    def _whole(self, reply: Any) -> bool:
        """Whether a ``LOCK.RELEASE`` / ``LOCK.RENEW`` reply (a set's: how many) covers every
        key."""
        return reply == len(self._keys())

    def _lease_ms(self) -> int:
        """The lease each acquire and renewal asks for, in ms (``timeout``, or 30 s)."""
        return to_ms(DEFAULT_LEASE if self.timeout is None else self.timeout)

    def _acquire_command(self, owner: Any, wait_ms: Optional[int] = None) -> List[Any]:
        """``LOCK.ACQUIRE name owner lease-ms [SHARED [LIMIT n]] [WAIT wait-ms] SYNC|NOSYNC``
        (a set: ``LOCK.MACQUIRE numkeys names... owner lease-ms [WAIT wait-ms] SYNC|NOSYNC``;
        see :attr:`Sync.option`)."""
        command = self._command("ACQUIRE", owner, self._lease_ms(), *self.mode)
        if wait_ms is not None:
            command += ["WAIT", wait_ms]
        return [*command, self.sync.option]

    def _granted(self, reply: Any) -> bool:
        """Whether a ``LOCK.ACQUIRE`` / ``LOCK.MACQUIRE`` reply is a grant."""
        return reply is not None and not isinstance(reply, Exception)

    def _grant_write(self, owner: Any) -> Write:
        """A grant without waiting, synced as :attr:`sync` says; in a batch whose sync was
        refused, released by its owner (one hold, as the server releases a refused grant)."""
        write = Write(self._acquire_command(owner), self._granted)
        write.undo = Undo(self._command("RELEASE", owner))
        return write

    def _wait_pipeline(
        self, owner: Any, asking: bool, deadline: Optional[float], term: Optional[Term]
    ) -> Pipeline:
        """A blocking acquire waiting in the server until ``deadline`` (``time.monotonic()``
        seconds; ``None``: as long as it takes), tied to ``term``'s session, then synced (by
        the server with ``SYNC``: its reply comes once the grant counts)."""
        left = None if deadline is None else deadline - time.monotonic()
        write = Write(self._acquire_command(owner, wait_ms(left)), self._granted)
        write.tie(term)
        return Pipeline(write, sync=self.sync, waiting=True, wait_left=left, asking=asking)

    def _renew_write(self, owner: Any, lease_ms: int, until: Optional[float]) -> Write:
        """A renewal to ``lease_ms`` (``LOCK.RENEW name owner lease-ms SYNC|NOSYNC``, a set's
        ``LOCK.MRENEW``), synced as :attr:`sync` says; its replies must come by ``until``."""
        write = Write(self._command("RENEW", owner, lease_ms, self.sync.option), self._whole, until)
        write.undo = RENEWAL_UNDO
        return write

    def _sync_deadline(self, until: Optional[float]) -> float:
        """Until when a synced write may queue for a connection: the sync timeout, and no later
        than ``until``."""
        deadline = time.monotonic() + self.sync.timeout
        return deadline if until is None else min(deadline, until)

    def _held(self, owner: Any, grant: Grant) -> None:
        """Keeps a grant: ``owner``, the tokens of ``LOCK.ACQUIRE``'s (or a set's) reply, and
        the lease, tied to the grant's session if it named one."""
        reply = grant.reply
        tokens = [int(token) for token in reply] if isinstance(reply, list) else [int(reply)]
        lease = Lease(grant.started + counted_lease(self._lease_ms()), self.lost_signal)
        # Taking the holding over to a new session (after a failover) renews it to no longer
        # than it has left, not synced: one pipeline on the session's connection, which a
        # synced renewal would hold up for the server's sync timeout each.
        lease.renew_command = lambda ms: self._command("RENEW", owner, ms, "NOSYNC")
        lease.renewed = self._whole
        self.local.update(token=owner, fencing_token=max(tokens), fencing_tokens=tokens, lease=lease)
        if grant.term is not None:
            grant.term.state.tie(lease, grant.term)

    def _counted(self, lease: Lease, started: float, lease_ms: int,
                 term: Optional[Term] = None) -> bool:
        """A renewal sent at ``started`` counts: the lease believed ends ``lease_ms`` after
        (less the drift allowance, :func:`counted_lease`); one naming ``term``'s session ties
        the holding to it."""
        lease.own = started + counted_lease(lease_ms)
        if term is not None:
            term.state.move(lease, term)
        return True

    def _unsure(self, lease: Lease, started: float, lease_ms: int) -> None:
        """A renewal sent at ``started`` did not count, but the master may have made it: a
        ``lease_ms`` shorter than what was left shortened the lease there, so the lease
        believed ends no later than that either."""
        lease.own = min(lease.own, started + counted_lease(lease_ms))

    def _unkept(self, write: Write) -> Optional[Exception]:
        """Why a grant the server made and counted cannot be kept, and must be released by
        the client: the client's own ``WAIT`` did not sync it (:meth:`Pipeline.not_synced`), or
        its reply came only after its lease ended, or after the deadline of the session it is
        tied to (:class:`Term`) — nobody can count on it then, the lock may have been handed on
        meanwhile. ``None`` when it can be kept."""
        if write.problem is not None:
            return write.problem
        if write.started + counted_lease(self._lease_ms()) <= time.monotonic():
            return NotReplicatedError(None, None, "the grant's reply came only after its lease "
                                      "ended")
        if write.term is not None and not write.term.holds():
            return NotReplicatedError(None, None, "the grant came after its session's deadline: "
                                      "the session's connection was down for longer than its "
                                      "grace")
        return None

    def _renewal_counts(self, write: Write, lease: Lease, lease_ms: int) -> bool:
        """What a synced renewal's replies mean: ``True`` once it counts, ``False`` when the
        lease had run out; raises :class:`NotReplicatedError` (or the error ``WAIT`` got) when
        the master applied it and it did not count — the server refused it (``NOREPLICAS``), or
        the client's own ``WAIT`` did not sync it — and the lease believed ends no later than
        the renewal would have put it (:meth:`_unsure`)."""
        try:
            applied = write.outcome() is not None
        except NotReplicatedError:
            self._unsure(lease, write.started, lease_ms)
            raise
        if not applied:
            return False
        if write.problem is not None:
            self._unsure(lease, write.started, lease_ms)
            raise write.problem
        return self._counted(lease, write.started, lease_ms, write.term)

    def _forget(self) -> None:
        """Drops the current holding (at release): stops its watchdog."""
        keeper = self.local.keeper
        if keeper is not None:
            keeper.stop()
        lease = self.local.lease
        if lease is not None and lease.term is not None:
            lease.term.state.untie(lease)
        self.local.update(token=None, fencing_token=None, fencing_tokens=None, lease=None, keeper=None)

    def _released_on_exit(self, error: LockError) -> None:
        """What leaving a ``with`` block does when the release failed: raise, or with
        ``raise_on_release_error=False`` log it as redis-py does."""
        if self.raise_on_release_error:
            raise error
        logger.warning("Lock was unlocked or no longer owned when exiting context manager.")


class SetOf:
    """Makes a lock class a set of locks taken together (``MultiLock``): the constructor takes
    ``names`` where the lock takes ``name``, and the lock's commands become ``LOCK.M*``."""

    names: Optional[List[Any]]

    def __init__(self, redis: Any, names: Sequence[Any], **kwargs: Any) -> None:
        names = list(names)
        if not names:
            raise LockError("a MultiLock needs at least one name")
        super().__init__(redis, names[0], **kwargs)  # type: ignore[call-arg]
        self.names = names
