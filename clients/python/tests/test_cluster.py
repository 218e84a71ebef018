"""The lock classes on a real Redis Cluster — three masters with a replica each — through
redis-py's ``RedisCluster`` and ``redis.asyncio.cluster.RedisCluster``: every command goes to
the master of the lock's slot, a wait on a connection of its own to it, grants synced to its
replica; ``MOVED`` and ``ASK`` are followed while a slot migrates under a held lock and under a
waiting client; a ``MultiLock`` of keys in one slot (hash tags) is taken whole on its master and
one of keys in different slots is refused with ``CROSSSLOT``; a holding's guarded and fenced
commands go to the master of their slot."""

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import leasehold
import leasehold.asyncio
from conftest import aclose, cluster_nodes, wait_until, waiters

#: Making the cluster takes 5 to 40 s: started first (conftest.py).
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def nodes():
    running = cluster_nodes()
    yield running
    for node in running:
        node.stop()


def cluster(nodes):
    return redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)


def on_replica(rc, key):
    """``LOCK.FENCE key`` on the replica of the key's master."""
    master = rc.get_node_from_key(key)
    replica = redis.Redis(host=master.host, port=master.port).info("replication")["slave0"]
    client = redis.Redis(host=replica["ip"], port=int(replica["port"]))
    client.execute_command("READONLY")
    return client.execute_command("LOCK.FENCE", key)


def reshard(rc, key, keys=()):
    """Moves the slot of ``key`` to another master, migrating ``keys`` with it."""
    source = rc.get_node_from_key(key)
    target = next(node for node in rc.get_primaries() if node.name != source.name)
    src = redis.Redis(host=source.host, port=source.port)
    dst = redis.Redis(host=target.host, port=target.port)
    slot = rc.keyslot(key)
    source_id = src.execute_command("CLUSTER", "MYID")
    target_id = dst.execute_command("CLUSTER", "MYID")
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    for moving in keys:
        src.execute_command("MIGRATE", target.host, target.port, moving, 0, 5000)
    for primary in rc.get_primaries():
        redis.Redis(host=primary.host, port=primary.port).execute_command(
            "CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return target


def test_locks_on_every_master_synced_to_their_replicas(nodes):
    rc = cluster(nodes)
    names = [f"order:{{{i}}}" for i in range(12)]
    assert len({rc.get_node_from_key(name).name for name in names}) == 3, "every master"
    for name in names:
        lock = leasehold.Lock(rc, name, timeout=10)
        assert lock.acquire(blocking=False)
        assert on_replica(rc, name) == lock.fencing_token, "synced before it was returned"
        assert lock.extend(5)
        lock.release()
        assert not lock.locked()


def test_a_wait_on_a_cluster_master_is_handed_the_lock(nodes):
    rc = cluster(nodes)
    holder = leasehold.Lock(rc, "job:{wait}", timeout=10)
    assert holder.acquire(blocking=False)
    waiter = leasehold.Lock(rc, "job:{wait}", timeout=10, blocking_timeout=10)
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire(),
                                                        token=waiter.local.fencing_token))
    thread.start()
    wait_until(lambda: waiters(rc, "job:{wait}") == 1)
    holder.release()
    thread.join()
    assert got["ok"]
    assert on_replica(rc, "job:{wait}") == got["token"]


def test_a_slot_migrates_under_a_held_lock_and_under_a_waiting_client(nodes):
    rc = cluster(nodes)
    key = "payment:{moving}"
    holder = leasehold.Lock(rc, key, timeout=30, thread_local=False)
    assert holder.acquire(blocking=False)
    token = holder.fencing_token
    waiter = leasehold.Lock(rc, key, timeout=30, blocking_timeout=20, thread_local=False)
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=waiter.acquire()))
    thread.start()
    wait_until(lambda: waiters(rc, key) == 1)
    target = reshard(rc, key, [key])

    # The held lock moved with its holder: renewing and releasing follow MOVED.
    assert holder.owned()
    assert holder.extend(10)
    holder.release()
    thread.join()
    assert got["ok"], "the waiter was turned away by the old master and got it on the new one"
    assert waiter.fencing_token > token
    assert rc.get_node_from_key(key).name == target.name
    waiter.release()

    # A slot migrating while a free lock is taken: ASK to the importing master.
    free = "invoice:{asking}"
    source = rc.get_node_from_key(free)
    other = next(node for node in rc.get_primaries() if node.name != source.name)
    src = redis.Redis(host=source.host, port=source.port)
    dst = redis.Redis(host=other.host, port=other.port)
    slot = rc.keyslot(free)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.execute_command("CLUSTER", "MYID"))
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.execute_command("CLUSTER", "MYID"))
    asking = leasehold.Lock(rc, free, timeout=10)
    assert asking.acquire(blocking=False), "granted by the importing master"
    dst.execute_command("ASKING")
    assert dst.execute_command("LOCK.FENCE", free) == asking.fencing_token
    for primary in rc.get_primaries():
        redis.Redis(host=primary.host, port=primary.port).execute_command(
            "CLUSTER", "SETSLOT", slot, "NODE", dst.execute_command("CLUSTER", "MYID"))


