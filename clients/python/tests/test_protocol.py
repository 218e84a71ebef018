"""The round trip that carries a write, without a server: what is sent in which order, what the
replies mean — when a write counts, and why not; and when a watchdog renews next."""

import time

import pytest
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

import leasehold
from leasehold._protocol import (RETRY_PAUSE, SENDERS, Batch, Batches, Binding, Pipeline, Queued,
                                 Renewals, SessionSettings, SessionState, Write, round_trip,
                                 write_reply)

ACQUIRE = ["LOCK.ACQUIRE", "k", "owner", 10_000, "SYNC"]
UNSYNCED = ["LOCK.ACQUIRE", "k", "owner", 10_000, "NOSYNC"]

#: No I/O: cheap on every redis-py version tested (scripts/python-tests.sh).
pytestmark = pytest.mark.every_redis_py

#: What redis-py makes of the server's refusal of a grant it could not sync.
REFUSED = ResponseError("NOREPLICAS not every in-sync replica acknowledged within 1000 ms; "
                        "the grant was released")


def granted(reply) -> bool:
    return reply is not None and not isinstance(reply, Exception)


def pipeline(sync=leasehold.Sync(), command=ACQUIRE, **kwargs) -> Pipeline:
    return Pipeline(Write(command, granted), sync=sync, **kwargs)


def test_the_in_sync_set_is_the_servers_to_wait_for_one_command_and_its_reply():
    synced = pipeline()
    assert synced.commands() == [ACQUIRE], "no LOCK.INSYNC, no WAIT"
    assert synced.within() == 1.0 + 1.0, "the server's sync timeout (1 s by default) and a margin"
    assert pipeline(leasehold.Sync(timeout=3)).within() == 3.0 + 1.0, "a longer one set"
    assert pipeline(leasehold.Sync(timeout=0.2)).within() == 1.0 + 1.0, "never under 1 s"
    synced.take([(77, time.monotonic())])
    synced.settle()
    assert synced.write.outcome() == 77 and synced.write.problem is None
    busy = pipeline()
    busy.take([(None, time.monotonic())])
    busy.settle()
    assert busy.write.outcome() is None


def test_a_refusal_by_the_server_is_not_replicated_with_its_reason():
    refused = pipeline()
    refused.take([(REFUSED, time.monotonic())])
    refused.settle()
    with pytest.raises(leasehold.NotReplicatedError) as raised:
        refused.write.outcome()
    error = raised.value
    assert error.reason == "not every in-sync replica acknowledged within 1000 ms"
    assert str(error) == str(REFUSED), "the whole text in the message"
    assert (error.acked, error.wanted) == (None, None)
    assert isinstance(error, leasehold.LockError)
    renewal = write_reply(ResponseError(
        "NOREPLICAS the master has 0 in-sync replicas, fewer than lock.min-insync-replicas (1); "
        "the renewal does not count: the lease before it does"))
    assert renewal.reason == "the master has 0 in-sync replicas, fewer than lock.min-insync-replicas (1)"
    assert not refused.write.reply.left_behind, "the server released it"
    demoted = write_reply(ResponseError(
        "NOREPLICAS this server is no longer a master; the grant was not released here: the new "
        "master may have it, release it there"))
    assert demoted.reason == "this server is no longer a master" and demoted.left_behind
    other = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert write_reply(other) is other


def test_a_module_without_synced_writes_is_named():
    for text in ("syntax error", "ERR syntax error"):  # redis-py drops the ERR prefix
        old = write_reply(ResponseError(text))
        assert isinstance(old, leasehold.LockError) and "0.7.0 or later" in str(old)
    answered = pipeline(sync=leasehold.SYNC_OFF, command=UNSYNCED)
    answered.take([(ResponseError("syntax error"), 1.0)])
    with pytest.raises(leasehold.LockError, match="lock module 0.7.0"):
        answered.write.outcome()


def test_a_fixed_count_says_nosync_and_waits_itself_and_off_sends_the_write_alone():
    fixed = pipeline(leasehold.Sync(replicas=2, timeout=0.25), command=UNSYNCED)
    assert fixed.commands() == [UNSYNCED, ["WAIT", 2, 250]]
    assert fixed.within() == 1.0 + 0.25 + 1.0, "the write replies at once; the WAIT takes 0.25 s"
    fixed.take([(77, 1.0), (1, 1.0)])
    fixed.settle()
    assert fixed.write.outcome() == 77, "applied..."
    problem = fixed.write.problem
    assert isinstance(problem, leasehold.NotReplicatedError) and (problem.acked, problem.wanted) == (1, 2)
    enough = pipeline(leasehold.Sync(replicas=2), command=UNSYNCED)
    enough.take([(77, 1.0), (2, 1.0)])
    enough.settle()
    assert enough.write.problem is None
    off = pipeline(leasehold.SYNC_OFF, command=UNSYNCED, waiting=True)
    assert off.commands() == [UNSYNCED]


