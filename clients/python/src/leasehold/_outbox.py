"""Group commit: the synced writes (grants made without waiting, renewals) waiting to go to one
master, and who sends them. Whoever sends takes every write queued with the same sync settings
— up to :data:`MOST_PER_ROUND_TRIP` — into one round trip on one sync connection: the writes,
then one ``LOCK.INSYNC``, ``WAIT``, ``LOCK.INSYNC`` (a ``WAIT`` covers every write before it on
its connection).
So concurrent writes share a round trip instead of each paying its own.

At most as many callers send at once as the sync pool has connections (a sender's *place*),
and a caller gets a free place only when no sender is about to take its write anyway (every
sender is in a round trip); the others wait for their outcome, or for a place handed to them.
A sender stops once nothing is queued (or, a thread, once its own write is answered), handing
its place to the oldest queued write's caller; so a queued write always has a sender coming.
The bookkeeping here is the same for threads and asyncio tasks; the I/O is the lock modules'."""

from __future__ import annotations

import enum
import threading
from typing import Any, List, Optional

from redis.exceptions import ConnectionError, RedisError, TimeoutError

from ._protocol import Pipeline, Seen, Sync, Write

#: The most writes sent in one round trip.
MOST_PER_ROUND_TRIP = 64


class State(enum.Enum):
    """Where a queued write is."""

    QUEUED = "queued"  # waiting for a sender; its caller may withdraw it
    TAKEN = "taken"  # in a sender's round trip
    DONE = "done"  # answered (or failed), or withdrawn


class Queued:
    """A write waiting to be sent, and what its caller is told: its outcome (``error``, or the
    reply in the write itself), or that it now holds a sender's place (``place``). ``woken``
    is set for either: a ``threading.Event`` or an ``asyncio.Event``."""

    def __init__(self, write: Write, sync: Sync, woken: Any) -> None:
        self.write = write
        self.sync = sync
        self.woken = woken
        self.state = State.QUEUED
        #: The caller holds a sender's place it has not started sending with.
        self.place = False
        #: Why the round trip that carried the write brought no reply for it.
        self.error: Optional[BaseException] = None

    @property
    def done(self) -> bool:
        """Whether the outcome came (or the write was withdrawn)."""
        return self.state is State.DONE


class Outbox:
    """The synced writes queued for one master, oldest first, and its free sender places."""

    def __init__(self, seen: Seen, places: int) -> None:
        """``seen``: what was seen of the master; ``places``: how many callers may send at once
        (the sync pool's size)."""
        self.seen = seen
        self._lock = threading.Lock()
        self._queued: List[Queued] = []
        self._places = places
        self._free = places
        self._in_round_trips = 0  # senders between a take and its delivery

    def queue(self, write: Write, sync: Sync, woken: Any) -> Queued:
        """Queues ``write``, synced as ``sync``; its caller gets a sender's place
        (``place``) if one is free and every sender is in a round trip."""
        queued = Queued(write, sync, woken)
        with self._lock:
            self._queued.append(queued)
            pending = self._places - self._free - self._in_round_trips
            if self._free and not pending:
                self._free -= 1
                queued.place = True
        return queued

    def start(self, queued: Queued) -> bool:
        """Whether ``queued``'s caller holds a sender's place: it sends now, until
        :meth:`take` or :meth:`stop` gives the place up (its wake-up is reset for its
        outcome)."""
        with self._lock:
            if not queued.place:
                return False
            queued.place = False
            queued.woken.clear()
            return True

    def take(self, own: Optional[Queued] = None) -> List[Queued]:
        """The next round trip's writes: the oldest queued and up to
        :data:`MOST_PER_ROUND_TRIP` - 1 more queued with the same sync, in order. Empty when the
        sender stops — nothing is queued, or ``own`` (a sending thread's write) was answered —
        having given up its place."""
        with self._lock:
            if not self._queued or (own is not None and own.done):
                self._give_up_place()
                return []
            sync = self._queued[0].sync
            batch = [queued for queued in self._queued if queued.sync == sync][:MOST_PER_ROUND_TRIP]
            for queued in batch:
                queued.state = State.TAKEN
            self._queued = [queued for queued in self._queued if queued.state is State.QUEUED]
            self._in_round_trips += 1
            return batch

    def pipeline(self, batch: List[Queued]) -> Pipeline:
        """The round trip that carries ``batch`` (from :meth:`take`)."""
        return Pipeline([queued.write for queued in batch], sync=batch[0].sync, seen=self.seen)

    def stop(self) -> None:
        """A sender stops before the queue is empty (no connection, or its round trip was
        lost): its place goes to the oldest queued write's caller."""
        with self._lock:
            self._give_up_place()

    def withdraw(self, queued: Queued) -> bool:
        """Takes ``queued`` out if still queued (its caller leaves: budget out, cancelled, an
        error): ``True`` if so, ``False`` when a sender took it (its outcome comes). A sender's
        place it was handed and did not use goes on."""
        with self._lock:
            withdrawn = queued.state is State.QUEUED
            if withdrawn:
                self._queued.remove(queued)
                queued.state = State.DONE
            if queued.place:
                queued.place = False
                self._give_up_place()
            return withdrawn

    def give_up(self, queued: Queued) -> bool:
        """``queued``'s caller, a sender, got no connection: its write is withdrawn if still
        queued (``True``; see :meth:`withdraw`) and its place goes on."""
        withdrawn = self.withdraw(queued)
        self.stop()
        return withdrawn

    def deliver(self, batch: List[Queued], error: Optional[BaseException] = None) -> None:
        """Tells the callers of ``batch`` (from :meth:`take`) their outcome: their writes'
        replies, or for each a lost reply like ``error`` (which the round trip raised)."""
        with self._lock:
            self._in_round_trips -= 1
            for queued in batch:
                queued.error = None if error is None else lost_reply(error)
                queued.state = State.DONE
                queued.woken.set()

    def _give_up_place(self) -> None:
        """Hands a sender's place to the oldest queued write's caller without one, or frees
        it. Under the lock."""
        waiting = next((queued for queued in self._queued if not queued.place), None)
        if waiting is None:
            self._free += 1
        else:
            waiting.place = True
            waiting.woken.set()


def lost_reply(error: BaseException) -> RedisError:
    """What a caller whose write was in a round trip that raised ``error`` gets: a
    ``TimeoutError`` for a late reply, else a ``ConnectionError`` (the write may have been
    applied; its reply is lost)."""
    if isinstance(error, TimeoutError):
        return TimeoutError(f"no reply in time to the round trip that carried the write: {error}")
    return ConnectionError(f"the round trip that carried the write was lost: {error!r}")
