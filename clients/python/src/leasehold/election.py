"""Elections on the leasehold module (``LOCK.CAMPAIGN``, ``LOCK.LEADER``, ``LOCK.OBSERVE``,
``LOCK.PROCLAIM``, ``LOCK.RESIGN``): :class:`Election`, the :class:`Leadership` a campaign
wins, and :class:`ElectionState`, who leads as an observer sees it.

An election is a lock held by its leader: a campaign is ``LOCK.ACQUIRE`` with a value, on the
server's same code path, so a :class:`Leadership` is a held :class:`leasehold.Lock` underneath —
the same waiting in the server (in arrival order), session, synced grants, watchdog and
``lost`` signal; only the command that takes it differs (``LOCK.CAMPAIGN name candidate value
lease-ms ...`` for ``LOCK.ACQUIRE name owner lease-ms ...``). Times are seconds (floats), sent
as whole milliseconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Iterator, List, Optional, Type, Union

import redis
from redis.exceptions import (
    ConnectionError,
    LockError,
    LockNotOwnedError,
    MovedError,
    ResponseError,
    TimeoutError,
)

from ._pools import pooled_connection_kwargs
from ._protocol import (
    DEFAULT_LEASE,
    REDIRECTS,
    WAIT_MARGIN,
    Lease,
    Number,
    Sync,
    as_map,
    is_cluster,
    new_owner,
    text,
    time_left,
    to_ms,
    write_reply,
)
from .lock import Lock, send

__all__ = ["Election", "ElectionState", "Leadership"]

#: The longest one ``LOCK.OBSERVE ... BLOCK`` of an observer waits, in seconds: a wait with no
#: end is asked for in such pieces (each with the same ``LAST``: nothing is missed between
#: them), so that a connection that went silent (a partition) is found out within it plus
#: :data:`leasehold._protocol.WAIT_MARGIN`.
OBSERVE_BLOCK = 10.0

#: What a value may be: what redis-py sends as a bulk string.
Value = Union[bytes, str, int, float]


@dataclass(frozen=True)
class ElectionState:
    """Who leads an election, as ``LOCK.LEADER`` or ``LOCK.OBSERVE`` replied: a leader with its
    term's epoch and value, or nobody (``leader`` ``None``, ``epoch`` 0, ``value`` empty,
    ``ttl`` ``None``)."""

    #: The candidate that leads, as text; ``None`` when nobody leads.
    leader: Optional[str]
    #: The term's epoch, its fencing token; 0 when nobody leads.
    epoch: int
    #: What the leader proclaims, as redis-py replies it: ``bytes``, or ``str`` for a client
    #: made with ``decode_responses=True``. Empty when nobody leads (and for a plain lock's
    #: holder, which counts as a leader).
    value: Any
    #: The term's lease left when the server replied, in seconds; ``None`` when nobody leads,
    #: or when the key has no expiry (someone made it persistent).
    ttl: Optional[float]

    @property
    def vacant(self) -> bool:
        """Whether nobody leads."""
        return self.leader is None


def empty_value(encoder: Any) -> Any:
    """An empty value as a client with ``encoder`` replies it: ``""`` with
    ``decode_responses``, else ``b""``."""
    return "" if getattr(encoder, "decode_responses", False) else b""


def state_of(reply: Any, encoder: Any) -> ElectionState:
    """The :class:`ElectionState` of a ``LOCK.LEADER`` / ``LOCK.OBSERVE`` reply (the leadership
    map, RESP2 or RESP3); a null ``LOCK.LEADER`` reply is nobody leading."""
    fields = as_map(reply)
    if fields is None:
        return ElectionState(None, 0, empty_value(encoder), None)
    leader = text(fields.get("leader"))
    ttl_ms = int(fields.get("ttl", -2))
    value = fields.get("value")
    return ElectionState(
        leader if leader else None,
        int(fields.get("epoch") or 0),
        empty_value(encoder) if value is None else value,
        ttl_ms / 1000 if ttl_ms >= 0 and leader else None,
    )


def observe_command(name: Any, last: Optional[ElectionState], block: Optional[float]) -> List[Any]:
    """``LOCK.OBSERVE name [LAST epoch value] [BLOCK ms]``: ``last`` what was seen (nobody
    leading as ``LAST 0 ""``), ``block`` the wait in seconds (at least 1 ms)."""
    command: List[Any] = ["LOCK.OBSERVE", name]
    if last is not None:
        command += ["LAST", last.epoch, b"" if last.vacant else last.value]
    if block is not None:
        command += ["BLOCK", max(int(block * 1000), 1)]
    return command


def observe_wait(timeout: Optional[Number], block: Number) -> Optional[float]:
    """How long the next ``BLOCK`` of an observer waits, in seconds, with ``timeout`` seconds
    left for a change (``None``: no end); ``None`` when none is left."""
    if timeout is None:
        return block
    return None if timeout <= 0 else min(timeout, block)


class Campaigning:
    """Mixed into a lock class: its grants are campaigns. ``LOCK.CAMPAIGN name candidate value
    lease-ms [WAIT wait-ms] SYNC|NOSYNC`` instead of ``LOCK.ACQUIRE name owner lease-ms ...``
    (the session goes after, as for a lock); everything else — waiting, recovering a lost
    reply (a candidate that campaigns again keeps its term), syncing, the session, the
    watchdog's ``LOCK.RENEW`` — is the lock's."""

    #: What the candidate proclaims once it leads.
    value: Value = b""

    def _acquire_command(self, owner: Any, wait_ms: Optional[int] = None) -> List[Any]:
        command = ["LOCK.CAMPAIGN", self.name, owner, self.value,  # type: ignore[attr-defined]
                   self._lease_ms()]  # type: ignore[attr-defined]
        if wait_ms is not None:
            command += ["WAIT", wait_ms]
        return [*command, self.sync.option]  # type: ignore[attr-defined]


class Candidacy(Campaigning, Lock):
    """One campaign of a candidate, as a :class:`leasehold.Lock` whose holding is the term:
    watched (the watchdog renews it), and shared by every thread (the leadership is)."""

    def __init__(self, redis: Any, name: Any, value: Value, ttl: Number, sync: Sync) -> None:
        super().__init__(redis, name, timeout=ttl, thread_local=False, watchdog=True, sync=sync)
        self.value = value




class ElectionBase:
    """What the sync and asyncio ``Election`` share without I/O: the constructor and its
    checks."""

    def __init__(
        self,
        redis: Any,
        name: Any,
        candidate: Optional[str] = None,
        ttl: Number = DEFAULT_LEASE,
        *,
        sync: Sync = Sync(),
    ) -> None:
        """``redis`` a client (``redis.Redis`` or ``RedisCluster``; the asyncio ones for
        :mod:`leasehold.asyncio`) or a ``ConnectionPool`` to make one on; ``name`` the
        election's key; ``candidate`` who campaigns (1 to 256 bytes; default a new random id,
        32 hex digits, kept by this object); ``ttl`` the term's lease in seconds (default 30 s),
        renewed by the watchdog every third of it while the term lasts; ``sync`` how campaigns
        and renewals reach the replicas (:class:`leasehold.Sync`, default the in-sync set).
        Sessions are the client's (:func:`leasehold.configure_sessions`: on by default).
        ``LockError`` for a ttl under 1 ms."""
        to_ms(ttl, "ttl")
        self.redis = self._client_of(redis)
        self.name = name
        self.candidate = candidate if candidate is not None else new_owner()
        self.ttl = ttl
        self.sync = sync
        self._guard = threading.Lock()
        self._campaigning = False
        self._leading: Any = None

    #: The connection pool class a client may be given as, and the client made on it.
    pooled: Any = (redis.ConnectionPool, redis.Redis)

    def _client_of(self, client: Any) -> Any:
        """A client for ``client``: itself, or one made on it when it is a connection pool."""
        pool, made = self.pooled
        return made(connection_pool=client) if isinstance(client, pool) else client

    def _begin(self) -> None:
        """A campaign begins: ``LockError`` when one of this object is under way, or its
        candidate leads (a term neither resigned nor lost)."""
        with self._guard:
            if self._campaigning:
                raise LockError(f"candidate {self.candidate} is already campaigning for "
                                f"{self.name!r}")
            leading = self._leading
            if leading is not None and leading.leading:
                raise LockError(f"candidate {self.candidate} already leads {self.name!r} "
                                f"(epoch {leading.epoch}): proclaim a new value, or resign first")
            self._campaigning = True

    def _end(self, leadership: Any) -> Any:
        """The campaign ended, won (``leadership``) or not (``None``)."""
        with self._guard:
            self._campaigning = False
            if leadership is not None:
                self._leading = leadership
        return leadership


class LeadershipBase:
    """What the sync and asyncio ``Leadership`` share: the term, as a held lock underneath."""

    def __init__(self, election: Any, lock: Any, value: Value) -> None:
        self.election = election
        self._lock = lock
        #: The term's epoch: its fencing token, larger than every earlier term's (and every
        #: token the server issued). Kept after the term ended.
        self.epoch: int = int(lock.fencing_token)
        #: What the leader proclaims: the campaign's value, then each proclaimed one.
        self.value: Value = value
        self._lease: Lease = lock.local.lease
        #: Set by :meth:`resign`.
        self.resigned = False

    @property
    def name(self) -> Any:
        """The election's key."""
        return self.election.name

    @property
    def candidate(self) -> str:
        """The candidate that leads."""
        return self.election.candidate

    @property
    def lease_end(self) -> float:
        """When the term ends as this client knows it, ``time.monotonic()`` seconds: as
        :attr:`leasehold.Lock.lease_end` (moved on by each renewal that counted, no later than
        the session's deadline)."""
        return self._lease.end

    @property
    def leading(self) -> bool:
        """Whether the term is neither resigned nor known lost (:attr:`lost`) — it may still
        have ended unbeknownst, as any lease."""
        return not self.resigned and not self._lease.lost.is_set()

    def _check(self) -> None:
        if self.resigned:
            raise LockError(f"the term of epoch {self.epoch} of {self.name!r} was resigned")

    def _stale(self, what: str) -> LockNotOwnedError:
        """The term no longer leads: the watchdog stops, :attr:`lost` is set; the error to
        raise."""
        self._lock._forget()
        self._lease.lost.set()
        return LockNotOwnedError(f"Cannot {what}: the term of epoch {self.epoch} of "
                                 f"{self.name!r} no longer leads")

    def _proclaimed(self, reply: Any, value: Value) -> bool:
        reply = write_reply(reply)
        if isinstance(reply, Exception):
            raise reply
        if int(reply) != 1:
            raise self._stale("proclaim")
        self.value = value
        return True

    def __repr__(self) -> str:
        state = "resigned" if self.resigned else "lost" if self._lease.lost.is_set() else "leading"
        return (f"<{type(self).__name__} {self.name!r} candidate={self.candidate!r} "
                f"epoch={self.epoch} {state}>")


