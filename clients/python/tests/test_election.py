"""Elections (``leasehold.Election``, ``leasehold.asyncio.Election``) on a real server: a
campaign, who leads, a proclaimed value and a resignation; a second candidate waiting in line
and leading at once after the resignation with a larger epoch; a stale epoch's proclaim and
resign refused, changing nothing; an observer seeing nobody, a leader, its new value, nobody,
the next leader, in that order; a leader process killed with ``kill -9`` replaced within its
session's grace, an observer told of the vacancy first; a leader whose connections blip keeping
its term; and the asyncio twin of the main flows."""

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional, Tuple

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import aclose, info, wait_until, waiters

#: The session grace of the tests that kill a leader, in seconds (as tests/test_sessions.py).
GRACE = 0.5


def sessions_client(port: int, grace: float = GRACE, **kwargs) -> redis.Redis:
    client = redis.Redis(port=port, **kwargs)
    leasehold.configure_sessions(client, grace=grace)
    return client


class Campaigner:
    """A campaign in a thread of its own (waiting up to 10 s): its leadership, and when it
    began to lead (``time.monotonic()``)."""

    def __init__(self, election: leasehold.Election, value) -> None:
        self.election = election
        self.leadership: Optional[leasehold.Leadership] = None
        self.led_at: Optional[float] = None
        self.thread = threading.Thread(target=self._run, args=(value,), daemon=True)
        self.thread.start()

    def _run(self, value) -> None:
        self.leadership = self.election.campaign(value, timeout=10)
        if self.leadership is not None:
            self.led_at = time.monotonic()

    def join(self) -> leasehold.Leadership:
        """The leadership; fails the test unless it came within 15 s."""
        self.thread.join(15)
        assert self.leadership is not None, "leads"
        return self.leadership


class Observer:
    """``election.observe(timeout)`` in a thread of its own: every state, with when it came."""

    def __init__(self, election: leasehold.Election, timeout: float = 10) -> None:
        self.states: "queue.Queue[Tuple[float, leasehold.ElectionState]]" = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(election, timeout), daemon=True)
        self.thread.start()

    def _run(self, election: leasehold.Election, timeout: float) -> None:
        try:
            for state in election.observe(timeout):
                self.states.put((time.monotonic(), state))
        except redis.ConnectionError:
            pass  # the test's own server stopped at its end

    def next(self, timeout: float = 5) -> Tuple[float, leasehold.ElectionState]:
        """The next state seen, with when."""
        return self.states.get(timeout=timeout)


def seen(state: leasehold.ElectionState) -> Tuple[Optional[str], int, bytes]:
    return state.leader, state.epoch, state.value


@pytest.mark.every_redis_py
def test_campaign_leader_proclaim_resign(server, admin, name):
    r = redis.Redis(port=server.port)
    election = leasehold.Election(r, name, "host-a", ttl=15)
    assert election.leader() == leasehold.ElectionState(None, 0, b"", None)
    leadership = election.campaign(b"10.0.0.1:8080")
    assert isinstance(leadership.epoch, int) and leadership.epoch > 0
    assert (leadership.candidate, leadership.value) == ("host-a", b"10.0.0.1:8080")
    assert leadership.leading and not leadership.lost.is_set()
    state = election.leader()
    assert seen(state) == ("host-a", leadership.epoch, b"10.0.0.1:8080")
    assert 14 < state.ttl <= 15 and not state.vacant
    held = info(admin, name)
    assert held["session"] is not None, "tied to the client's session"
    assert int(held["token"]) == leadership.epoch, "the epoch is the fencing token"
    # No later than the session's deadline: the server's grace (3 s) after the last heartbeat.
    assert 2 < leadership.lease_end - time.monotonic() <= 3
    assert leadership.proclaim("10.0.0.1:9090") is True
    assert leadership.value == "10.0.0.1:9090"
    assert seen(election.leader()) == ("host-a", leadership.epoch, b"10.0.0.1:9090")
    with pytest.raises(leasehold.LockError, match="already leads"):
        election.campaign(b"again", timeout=0)
    assert leadership.resign() is None
    assert election.leader().vacant and admin.exists(name) == 0
    assert not leadership.lost.is_set() and not leadership.leading
    with pytest.raises(leasehold.LockError):
        leadership.proclaim(b"after")
    again = election.campaign(b"back", timeout=0)
    assert again.epoch > leadership.epoch, "a new term, a larger epoch"
    with again:
        assert seen(election.leader()) == ("host-a", again.epoch, b"back")
    assert election.leader().vacant, "resigned on leaving the block"
    leasehold.close_pools(r)


