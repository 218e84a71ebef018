"""The pipeline that syncs writes, without a server: what is sent in which order, what the
replies mean — when a write counts, and why not — and when one more ``WAIT`` follows; and when
a watchdog renews next."""

import time

import pytest
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

import leasehold
from leasehold._protocol import (RETRY_PAUSE, Binding, InSync, Pipeline, Renewals, Seen,
                                 SessionSettings, SessionState, Write)

ACQUIRE = ["LOCK.ACQUIRE", "k", "owner", 10_000]
INSYNC = ["LOCK.INSYNC"]
REPLID = "a" * 40
NONE = "0" * 40

#: No I/O: cheap on every redis-py version tested (scripts/python-tests.sh).
pytestmark = pytest.mark.every_redis_py


def insync(offset=100, acked=100, members=1, required=1, replid=REPLID, replid2=NONE) -> list:
    """A ``LOCK.INSYNC`` reply, as redis-py reads it without ``decode_responses``."""
    return [offset, acked, members, required, replid.encode(), replid2.encode()]


def granted(reply) -> bool:
    return reply is not None and not isinstance(reply, Exception)


def pipeline(seen, sync=leasehold.Sync(), **kwargs) -> Pipeline:
    return Pipeline([Write(ACQUIRE, granted)], sync=sync, seen=seen, **kwargs)


def synced(pipeline, write_reply, before, waited, after, at=None):
    """``pipeline`` given its replies (the write's, ``LOCK.INSYNC``, ``WAIT``, ``LOCK.INSYNC``)."""
    at = time.monotonic() if at is None else at
    pipeline.take([(write_reply, at), (before, at), (waited, at), (after, at)])
    return pipeline


def test_a_grant_sends_insync_wait_insync_behind_it_and_counts_once_every_member_acked():
    seen = Seen()
    before = time.monotonic()
    first = pipeline(seen)
    assert first.commands() == [ACQUIRE, INSYNC, ["WAIT", 0, 1000], INSYNC], "h: none seen yet"
    assert first.within() == 1.0 + 1.0 + 2.0 + 1.0
    synced(first, 1234, insync(offset=100, acked=90, members=2), 0, insync(offset=100, acked=90, members=2))
    write = first.writes[0]
    assert before <= write.started <= time.monotonic(), "the lease counts from when it was sent"
    commands, within = first.again()
    assert commands[0][:2] == ["WAIT", 2] and 900 <= commands[0][2] <= 1000 and commands[1] == INSYNC
    assert 2.9 <= within <= 3.0
    first.take_again([(2, 1.0), (insync(offset=120, acked=110, members=2), 1.0)])
    first.settle()
    assert write.outcome() == 1234 and write.problem is None, "acked 110 covers offset 100"

    assert pipeline(seen).commands()[2] == ["WAIT", 2, 1000], "h: the members last seen"


def test_a_write_counts_only_when_the_members_acked_the_offset_before_the_wait():
    late = synced(pipeline(Seen()), 77, insync(offset=100), 1, insync(offset=130, acked=99))
    assert late.again() is None, "the WAIT counted every member: waiting more would not help"
    late.settle()
    problem = late.writes[0].problem
    assert isinstance(problem, leasehold.NotReplicatedError) and (problem.acked, problem.wanted) == (1, 1)
    assert str(problem) == "not every in-sync replica acknowledged within 1000 ms"
    on_time = synced(pipeline(Seen()), 77, insync(offset=100), 1, insync(offset=130, acked=100))
    on_time.settle()
    assert on_time.writes[0].problem is None


def test_fewer_members_than_required_refuse_the_write_naming_the_setting():
    short = synced(pipeline(Seen()), 77, insync(members=1, required=2), 1,
                   insync(acked=100, members=1, required=2))
    assert short.again() is None, "waiting does not add members"
    short.settle()
    problem = short.writes[0].problem
    assert str(problem) == "the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)"
    assert (problem.acked, problem.wanted) == (1, 2)


def test_a_lone_server_requires_no_replica_and_an_empty_set_counts():
    lone = synced(pipeline(Seen()), 77, insync(members=0, required=0), 0, insync(members=0, required=0))
    lone.settle()
    assert lone.writes[0].problem is None
    dropped = synced(pipeline(Seen()), 77, insync(members=0), 0, insync(members=0))
    dropped.settle()
    assert "lock.min-insync-replicas (1)" in str(dropped.writes[0].problem), "a master that had some"


