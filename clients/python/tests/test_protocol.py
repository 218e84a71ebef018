"""The pipeline that syncs a write and the replica count it learns, without a server: what is
sent in which order, what the replies mean, and when a second ``WAIT`` follows."""

import pytest

import leasehold
from leasehold._protocol import Learned, Pipeline

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
    return Pipeline(ACQUIRE, sync=sync, learned=learned, applied=granted,
                    waiting=kwargs.pop("waiting", False), **kwargs)


def test_a_first_grant_asks_the_count_and_waits_for_it_on_the_same_connection():
    learned = Learned()
    first = pipeline(learned)
    assert first.commands() == [["INFO", "replication"], ACQUIRE], "no WAIT 0"
    first.take(1.0, [(info(2), 1.1), (1234, 1.2)])
    assert first.wanted == 2 and first.started == 1.0
    assert first.again() == (["WAIT", 2, 1000], 2.0)
    first.take_again(1)
    assert first.outcome() == 1234
    assert isinstance(first.not_synced(), leasehold.NotReplicatedError)

    known = pipeline(learned)
    assert known.commands() == [["INFO", "replication"], ACQUIRE, ["WAIT", 2, 1000]]
    known.take(2.0, [(info(2), 2.1), (1235, 2.2), (2, 2.3)])
    assert known.again() is None and known.not_synced() is None


def test_a_wait_sends_the_count_and_wait_behind_its_grant_and_counts_its_lease_from_the_answer():
    learned = Learned()
    learned.heard(info(1))
    wait = pipeline(learned, waiting=True, wait_left=5.0)
    assert wait.commands() == [ACQUIRE, ["INFO", "replication"], ["WAIT", 1, 1000]]
    assert wait.within() == 5.0 + 1.0 + 1.0 + 1.0 + 1.0
    wait.take(1.0, [(77, 4.0), (info(1), 4.1), (1, 4.2)])
    assert wait.started == 4.0 and wait.not_synced() is None
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
    busy.take(1.0, [(info(1), 1.1), (None, 1.2)])
    assert busy.outcome() is None and busy.again() is None
    refused = pipeline(Learned())
    refused.take(1.0, [(info(1), 1.1), (leasehold.LockError("TRYAGAIN"), 1.2)])
    with pytest.raises(leasehold.LockError):
        refused.outcome()


def test_the_count_is_never_lowered_for_one_master_and_a_new_master_starts_one_below_the_most():
    learned = Learned()
    assert learned.heard(info(2)) == 2
    assert learned.heard(info(0)) == 2, "the same master lost a replica: still 2"
    assert learned.heard(info(0, replid="b" * 40)) == 1, "a new master: one fewer than the most"
    assert learned.heard(info(0, replid="c" * 40, role="slave")) == 1
    assert learned.heard("role:master\r\nmaster_replid:" + "c" * 40 + "\r\n") == 1, "text too"


def test_a_sync_timeout_under_a_millisecond_is_refused():
    with pytest.raises(leasehold.LockError):
        leasehold.Sync(timeout=0)