def test_the_watchdog_renews_the_term_and_keeps_its_value(server, admin, name):
    r = redis.Redis(port=server.port)
    election = leasehold.Election(r, name, ttl=0.3)
    assert len(election.candidate) == 32, "a random candidate id"
    leadership = election.campaign(b"v")
    time.sleep(1.0)  # three leases
    state = election.leader()
    assert seen(state) == (election.candidate, leadership.epoch, b"v")
    assert not leadership.lost.is_set()
    leadership.resign()
    leasehold.close_pools(r)


@pytest.mark.every_redis_py
def test_a_second_candidate_waits_and_leads_at_once_after_the_resignation(server, admin, name):
    first = leasehold.Election(redis.Redis(port=server.port), name, "host-a", ttl=30)
    leadership = first.campaign(b"a")
    second = leasehold.Election(redis.Redis(port=server.port), name, "host-b", ttl=30)
    assert second.campaign(b"b", timeout=0) is None, "another leads"
    started = time.monotonic()
    assert second.campaign(b"b", timeout=0.3) is None, "still, at the timeout"
    assert 0.25 < time.monotonic() - started < 1.5
    waiting = Campaigner(second, b"b")
    wait_until(lambda: waiters(admin, name) == 1)
    assert seen(first.leader()) == ("host-a", leadership.epoch, b"a")
    leadership.resign()
    resigned_at = time.monotonic()
    successor = waiting.join()
    assert waiting.led_at - resigned_at < 0.5, "at once"
    assert successor.epoch > leadership.epoch
    assert seen(second.leader()) == ("host-b", successor.epoch, b"b")
    successor.resign()
    for election in (first, second):
        leasehold.close_pools(election.redis)


def test_a_stale_epoch_proclaims_and_resigns_nothing(server, admin, name):
    r = redis.Redis(port=server.port)
    old = leasehold.Election(r, name, "host-a", ttl=30).campaign(b"a")
    # The term ends unbeknownst to its leader (as one that paused past its lease).
    assert admin.execute_command("LOCK.RESIGN", name, old.epoch) == 1
    new = leasehold.Election(r, name, "host-b", ttl=30).campaign(b"b", timeout=0)
    assert new.epoch > old.epoch
    with pytest.raises(leasehold.LockNotOwnedError, match="no longer leads"):
        old.proclaim(b"overwritten?")
    assert old.lost.is_set() and not old.leading, "the leader now knows"
    with pytest.raises(leasehold.LockNotOwnedError, match="no longer leads"):
        old.resign()
    state = new.election.leader()
    assert seen(state) == ("host-b", new.epoch, b"b"), "nothing changed"
    assert not new.lost.is_set()
    # The same candidate name campaigning again does not make an old epoch valid.
    again = leasehold.Election(r, name + ":2", "host-a", ttl=30)
    first = again.campaign(b"1")
    assert admin.execute_command("LOCK.RESIGN", name + ":2", first.epoch) == 1
    second = leasehold.Election(r, name + ":2", "host-a", ttl=30).campaign(b"2")
    with pytest.raises(leasehold.LockNotOwnedError):
        first.resign()
    assert seen(again.leader()) == ("host-a", second.epoch, b"2")
    for leadership in (new, second):
        leadership.resign()
    leasehold.close_pools(r)


