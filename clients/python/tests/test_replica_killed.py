"""A replica killed for good, on a master with two: synced grants are refused while it is still in
the master's in-sync set, and granted (on the replica left) once the master drops it; with
``lock.min-insync-replicas 2`` every grant is then refused, naming the setting."""

import time

import pytest
import redis

import leasehold
from conftest import ACKED_LATE, QUICK, fence, group, insync_replicas, stop_all, wait_until

#: A replica silent for 1 s makes itself unpromotable, and the master drops it from the set
#: 0.5 s after that is sure: a few seconds after it died (2.7 s measured).
QUICK_DROP = ("insync-timeout-ms", "1000", "insync-drop-delay-ms", "500")


@pytest.mark.every_redis_py
def test_a_replica_killed_for_good_stops_counting_once_the_master_drops_it(name):
    master, (dead, alive) = group(2, QUICK_DROP)
    try:
        r = redis.Redis(port=master.port)
        made_before = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        assert made_before.acquire(blocking=False)
        made_before.release()
        dead.stop()
        killed = time.monotonic()
        made_after = leasehold.Lock(r, name + ":after", timeout=10, thread_local=False, sync=QUICK)
        refusals = {made_before: [], made_after: []}
        while refusals:
            assert time.monotonic() - killed < 6, f"still refused: {refusals}"
            for lock in list(refusals):
                try:
                    granted = lock.acquire(blocking=False)
                except leasehold.NotReplicatedError as refused:
                    refusals[lock].append(refused.reason)
                    continue
                assert granted and insync_replicas(master) == 1, "granted only once dropped"
                assert fence(alive, lock.name) == lock.fencing_token
                assert refusals.pop(lock)[0] == ACKED_LATE, "refused while the dead one was in the set"
            time.sleep(0.1)
    finally:
        stop_all([master, dead, alive])


def test_fewer_in_sync_replicas_than_required_refuse_every_grant(name):
    master, (dead, alive) = group(2, QUICK_DROP + ("min-insync-replicas", "2"))
    try:
        r = redis.Redis(port=master.port)
        lock = leasehold.Lock(r, name, timeout=10, thread_local=False, sync=QUICK)
        assert lock.acquire(blocking=False)
        lock.release()
        dead.stop()
        wait_until(lambda: insync_replicas(master) == 1)
        with pytest.raises(leasehold.NotReplicatedError) as refused:
            lock.acquire(blocking=False)
        assert refused.value.reason == (
            "the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)")
        assert str(refused.value).startswith("NOREPLICAS ")
        assert r.exists(name) == 0, "never granted, or released by the server"
    finally:
        stop_all([master, dead, alive])