class Leadership(LeadershipBase):
    """A term won by :meth:`Election.campaign`: its :attr:`epoch` (the fencing token to pass
    with every write the leader makes), its :attr:`value`, :meth:`proclaim`, :meth:`resign`,
    and :attr:`lost`. The watchdog renews the term (``LOCK.RENEW``) every third of the ttl
    until it is resigned or lost. As a context manager it resigns on exit."""

    @property
    def lost(self) -> threading.Event:
        """Set once the term is known lost — before another candidate can lead: a renewal was
        refused, or the lease that counted ended while no renewal could be synced, or its
        session's deadline passed without an answered heartbeat (the server may end the session
        a grace later and hand the election on), or a :meth:`proclaim` found it no longer
        leads. Not set by :meth:`resign`. As :attr:`leasehold.Lock.lost`."""
        return self._lease.lost

    def proclaim(self, value: Value) -> bool:
        """Proclaims ``value`` (0 to 65 536 bytes) from now on (``LOCK.PROCLAIM name epoch
        value``; the epoch and lease do not change, observers are told). ``True`` once set.
        ``LockNotOwnedError`` when the term no longer leads — it ended, and another term or
        nobody leads; nothing is changed, :attr:`lost` is set and the watchdog stops —
        ``LockError`` after :meth:`resign`, :class:`leasehold.NotReplicatedError` when the
        server could not sync it to its in-sync set (``SYNC``, the default; a fixed replica
        count sends ``NOSYNC`` and waits for nothing), and the server's error for a value too
        long."""
        self._check()
        reply: Any
        try:
            reply = self.election.redis.execute_command(
                "LOCK.PROCLAIM", self.name, self.epoch, value, self.election.sync.option)
        except ResponseError as error:
            reply = error
        return self._proclaimed(reply, value)

    def resign(self) -> None:
        """Ends the term (``LOCK.RESIGN name epoch``, not synced): the watchdog stops, and the
        first waiting candidate leads at once with a larger epoch. ``LockNotOwnedError`` when the
        term had already ended (nothing is changed: no later term is ended); ``LockError`` when
        resigned already."""
        self._check()
        self.resigned = True
        self._lock._forget()
        if self.election.redis.execute_command("LOCK.RESIGN", self.name, self.epoch) != 1:
            raise LockNotOwnedError(f"Cannot resign: the term of epoch {self.epoch} of "
                                    f"{self.name!r} no longer leads")

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        """Resigns unless resigned already; raises ``LockNotOwnedError`` when the term had
        ended, as a lock's ``with`` does when its release finds it lost."""
        if not self.resigned:
            self.resign()