@pytest.mark.every_redis_py
def test_an_observer_sees_every_change_in_order_vacancies_included(server, admin, name):
    r = redis.Redis(port=server.port)
    a = leasehold.Election(r, name, "host-a", ttl=30)
    b = leasehold.Election(redis.Redis(port=server.port), name, "host-b", ttl=30)
    observer = Observer(leasehold.Election(redis.Redis(port=server.port), name))
    _, first = observer.next()
    assert first.vacant and seen(first) == (None, 0, b"") and first.ttl is None
    leadership = a.campaign(b"a1")
    _, state = observer.next()
    assert seen(state) == ("host-a", leadership.epoch, b"a1") and 29 < state.ttl <= 30
    leadership.proclaim(b"a2")
    _, state = observer.next()
    assert seen(state) == ("host-a", leadership.epoch, b"a2")
    leadership.resign()
    _, state = observer.next()
    assert state.vacant
    waiting = Campaigner(b, b"b1")
    _, state = observer.next()
    successor = waiting.join()
    assert seen(state) == ("host-b", successor.epoch, b"b1")
    # Resigned with a candidate waiting: the hand-over is one step, the vacancy still comes first.
    waiting = Campaigner(a, b"a3")
    wait_until(lambda: waiters(admin, name) == 1)
    successor.resign()
    _, vacancy = observer.next()
    _, state = observer.next()
    assert vacancy.vacant
    third = waiting.join()
    assert seen(state) == ("host-a", third.epoch, b"a3") and third.epoch > successor.epoch
    third.resign()
    _, state = observer.next()
    assert state.vacant
    with pytest.raises(queue.Empty):
        observer.next(timeout=0.3)
    for client in (r, b.redis):
        leasehold.close_pools(client)


def test_an_observer_ends_after_its_timeout_without_a_change(server, name):
    election = leasehold.Election(redis.Redis(port=server.port), name)
    started = time.monotonic()
    states = list(election.observe(timeout=0.3))
    assert [state.vacant for state in states] == [True]
    assert 0.25 < time.monotonic() - started < 1.5


@pytest.mark.every_redis_py
def test_an_observer_waits_longer_than_the_socket_timeout(server, name):
    short = redis.Redis(port=server.port, socket_timeout=0.3)
    states = leasehold.Election(short, name).observe(timeout=5)
    assert next(states).vacant
    leader = leasehold.Election(redis.Redis(port=server.port), name, "host-a", ttl=30)
    won: List[leasehold.Leadership] = []
    timer = threading.Timer(0.8, lambda: won.append(leader.campaign(b"late")))
    timer.start()
    started = time.monotonic()
    state = next(states)
    assert state.leader == "host-a" and 0.7 < time.monotonic() - started < 2
    states.close()
    timer.join()
    won[0].resign()
    leasehold.close_pools(leader.redis)


LEADER = """
import sys, time
import redis, leasehold
r = redis.Redis(port=int(sys.argv[1]))
leasehold.configure_sessions(r, grace=float(sys.argv[3]))
leadership = leasehold.Election(r, sys.argv[2], "crashing", ttl=30).campaign(b"10.0.0.1:8080")
print(leadership.epoch, flush=True)
time.sleep(60)
"""