def test_writes_sent_together_share_one_sync_and_with_syncing_off_none():
    def queued(sync, key):
        return Queued(Write(["LOCK.ACQUIRE", key, "owner", 10_000, sync.option], granted), sync, None)

    synced, _ = round_trip([queued(leasehold.Sync(), "a"), queued(leasehold.Sync(), "b")])
    assert isinstance(synced, Batch)
    synced.on(Binding(None))
    assert [command[0] for command in synced.commands()] == ["LOCK.ACQUIRE"] * 2 + ["LOCK.SYNC"]
    assert all(command[-1] == "NOSYNC" for command in synced.commands()[:2])
    off, _ = round_trip([queued(leasehold.SYNC_OFF, "a"), queued(leasehold.SYNC_OFF, "b")])
    off.on(Binding(None))
    assert off.commands() == [["LOCK.ACQUIRE", key, "owner", 10_000, "NOSYNC"] for key in "ab"]
    off.take([(1, 1.0), (None, 1.0)])
    assert [one.write.outcome() for one in off.queued] == [1, None]
    assert off.refused() == [], "nothing to give back: no sync was asked for"
    alone, _ = round_trip([queued(leasehold.SYNC_OFF, "a")])
    assert alone.commands() == [["LOCK.ACQUIRE", "a", "owner", 10_000, "NOSYNC"]]


def test_a_sender_that_stops_takes_every_write_waiting_and_ends_its_role():
    queue = Batches()
    writes = [Queued(Write(UNSYNCED, granted), leasehold.SYNC_OFF, None) for _ in range(3)]
    started = [queue.push(write) for write in writes]
    assert started == [True] * SENDERS + [False] * (3 - SENDERS)
    assert queue.stop() == writes
    assert queue.take() == [] and queue.push(writes[0]), "a sender's place came free"


def test_the_wait_of_a_fixed_count_ends_by_the_writes_until():
    soon = time.monotonic() + 0.25
    fixed = leasehold.Sync(replicas=1)
    wait = Pipeline(Write(UNSYNCED, granted, until=soon), sync=fixed).commands()[-1]
    assert wait[0] == "WAIT" and 200 <= wait[2] <= 250
    gone = Pipeline(Write(UNSYNCED, granted, until=soon - 5), sync=fixed)
    assert gone.commands()[-1] == ["WAIT", 1, 1], "at least a millisecond"


def test_a_wait_in_the_server_counts_its_lease_from_the_reply():
    wait = pipeline(waiting=True, wait_left=5.0)
    assert wait.commands() == [ACQUIRE]
    assert wait.within() == 5.0 + 1.0 + 1.0, "the wait, the sync the server may hold it for"
    wait.take([(77, 4.0)])
    assert wait.write.started == 4.0, "the server stretched the grant while it held the reply"
    assert pipeline(waiting=True).within() is None, "a wait without a limit"


def test_asking_comes_right_before_the_write():
    assert pipeline(asking=True).commands() == [["ASKING"], ACQUIRE]


def test_with_aof_the_master_must_have_fsynced_the_write():
    aof = pipeline(leasehold.Sync(aof=True))
    assert aof.commands() == [ACQUIRE, ["WAITAOF", 1, 0, 1000]], "the server syncs the set"
    aof.take([(77, 1.0), ([0, 0], 1.0)])
    aof.settle()
    assert "did not fsync its AOF" in str(aof.write.problem)
    fsynced = pipeline(leasehold.Sync(aof=True))
    fsynced.take([(77, 1.0), ([1, 0], 1.0)])
    fsynced.settle()
    assert fsynced.write.problem is None
    fixed = pipeline(leasehold.Sync(replicas=1, aof=True), command=UNSYNCED)
    assert fixed.commands() == [UNSYNCED, ["WAITAOF", 1, 1, 1000]]
    old = pipeline(leasehold.Sync(aof=True))
    unknown = ResponseError("unknown command 'WAITAOF'")
    old.take([(77, 1.0), (unknown, 1.0)])
    old.settle()
    assert old.write.problem is unknown, "a server before Redis 7.2"