class Election(ElectionBase):
    """An election on the leasehold module: ``Election(r, "cron:leader", ttl=15)``.

    :meth:`campaign` waits in line (in the server, in arrival order) until this candidate
    leads and returns its :class:`Leadership`; :meth:`leader` says who leads now;
    :meth:`observe` yields every change, a vacancy included. Built on :class:`leasehold.Lock`:
    a term is tied to the client's session (a crashed leader's term ends a grace after its
    connection closed, see :func:`leasehold.configure_sessions`), its grant synced to the
    master's in-sync replicas before it counts (``sync``, :class:`leasehold.Sync`), renewed by
    the watchdog until resigned or lost. One campaign at a time per object."""

    def campaign(self, value: Value = b"", timeout: Optional[Number] = None) -> Optional[Leadership]:
        """Campaigns with ``value`` (what the leader proclaims, 0 to 65 536 bytes; its address,
        say): waits in the server, in arrival order, until this candidate leads, up to
        ``timeout`` seconds (``None``: as long as it takes; 0: leads now or not at all), and
        returns the :class:`Leadership` — or ``None`` when another still led at the timeout,
        as :meth:`leasehold.Lock.acquire` returns ``False``. A wait whose reply was lost
        campaigns again with the same candidate, which keeps the term it may have won.
        :class:`leasehold.NotReplicatedError` when the grant did not count (see
        :meth:`leasehold.Lock.acquire`); ``LockError`` when a campaign of this object is under
        way, or its candidate leads already (proclaim a new value instead, or resign first)."""
        self._begin()
        leadership = None
        try:
            lock = Candidacy(self.redis, self.name, value, self.ttl, self.sync)
            if lock.acquire(blocking=True, blocking_timeout=timeout, token=self.candidate):
                leadership = Leadership(self, lock, value)
        finally:
            self._end(leadership)
        return leadership

    def leader(self) -> ElectionState:
        """Who leads now (``LOCK.LEADER``); nobody (:attr:`ElectionState.vacant`) when the key
        does not exist."""
        reply = self.redis.execute_command("LOCK.LEADER", self.name)
        return state_of(reply, self.redis.get_encoder())

    def observe(self, timeout: Optional[Number] = None) -> Iterator[ElectionState]:
        """Who leads, then every change: an iterator of :class:`ElectionState`, the first the
        current state (nobody leading included), each next one the next state that differs
        from the one before (``LOCK.OBSERVE ... LAST epoch value BLOCK ms``) — a vacancy always
        before the next leader; whole terms may be missed between two states, never seen out of
        order. Waits as long as it takes for each change, or ends when none came within
        ``timeout`` seconds. On a connection of its own (made from the client's settings,
        without retries), closed when the iterator is closed or collected (``break`` out of a
        ``for`` loop closes it); a dropped connection is made again once — the state seen is
        asked again, nothing is missed — a second failure in a row raises
        ``ConnectionError``."""
        if timeout is not None:
            to_ms(timeout, "timeout")
        return self._observe(timeout)

    def _observe(self, timeout: Optional[Number]) -> Iterator[ElectionState]:
        line = ObserverLine(self)
        encoder = self.redis.get_encoder()
        try:
            seen = state_of(line.call(observe_command(self.name, None, None), 0.0), encoder)
            yield seen
            while True:
                deadline = None if timeout is None else time.monotonic() + timeout
                reply = None
                while reply is None:
                    block = observe_wait(time_left(deadline), OBSERVE_BLOCK)
                    if block is None:
                        return
                    reply = line.call(observe_command(self.name, seen, block), block)
                seen = state_of(reply, encoder)
                yield seen
        finally:
            line.close()


