"""The pipeline that syncs writes and the replica count it learns, without a server: what is
sent in which order, what the replies mean, and when a second ``WAIT`` follows."""

import time

import pytest

import leasehold
from leasehold._protocol import Learned, Pipeline, Write

ACQUIRE = ["LOCK.ACQUIRE", "k", "owner", 10_000]


def info(online: int, replid: str = "a" * 40, role: str = "master") -> bytes:
    replicas = "".join(f"slave{n}:ip=127.0.0.1,port={7000 + n},state=online,offset=1,lag=0\r\n"
                       for n in range(online))
    lagging = "slave9:ip=127.0.0.1,port=7009,state=wait_bgsave,offset=0,lag=0\r\n"
    return (f"# Replication\r\nrole:{role}\r\nconnected_slaves:{online + 1}\r\n{replicas}{lagging}"
            f"master_failover_state:no-failover\r\nmaster_replid:{replid}\r\n"
            f"master_replid2:{'0' * 40}\r\n").encode()


def granted(reply) -> bool:
    return reply is not None and not isinstance(reply, Exception)


def pipeline(learned, sync=leasehold.Sync(), **kwargs) -> Pipeline:
    return Pipeline([Write(ACQUIRE, granted)], sync=sync, learned=learned, **kwargs)


def test_a_first_grant_asks_the_count_and_waits_for_it_on_the_same_connection():
    learned = Learned()
    before = time.monotonic()
    first = pipeline(learned)
    assert first.commands() == [["INFO", "replication"], ACQUIRE], "no WAIT 0"
    first.take([(info(2), 1.1), (1234, 1.2)])
    write = first.writes[0]
    assert first.wanted == 2 and before <= write.started <= time.monotonic(), "from when sent"
    assert first.again() == (["WAIT", 2, 1000], 2.0)
    first.take_again(1)
    first.settle()
    assert write.outcome() == 1234
    assert isinstance(write.problem, leasehold.NotReplicatedError)

    known = pipeline(learned)
    assert known.commands() == [["INFO", "replication"], ACQUIRE, ["WAIT", 2, 1000]]
    known.take([(info(2), 2.1), (1235, 2.2), (2, 2.3)])
    known.settle()
    assert known.again() is None and known.writes[0].problem is None


def test_writes_with_one_sync_share_one_info_and_one_wait_and_each_gets_its_own_reply():
    learned = Learned()
    learned.heard(info(1))
    renew = ["LOCK.RENEW", "k3", "owner", 10_000]
    writes = [Write(ACQUIRE, granted), Write(["LOCK.ACQUIRE", "k2", "o", 10_000], granted),
              Write(renew, lambda reply: reply == 1)]
    batch = Pipeline(writes, sync=leasehold.Sync(), learned=learned)
    assert batch.commands() == [["INFO", "replication"], ACQUIRE, writes[1].command, renew,
                                ["WAIT", 1, 1000]]
    assert batch.within() == 1.0 + 1.0 + 2.0, "the writes count as one command"
    batch.take([(info(2), 1.1), (77, 1.2), (None, 1.3), (leasehold.LockError("WRONGTYPE"), 1.4),
                (1, 1.5)])
    assert batch.again() == (["WAIT", 2, 1000], 2.0), "a write was applied: wait for the new one"
    batch.take_again(2)
    batch.settle()
    assert writes[0].outcome() == 77 and writes[0].problem is None
    assert writes[1].outcome() is None, "busy"
    with pytest.raises(leasehold.LockError):
        writes[2].outcome()
    busy = Pipeline([Write(ACQUIRE, granted)], sync=leasehold.Sync(), learned=learned)
    busy.take([(info(3), 1.1), (None, 1.2), (2, 1.3)])
    assert busy.again() is None, "nothing applied: no second WAIT"


def test_the_wait_of_a_round_trip_ends_by_the_earliest_until_of_its_writes():
    soon = time.monotonic() + 0.25
    writes = [Write(ACQUIRE, granted), Write(ACQUIRE, granted, until=soon),
              Write(ACQUIRE, granted, until=soon + 10)]
    learned = Learned()
    learned.heard(info(1))
    command = Pipeline(writes, sync=leasehold.Sync(), learned=learned).commands()[-1]
    assert command[0] == "WAIT" and 200 <= command[2] <= 250
    gone = Pipeline([Write(ACQUIRE, granted, until=soon - 5)], sync=leasehold.Sync(), learned=learned)
    assert gone.commands()[-1] == ["WAIT", 1, 1], "at least a millisecond"


def test_a_wait_sends_the_count_and_wait_behind_its_grant_and_counts_its_lease_from_the_answer():
    learned = Learned()
    learned.heard(info(1))
    wait = pipeline(learned, waiting=True, wait_left=5.0)
    assert wait.commands() == [ACQUIRE, ["INFO", "replication"], ["WAIT", 1, 1000]]
    assert wait.within() == 5.0 + 1.0 + 1.0 + 1.0 + 1.0
    wait.take([(77, 4.0), (info(1), 4.1), (1, 4.2)])
    wait.settle()
    assert wait.writes[0].started == 4.0 and wait.writes[0].problem is None
    assert pipeline(learned, waiting=True).within() is None, "a wait without a limit"


def test_asking_comes_right_before_the_write_and_a_fixed_count_asks_nothing():
    learned = Learned()
    asked = pipeline(learned, asking=True)
    assert asked.commands() == [["INFO", "replication"], ["ASKING"], ACQUIRE]
    fixed = pipeline(learned, sync=leasehold.Sync(replicas=1, timeout=0.25, aof=True))
    assert fixed.commands() == [ACQUIRE, ["WAITAOF", 1, 1, 250]]
    assert pipeline(learned, sync=leasehold.SYNC_OFF, waiting=True).commands() == [ACQUIRE]


def test_a_busy_lock_or_an_error_is_not_waited_for_again():
    busy = pipeline(Learned())
    busy.take([(info(1), 1.1), (None, 1.2)])
    assert busy.writes[0].outcome() is None and busy.again() is None
    refused = pipeline(Learned())
    refused.take([(info(1), 1.1), (leasehold.LockError("TRYAGAIN"), 1.2)])
    with pytest.raises(leasehold.LockError):
        refused.writes[0].outcome()


def test_the_count_is_the_most_any_master_had_and_never_lowered():
    learned = Learned()
    assert learned.heard(info(2)) == 2
    assert learned.heard(info(0)) == 2, "the same master lost a replica: still 2"
    assert learned.heard(info(1, replid="b" * 40)) == 2, "a new master: as many as the most"
    assert learned.heard(info(0, replid="c" * 40, role="slave")) == 2
    assert learned.heard("role:master\r\nmaster_replid:" + "c" * 40 + "\r\n") == 2, "text too"


def test_a_master_seen_replaced_counts_no_write():
    learned = Learned()
    assert learned.heard(info(2)) == 2
    promoted = info(1, replid="b" * 40).replace(b"master_replid2:" + b"0" * 40, b"master_replid2:" + b"a" * 40)
    assert learned.heard(promoted) == 2
    assert learned.heard(info(1)) is None, "the old master, with a replica that has not moved yet"
    replaced = pipeline(learned)
    replaced.take([(info(1), 1.1), (1234, 1.2), (1, 1.3)])
    replaced.settle()
    assert replaced.again() is None
    assert isinstance(replaced.writes[0].problem, leasehold.NotReplicatedError)


def test_a_sync_timeout_under_a_millisecond_is_refused():
    with pytest.raises(leasehold.LockError):
        leasehold.Sync(timeout=0)
