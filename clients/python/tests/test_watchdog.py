"""The watchdog's retries, sync and asyncio together, on a master with two replicas one of which
dies for good just before a renewal is due: renewals are refused (not counted — the dead
replica is still in the master's in-sync set) until the master drops it, and the watchdog tries
again soon after each refusal (the sync timeout, then half a second) until one counts, rather
than a third of the lease later: neither holder is told lost, and each holds its lock with the
same fencing token two leases on."""

import asyncio
import time

import pytest
import redis
import redis.asyncio

import leasehold
import leasehold.asyncio
from conftest import QUICK, aclose, group, holding, insync_replicas, stop_all

#: Two 9 s leases: started first (conftest.py).
pytestmark = pytest.mark.long

#: The holders' lease, in seconds: renewed every 3 s, and counted 8.9 s from the grant.
LEASE = 9

#: When the replica dies, in seconds after the grants: just before the first renewal is due.
KILL_AT = LEASE / 3 - 0.2

#: The master drops a dead replica from its in-sync set 4 to 5 s after it died here (the drop
#: delay plus 1.2 to 2.1 s, measured): 6.8 to 7.7 s after the grants — after the try a third
#: of the lease after the refused one (6 s, ending 0.2 s later) that a watchdog retrying only
#: every third of the lease would have had last, and more than a second before the lease
#: counted from the grant ends (8.9 s), which tries every 0.7 s (0.2 s of sync timeout and a
#: pause of 0.5 s) reach.
DROP_AFTER_4_TO_5_S = ("insync-timeout-ms", "1000", "insync-drop-delay-ms", "2800")


async def test_the_watchdog_retries_a_refused_renewal_until_the_master_drops_the_dead_replica(name):
    master, (dead, alive) = group(2, DROP_AFTER_4_TO_5_S)
    r, ar = redis.Redis(port=master.port), redis.asyncio.Redis(port=master.port)
    admin = redis.Redis(port=master.port)
    try:
        granted = time.monotonic()
        holder = leasehold.Lock(r, name, timeout=LEASE, watchdog=True, sync=QUICK)
        assert holder.acquire(blocking=False)
        aholder = leasehold.asyncio.Lock(ar, name + ":asyncio", timeout=LEASE, watchdog=True,
                                         sync=QUICK)
        assert await aholder.acquire(blocking=False)
        held = {lock: holding(admin, lock.name) for lock in (holder, aholder)}
        await asyncio.sleep(granted + KILL_AT - time.monotonic())
        dead.stop()
        while time.monotonic() < granted + 2 * LEASE:
            for lock in held:
                assert not lock.lost.is_set(), f"{type(lock).__module__} holder told lost"
            await asyncio.sleep(0.1)
        assert insync_replicas(master) == 1, "the master dropped the dead replica"
        for lock, held_then in held.items():
            assert holding(admin, lock.name) == held_then, "the same holding"
            assert lock.lease_end > time.monotonic()
        holder.release()
        await aholder.release()
    finally:
        leasehold.close_pools(r)
        await aclose(ar)
        admin.close()
        stop_all([master, dead, alive])