class ObserverLine:
    """An observer's connection to the election's master, made from the client's settings
    without retries (a blocking ``LOCK.OBSERVE`` holds it, so no pooled one)."""

    def __init__(self, election: Election) -> None:
        self.election = election
        self.connection: Any = None

    def call(self, command: List[Any], block: float) -> Any:
        """``command``'s reply, which may take ``block`` seconds (plus
        :data:`leasehold._protocol.WAIT_MARGIN`); a dropped connection (or a reply that did not
        come in time) is made again once; follows ``MOVED``. Raises an error reply."""
        failed = False
        for _ in range(REDIRECTS):
            try:
                reply = self._send(command, block)
            except (ConnectionError, TimeoutError):
                self.close()
                if failed:
                    raise
                failed = True
                continue
            if isinstance(reply, MovedError) and is_cluster(self.election.redis):
                self.close()
                self.election.redis.nodes_manager.initialize()
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply
        raise ConnectionError(f"could not observe {self.election.name!r}")

    def _send(self, command: List[Any], block: float) -> Any:
        if self.connection is None:
            master = Candidacy(self.election.redis, self.election.name, b"", DEFAULT_LEASE,
                               self.election.sync)._master()
            self.connection = master.connection_class(
                **pooled_connection_kwargs(master.connection_kwargs))
        ((reply, _),) = send(self.connection, [command], block + WAIT_MARGIN, None)
        return reply

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.disconnect()