def test_the_hint_follows_the_set_up_and_down():
    seen = Seen()
    synced(pipeline(seen), 77, insync(members=2), 2, insync(members=2))
    assert seen.hint() == 2
    synced(pipeline(seen), 77, insync(members=2), 1, insync(members=1))
    assert seen.hint() == 1, "a member dropped: the next WAIT waits for one"
    assert pipeline(seen).commands()[2] == ["WAIT", 1, 1000]


def test_one_more_wait_only_with_time_left_for_a_write_applied():
    stale = synced(pipeline(Seen()), 77, insync(members=2), 0, insync(acked=0, members=2),
                   at=time.monotonic() - 1.0)
    assert stale.again() is None, "the sync timeout, counted from the first LOCK.INSYNC, ran out"
    busy = synced(pipeline(Seen()), None, insync(members=2), 0, insync(acked=0, members=2))
    assert busy.again() is None and busy.writes[0].outcome() is None, "nothing to sync"
    refused = synced(pipeline(Seen()), leasehold.LockError("TRYAGAIN"), insync(members=2), 0,
                     insync(acked=0, members=2))
    assert refused.again() is None
    with pytest.raises(leasehold.LockError):
        refused.writes[0].outcome()
    short = synced(pipeline(Seen()), 77, insync(members=2), 1, insync(acked=0, members=2))
    assert short.again()[0][0][:2] == ["WAIT", 2], "WAIT 1 counted fewer than the two members"
    short.take_again([(1, 1.0), (insync(acked=0, members=2), 1.0)])
    short.settle()
    assert "not every in-sync replica acknowledged" in str(short.writes[0].problem)


def test_writes_with_one_sync_share_one_round_trip_and_each_gets_its_own_reply():
    renew = ["LOCK.RENEW", "k3", "owner", 10_000]
    writes = [Write(ACQUIRE, granted), Write(["LOCK.ACQUIRE", "k2", "o", 10_000], granted),
              Write(renew, lambda reply: reply == 1)]
    seen = Seen()
    seen.heard(InSync.of(insync(members=1)))
    batch = Pipeline(writes, sync=leasehold.Sync(), seen=seen)
    assert batch.commands() == [ACQUIRE, writes[1].command, renew, INSYNC, ["WAIT", 1, 1000], INSYNC]
    assert batch.within() == 1.0 + 1.0 + 2.0 + 1.0, "the writes count as one command"
    now = time.monotonic()
    batch.take([(77, now), (None, now), (leasehold.LockError("WRONGTYPE"), now), (insync(), now),
                (1, now), (insync(offset=101), now)])
    batch.settle()
    assert writes[0].outcome() == 77 and writes[0].problem is None
    assert writes[1].outcome() is None, "busy"
    with pytest.raises(leasehold.LockError):
        writes[2].outcome()


def test_the_wait_of_a_round_trip_ends_by_the_earliest_until_of_its_writes():
    soon = time.monotonic() + 0.25
    writes = [Write(ACQUIRE, granted), Write(ACQUIRE, granted, until=soon),
              Write(ACQUIRE, granted, until=soon + 10)]
    wait = Pipeline(writes, sync=leasehold.Sync(), seen=Seen()).commands()[-2]
    assert wait[0] == "WAIT" and 200 <= wait[2] <= 250
    gone = Pipeline([Write(ACQUIRE, granted, until=soon - 5)], sync=leasehold.Sync(), seen=Seen())
    assert gone.commands()[-2] == ["WAIT", 0, 1], "at least a millisecond"


def test_a_wait_in_the_server_has_the_same_tail_and_counts_its_lease_from_the_answer():
    wait = pipeline(Seen(), waiting=True, wait_left=5.0)
    assert wait.commands() == [ACQUIRE, INSYNC, ["WAIT", 0, 1000], INSYNC]
    assert wait.within() == 5.0 + 1.0 + 1.0 + 2.0 + 1.0
    wait.take([(77, 4.0), (insync(members=0, required=0), 4.1), (0, 4.2),
               (insync(members=0, required=0), 4.3)])
    wait.settle()
    assert wait.writes[0].started == 4.0 and wait.writes[0].problem is None
    assert pipeline(Seen(), waiting=True).within() is None, "a wait without a limit"


def test_asking_comes_right_before_the_write_a_fixed_count_asks_nothing_and_off_sends_the_write():
    assert pipeline(Seen(), asking=True).commands() == [["ASKING"], ACQUIRE, INSYNC,
                                                        ["WAIT", 0, 1000], INSYNC]
    fixed = pipeline(Seen(), sync=leasehold.Sync(replicas=2, timeout=0.25))
    assert fixed.commands() == [ACQUIRE, ["WAIT", 2, 250]]
    fixed.take([(77, 1.0), (1, 1.1)])
    assert fixed.again() is None
    fixed.settle()
    assert (fixed.writes[0].problem.acked, fixed.writes[0].problem.wanted) == (1, 2)
    assert pipeline(Seen(), sync=leasehold.SYNC_OFF, waiting=True).commands() == [ACQUIRE]