@pytest.mark.own_server
@pytest.mark.every_redis_py
def test_a_killed_leader_is_replaced_within_the_grace_and_observers_see_the_vacancy_first(
        server, admin, name):
    process = subprocess.Popen([sys.executable, "-c", LEADER, str(server.port), name, str(GRACE)],
                               stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        epoch = int(process.stdout.readline())
        observer = Observer(leasehold.Election(redis.Redis(port=server.port), name))
        _, state = observer.next()
        assert seen(state) == ("crashing", epoch, b"10.0.0.1:8080")
        assert info(admin, name)["session"] is not None
        candidate = leasehold.Election(sessions_client(server.port), name, "standby", ttl=30)
        waiting = Campaigner(candidate, b"10.0.0.2:8080")
        wait_until(lambda: waiters(admin, name) == 1)
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        successor = waiting.join()
        vacancy_at, vacancy = observer.next()
        led_seen_at, state = observer.next()
    finally:
        process.kill()
        process.wait()
    led_after = waiting.led_at - killed_at
    # The lease was 30 s: the session's end (the grace after its connection closed) ended the term.
    assert GRACE - 0.05 < led_after < GRACE + 0.2, f"led {led_after:.3f} s after the kill"
    assert successor.epoch > epoch
    assert vacancy.vacant and vacancy_at - killed_at > GRACE - 0.05, "the vacancy first"
    assert seen(state) == ("standby", successor.epoch, b"10.0.0.2:8080")
    assert led_seen_at >= vacancy_at
    successor.resign()
    leasehold.close_pools(candidate.redis)


@pytest.mark.own_server
@pytest.mark.every_redis_py
def test_a_leader_whose_connections_blip_keeps_its_term(server, admin, name):
    # The server's grace (3 s): every client connection closed at once, as a flapping link.
    leader = leasehold.Election(redis.Redis(port=server.port), name, "host-a", ttl=3)
    leadership = leader.campaign(b"a")
    before = leader.leader()
    standby = leasehold.Election(redis.Redis(port=server.port), name, "host-b", ttl=30)
    waiting = Campaigner(standby, b"b")
    wait_until(lambda: waiters(admin, name) == 1)
    killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal")
    assert killed >= 4, f"{killed} connections closed"
    until = time.monotonic() + 3.5
    while time.monotonic() < until:
        assert not leadership.lost.is_set(), "the leader was told it lost"
        assert waiting.thread.is_alive(), "the standby stopped waiting"
        state = leader.leader()
        assert seen(state) == seen(before)
        time.sleep(0.05)
    assert leadership.lease_end > time.monotonic(), "renewed since"
    leadership.resign()
    successor = waiting.join()
    assert successor.epoch > leadership.epoch
    successor.resign()
    for election in (leader, standby):
        leasehold.close_pools(election.redis)


def test_the_leader_learns_first_when_its_session_is_closed(server, admin, name):
    client = sessions_client(server.port)
    leadership = leasehold.Election(client, name, ttl=30).campaign(b"v")
    session = info(admin, name)["session"]
    assert admin.execute_command("LOCK.SESSION", "CLOSE", session) == 1
    wait_until(leadership.lost.is_set, timeout=GRACE * 2)
    assert not leadership.leading
    with pytest.raises(leasehold.LockNotOwnedError):
        leadership.resign()
    leasehold.close_pools(client)


@pytest.mark.parametrize("protocol", [2, 3])
def test_replies_with_either_protocol_and_decoded_responses(server, name, protocol):
    pool = redis.ConnectionPool(port=server.port, protocol=protocol, decode_responses=True)
    election = leasehold.Election(pool, name, "host-a", ttl=30)
    assert election.leader() == leasehold.ElectionState(None, 0, "", None)
    states = election.observe(timeout=2)
    assert next(states).vacant
    leadership = election.campaign("10.0.0.1:8080")
    state = next(states)
    assert seen(state) == ("host-a", leadership.epoch, "10.0.0.1:8080")
    assert seen(election.leader()) == ("host-a", leadership.epoch, "10.0.0.1:8080")
    leadership.resign()
    assert next(states).vacant
    states.close()
    leasehold.close_pools(election.redis)


async def next_state(states, timeout: float = 5) -> leasehold.ElectionState:
    return await asyncio.wait_for(states.__anext__(), timeout)


@pytest.mark.every_redis_py
async def test_asyncio_campaign_wait_observe_proclaim_resign(server, admin, name):
    a = leasehold.asyncio.Election(redis.asyncio.Redis(port=server.port), name, "host-a", ttl=30)
    b = leasehold.asyncio.Election(redis.asyncio.Redis(port=server.port), name, "host-b", ttl=30)
    watcher = leasehold.asyncio.Election(redis.asyncio.Redis(port=server.port), name)
    states = watcher.observe(timeout=5)
    assert (await next_state(states)).vacant
    leadership = await a.campaign(b"a1")
    assert isinstance(leadership.lost, asyncio.Event) and not leadership.lost.is_set()
    assert seen(await next_state(states)) == ("host-a", leadership.epoch, b"a1")
    assert seen(await b.leader()) == ("host-a", leadership.epoch, b"a1")
    assert info(admin, name)["session"] is not None
    assert await leadership.proclaim(b"a2") is True
    assert seen(await next_state(states)) == ("host-a", leadership.epoch, b"a2")
    assert await b.campaign(b"b1", timeout=0) is None
    waiting = asyncio.ensure_future(b.campaign(b"b1", timeout=10))
    while waiters(admin, name) != 1:
        await asyncio.sleep(0.01)
    await leadership.resign()
    assert (await next_state(states)).vacant, "the vacancy first"
    successor = await asyncio.wait_for(waiting, 1)
    assert successor.epoch > leadership.epoch
    assert seen(await next_state(states)) == ("host-b", successor.epoch, b"b1")
    with pytest.raises(leasehold.LockError, match="resigned"):
        await leadership.proclaim(b"after")
    async with successor:
        pass
    assert (await next_state(states)).vacant, "resigned on leaving the block"
    assert (await b.leader()).vacant
    await states.aclose()
    for election in (a, b, watcher):
        await aclose(election.redis)


async def test_asyncio_the_watchdog_renews_and_a_closed_session_is_lost(server, admin, name):
    client = redis.asyncio.Redis(port=server.port)
    leasehold.asyncio.configure_sessions(client, grace=GRACE)
    election = leasehold.asyncio.Election(client, name, ttl=0.3)
    leadership = await election.campaign(b"v")
    await asyncio.sleep(1.0)
    assert seen(await election.leader()) == (election.candidate, leadership.epoch, b"v")
    assert not leadership.lost.is_set()
    with pytest.raises(leasehold.LockError, match="already leads"):
        await election.campaign(b"again", timeout=0)
    session = info(admin, name)["session"]
    assert admin.execute_command("LOCK.SESSION", "CLOSE", session) == 1
    await asyncio.wait_for(leadership.lost.wait(), GRACE * 2)
    with pytest.raises(leasehold.LockNotOwnedError, match="no longer leads"):
        await leadership.proclaim(b"stale")
    again = await election.campaign(b"w", timeout=0)
    assert again.epoch > leadership.epoch, "lost: a new campaign may begin"
    await again.resign()
    await aclose(client)


def test_a_leader_cut_off_longer_than_the_grace_learns_it_lost_before_the_next_leads(
        server, cutting, admin, name):
    leader = leasehold.Election(sessions_client(cutting.port), name, ttl=30).campaign(b"a")
    assert leader is not None
    lost_at: List[float] = []
    watcher = threading.Thread(
        target=lambda: leader.lost.wait(10) and lost_at.append(time.monotonic()))
    watcher.start()
    waiting = Campaigner(leasehold.Election(redis.Redis(port=server.port), name, ttl=30), b"b")
    wait_until(lambda: waiters(admin, name) == 1)
    cutting.cut_all()
    cut_at = time.monotonic()
    successor = waiting.join()
    watcher.join()
    assert lost_at, "the leader was told"
    assert lost_at[0] < waiting.led_at, "the leader learns first"
    assert GRACE - 0.05 < waiting.led_at - cut_at < GRACE + 0.1
    assert successor.epoch > leader.epoch
    cutting.restore()
    successor.resign()