def test_a_set_of_locks_in_one_slot_is_taken_on_its_master_and_synced(nodes):
    rc = cluster(nodes)
    names = ["{order:7}:payment", "{order:7}:stock"]
    lock = leasehold.MultiLock(rc, names, timeout=10, thread_local=False)
    assert lock.acquire(blocking=False)
    tokens = lock.fencing_tokens
    assert [on_replica(rc, name) for name in names] == tokens, "synced whole"
    crossed = leasehold.MultiLock(rc, names[::-1], timeout=10, blocking_timeout=10, thread_local=False)
    got = {}
    thread = threading.Thread(target=lambda: got.update(ok=crossed.acquire()))
    thread.start()
    wait_until(lambda: waiters(rc, names[0]) == 1)
    assert lock.extend(5)
    lock.release()
    thread.join()
    assert got["ok"] and crossed.fencing_tokens[0] > tokens[0]
    assert [on_replica(rc, name) for name in names[::-1]] == crossed.fencing_tokens
    crossed.release()

    apart = leasehold.MultiLock(rc, ["order:{1}", "order:{2}"], timeout=10)
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):
        apart.acquire(blocking=False)


async def test_asyncio_cluster_locks(nodes):
    rc = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)
    sync_rc = cluster(nodes)
    lock = leasehold.asyncio.Lock(rc, "report:{async}", timeout=10)
    assert await lock.acquire(blocking=False)
    assert on_replica(sync_rc, "report:{async}") == lock.fencing_token
    waiter = leasehold.asyncio.Lock(rc, "report:{async}", timeout=10, blocking_timeout=10)

    async def wait():
        assert await waiter.acquire()
        assert on_replica(sync_rc, "report:{async}") == waiter.fencing_token
        await waiter.release()

    waiting = asyncio.ensure_future(wait())
    await asyncio.sleep(0.3)
    await lock.release()
    await waiting

    names = ["{report:async}:a", "{report:async}:b"]
    both = leasehold.asyncio.MultiLock(rc, names, timeout=10)
    assert await both.acquire(blocking=False)
    assert [on_replica(sync_rc, name) for name in names] == both.fencing_tokens
    assert await both.extend(5)
    await both.release()
    await aclose(rc)


def test_guarded_and_fenced_commands_go_to_the_master_of_their_slot(nodes):
    # The in-sync set's SYNC is left out: the server crashes forwarding a guarded reply it held
    # (test_guard.py). Sync(replicas=1) sends NOSYNC with WAIT 1 behind it, on the same pooled
    # connection to the slot's master.
    rc = cluster(nodes)
    one = leasehold.Sync(replicas=1)
    names = [f"{{order:{i}}}:lock" for i in range(12)]
    assert len({rc.get_node_from_key(name).name for name in names}) == 3, "every master"
    for name in names:
        stock = name.replace(":lock", ":stock")
        rc.set(stock, 10)
        lock = leasehold.Lock(rc, name, timeout=10, sync=one)
        assert lock.acquire(blocking=False)
        assert lock.guard("DECRBY", stock, 1) == 9
        assert lock.fenced(name.replace(":lock", ":fence"), "DECRBY", stock, 1) == 8
        with pytest.raises(leasehold.StaleTokenError):
            leasehold.fenced(rc, name.replace(":lock", ":fence"), 1, "DECRBY", stock, 1, sync=one)
        lock.release()
    stale = leasehold.Lock(rc, names[0], timeout=0.1, sync=one)
    assert stale.acquire(blocking=False)
    time.sleep(0.2)
    with pytest.raises(leasehold.NotHeldError):
        stale.guard("DECRBY", names[0].replace(":lock", ":stock"), 1)
    assert [int(rc.get(name.replace(":lock", ":stock"))) for name in names] == [8] * len(names)