def test_with_aof_the_master_must_have_fsynced_the_write():
    aof = leasehold.Sync(aof=True)
    unsynced = pipeline(Seen(), sync=aof)
    assert unsynced.commands()[2] == ["WAITAOF", 1, 0, 1000]
    synced(unsynced, 77, insync(), [0, 1], insync()).settle()
    assert str(unsynced.writes[0].problem) == "the master did not fsync its AOF within 1000 ms"
    fsynced = synced(pipeline(Seen(), sync=aof), 77, insync(), [1, 1], insync())
    fsynced.settle()
    assert fsynced.writes[0].problem is None


def test_an_error_reply_to_insync_is_why_the_write_does_not_count():
    replica = leasehold.LockError("ERR LOCK.INSYNC is answered by the master; this server is a replica")
    failed = synced(pipeline(Seen()), 77, replica, 1, replica)
    assert failed.again() is None
    failed.settle()
    assert failed.writes[0].problem is replica


def test_a_master_seen_replaced_counts_no_write():
    seen = Seen()
    synced(pipeline(seen), 77, insync(), 1, insync())
    promoted = insync(replid="b" * 40, replid2=REPLID)
    synced(pipeline(seen), 77, promoted, 1, promoted).settle()
    old = synced(pipeline(seen), 77, insync(), 1, insync(acked=200))
    assert old.again() is None
    old.settle()
    assert "replaced by a failover" in str(old.writes[0].problem), "a split brain's old master"
    new = synced(pipeline(seen), 77, insync(replid="b" * 40, replid2=REPLID), 1,
                 insync(replid="b" * 40, replid2=REPLID))
    new.settle()
    assert new.writes[0].problem is None
    moved = synced(pipeline(seen), 77, insync(replid="b" * 40), 1, insync(replid="c" * 40))
    moved.settle()
    assert "replaced by a failover" in str(moved.writes[0].problem), "another history in between"
    text = InSync.of([1, 1, 0, 0, "c" * 40, NONE])
    assert text.replid == "c" * 40, "decode_responses too"


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

    first = Pipeline([tied(new)], sync=leasehold.SYNC_OFF, seen=Seen(), asking=True)
    first.on(Binding("socket"))
    assert first.commands() == [use, ["ASKING"], named], "USE first, the write names its session"
    first.take([("OK", 1.0), ("OK", 1.0), (7, 1.0)])
    bound = first.binding_after(Binding("socket"), "socket")
    assert bound == Binding("socket", new.id)

    bare = Pipeline([tied(new), tied(old), Write(ACQUIRE, granted)], sync=leasehold.SYNC_OFF,
                    seen=Seen())
    with pytest.raises(ValueError):
        bare.on(bound)  # a write tied to no session: the connection is closed first
    bare = Pipeline([tied(new), tied(old)], sync=leasehold.SYNC_OFF, seen=Seen())
    bare.on(bound)
    assert bare.commands() == [ACQUIRE, [*ACQUIRE, "SESSION", old.id]], \
        "bare on its own session's binding; a replaced session is named, and not bound to"
    bare.take([(7, 1.0), (8, 1.0)])
    assert bare.binding_after(bound, "socket") == bound

    again = Pipeline([tied(new)], sync=leasehold.SYNC_OFF, seen=Seen())
    again.on(Binding("socket", old.id))
    assert again.commands() == [use, named], "bound to a replaced session: bound again"
    gone = ResponseError("no such session")
    again.take([(gone, 1.0), (gone, 1.0)])
    assert again.binding_after(Binding("socket", old.id), "socket") == Binding("socket", old.id)
    assert again.writes[0].reply is gone and again.error is None

    refused = Pipeline([tied(new)], sync=leasehold.Sync(), seen=Seen())
    refused.on(Binding("socket"))
    assert refused.commands()[:2] == [use, named]
    refused.take([(ResponseError("unknown subcommand 'USE'"), 1.0), (7, 1.0), (insync(), 1.0),
                  (0, 1.0), (insync(), 1.0)])
    refused.settle()
    assert refused.writes[0].problem is None, "an error to USE is not the write's"
    after = refused.binding_after(Binding("socket"), "socket")
    assert after == Binding("socket", None, refused=True)
    later = Pipeline([tied(new)], sync=leasehold.SYNC_OFF, seen=Seen())
    later.on(after)
    assert later.commands() == [named], "no more USE on that socket: the writes name it"


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