def test_a_sync_timeout_under_a_millisecond_is_refused():
    with pytest.raises(leasehold.LockError):
        leasehold.Sync(timeout=0)


def tied(term) -> Write:
    write = Write(ACQUIRE, granted)
    write.tie(term)
    return write


def test_a_connection_is_bound_to_the_current_session_in_the_round_trip_of_its_first_write():
    state = SessionState(SessionSettings())
    old = state.opened("00000000000000aa", 3000, time.monotonic())
    new = state.opened("00000000000000bb", 3000, time.monotonic())
    use = ["LOCK.SESSION", "USE", new.id]
    named = [*ACQUIRE, "SESSION", new.id]

    first = Pipeline(tied(new), sync=leasehold.Sync(), asking=True)
    first.on(Binding("socket"))
    assert first.commands() == [use, ["ASKING"], named], "USE first, the write names its session"
    assert first.within() == 1.0 + 1.0 + 1.0 + 1.0, "a margin for USE and ASKING too"
    first.take([("OK", 1.0), ("OK", 1.0), (7, 1.0)])
    bound = first.binding_after(Binding("socket"), "socket")
    assert bound == Binding("socket", new.id)

    with pytest.raises(ValueError):
        # A write tied to no session: the connection is closed first.
        Pipeline(Write(ACQUIRE, granted), sync=leasehold.Sync()).on(bound)
    bare = Pipeline(tied(new), sync=leasehold.Sync())
    bare.on(bound)
    assert bare.commands() == [ACQUIRE], "bare on its own session's binding"
    replaced = Pipeline(tied(old), sync=leasehold.Sync())
    replaced.on(bound)
    assert replaced.commands() == [[*ACQUIRE, "SESSION", old.id]], \
        "a replaced session is named, and not bound to"
    replaced.take([(8, 1.0)])
    assert replaced.binding_after(bound, "socket") == bound

    again = Pipeline(tied(new), sync=leasehold.SYNC_OFF)
    again.on(Binding("socket", old.id))
    assert again.commands() == [use, named], "bound to a replaced session: bound again"
    gone = ResponseError("no such session")
    again.take([(gone, 1.0), (gone, 1.0)])
    assert again.binding_after(Binding("socket", old.id), "socket") == Binding("socket", old.id)
    assert again.write.reply is gone and again.error is None

    refused = Pipeline(tied(new), sync=leasehold.Sync(replicas=1))
    refused.on(Binding("socket"))
    assert refused.commands()[:2] == [use, named]
    refused.take([(ResponseError("unknown subcommand 'USE'"), 1.0), (7, 1.0), (1, 1.0)])
    refused.settle()
    assert refused.write.problem is None, "an error to USE is not the write's"
    after = refused.binding_after(Binding("socket"), "socket")
    assert after == Binding("socket", None, refused=True)
    later = Pipeline(tied(new), sync=leasehold.SYNC_OFF)
    later.on(after)
    assert later.commands() == [named], "no more USE on that socket: the write names it"


def test_a_watchdog_renews_every_third_of_the_lease_and_retries_a_failed_renewal_soon():
    renewals = Renewals(9_000)
    assert renewals.due == pytest.approx(time.monotonic() + 3, abs=0.1)
    renewals.counted(100.0)
    assert renewals.due == 103.0, "a third of the lease after the renewal that counted began"
    for error in (leasehold.NotReplicatedError(0, 1), TimeoutError("no reply in time")):
        renewals.failed(error)
        assert renewals.due == pytest.approx(time.monotonic() + RETRY_PAUSE, abs=0.1)
    dead = ConnectionError("Connection closed by server.")
    renewals.failed(dead)
    assert renewals.due == pytest.approx(time.monotonic(), abs=0.1), "at once on a fresh one"
    renewals.failed(dead)
    assert renewals.due == pytest.approx(time.monotonic() + RETRY_PAUSE, abs=0.1), \
        "dead again: the server itself may be down"
    renewals.failed(leasehold.NotReplicatedError(0, 1))
    renewals.failed(dead)
    assert renewals.due == pytest.approx(time.monotonic(), abs=0.1)
    renewals.counted(200.0)
    assert renewals.due == 203.0
    short = Renewals(1_000)
    short.failed(leasehold.NotReplicatedError(0, 1))
    assert short.due == pytest.approx(time.monotonic() + 0.1, abs=0.05), "a tenth of the lease"
