// The locks on a real Redis Cluster — three masters with a replica each — through node-redis's
// createCluster and ioredis's Cluster (each version helpers.mjs runs): commands go to the master
// of the lock's slot, a wait on a connection of its own to it, grants synced to its replica; MOVED
// and ASK are followed while a slot migrates under a held lock and under a waiting client; a set
// of locks in one slot (hash tags) is taken whole on its master, one across slots refused
// (CROSSSLOT); a holding's guarded and fenced commands go to the master of their slot.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';

import { NotHeldError, StaleTokenError, createLock, createMultiLock, fenced } from '../dist/index.js';
import { CLUSTERS, close, freePort, inSyncReplicas, startServer, until, waiters } from './helpers.mjs';

const nodes = [];
for (let i = 0; i < 6; i++) {
  nodes.push(await startServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
    '--cluster-node-timeout', '5000', '--cluster-port', String(await freePort()),
    '--repl-diskless-sync-delay', '0']));
}
await promisify(execFile)('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
  '--cluster-replicas', '1', '--cluster-yes']);
await until(async () => {
  for (const node of nodes) {
    if (!(await node.admin.call('CLUSTER', 'INFO')).includes('cluster_state:ok')) return false;
    const replication = await node.admin.call('INFO', 'replication');
    // Synced grants count once a master's replica is in its in-sync set.
    if (replication.includes('role:master') && (await inSyncReplicas(node.admin)) !== 1) return false;
  }
  return true;
}, 60_000);
after(() => nodes.forEach((node) => node.stop()));

const admin = (port) => nodes.find((node) => node.port === Number(port)).admin;

/** The master serving `key` and its replica, as admin connections: the master that answers
 * for the key rather than redirecting (asked until one does, as slot views settle). */
async function shard(key) {
  const slot = await nodes[0].admin.call('CLUSTER', 'KEYSLOT', key);
  for (let attempt = 0; attempt < 100; attempt++) {
    for (const node of nodes) {
      const replication = await node.admin.call('INFO', 'replication');
      const replica = /slave0:ip=[^,]+,port=(\d+)/.exec(replication);
      if (!replication.includes('role:master') || !replica) continue;
      const serves = await node.admin.call('LOCK.FENCE', key).then(() => true, () => false);
      if (serves) return { slot, master: node.admin, replica: admin(replica[1]), port: node.port };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no master for ${key}`);
}

/** `LOCK.FENCE key` on the replica of its master. After a reshard the replica answers `MOVED`
 * until its master's heartbeat tells it the slot moved (`CLUSTER SETSLOT` goes to masters only),
 * so it is asked until it answers for the key. */
async function onReplica(key) {
  const { replica } = await shard(key);
  await replica.call('READONLY');
  let fence;
  await until(() => replica.call('LOCK.FENCE', key).then((reply) => { fence = reply; return true; }, (error) => {
    if (!error.message.startsWith('MOVED')) throw error;
    return false;
  }));
  return fence;
}

/**
 * Moves the slot of `key` to another master as `redis-cli --cluster reshard` does, with every
 * key the slot holds once it is migrating (the tests' hash tags land anywhere, so another test's
 * key may share it); the new master. A key the old master makes in the slot after that — a
 * hand-over the module should have refused there — leaves `SETSLOT ... NODE` refused.
 */
async function reshard(key) {
  const { slot, master, port } = await shard(key);
  const masters = [];
  for (const node of nodes) {
    if ((await node.admin.call('INFO', 'replication')).includes('role:master')) masters.push(node);
  }
  const target = masters.find((node) => node.port !== port);
  const [sourceId, targetId] = [await master.call('CLUSTER', 'MYID'), await target.admin.call('CLUSTER', 'MYID')];
  await target.admin.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceId);
  await master.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
  const keys = await master.call('CLUSTER', 'GETKEYSINSLOT', slot, 1000);
  for (const moving of keys) await master.call('MIGRATE', '127.0.0.1', target.port, moving, 0, 5000);
  for (const node of masters) await node.admin.call('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
  return target;
}

let counter = 0;
const tag = (what) => `${what}:{${process.pid}-${counter++}}`;

for (const [label, connect] of Object.entries(CLUSTERS)) {
  describe(label, () => {
    let cluster;
    before(async () => { cluster = await connect(nodes[0].port); });
    after(() => close(cluster));

    it('takes locks on every master, each synced to its replica before it is returned', async () => {
      const masters = new Set();
      for (let i = 0; i < 9; i++) {
        const name = tag('order');
        masters.add((await shard(name)).port);
        const holding = await createLock(cluster, name, { ttl: 10_000 }).tryAcquire();
        assert.ok(holding);
        assert.equal(await onReplica(name), holding.token, 'on the replica already');
        assert.equal(await holding.renew(20_000), true);
        assert.equal(await holding.release(), true);
      }
      assert.equal(masters.size, 3, 'every master');
    });

    it("runs a holding's guarded and fenced commands on the master of their slot", async () => {
      // With a fixed replica count (NOSYNC, and WAIT 1 behind it on the same pooled connection):
      // the server crashes forwarding a guarded reply it held for its in-sync set.
      const masters = new Set();
      for (let i = 0; i < 9; i++) {
        const name = tag('order');
        const [stock, fence] = [`${name}:stock`, `${name}:fence`];
        const { master, port } = await shard(name);
        masters.add(port);
        await master.set(stock, '10');
        const holding = await createLock(cluster, name, { ttl: 10_000, sync: { replicas: 1 } }).tryAcquire();
        assert.equal(await holding.guard('DECRBY', stock, 1), 9);
        assert.equal(await holding.fenced(fence, 'DECRBY', stock, 1), 8);
        await assert.rejects(fenced(cluster, fence, 1, 'DECRBY', stock, 1), StaleTokenError);
        assert.equal(await holding.release(), true);
        await assert.rejects(holding.guard('DECRBY', stock, 1), NotHeldError);
        assert.equal(await master.get(stock), '8');
      }
      assert.equal(masters.size, 3, 'every master');
    });

    it('hands a lock over to a waiting client and follows its slot when it migrates', async () => {
      const name = tag('payment');
      const holding = await createLock(cluster, name, { ttl: 30_000 }).tryAcquire();
      const waiting = createLock(cluster, name, { ttl: 30_000 }).acquire({ wait: 20_000 });
      await until(async () => (await waiters((await shard(name)).master, name)) === 1);
      await reshard(name);
      assert.equal(await holding.renew(), true, 'the held lock moved with its holder');
      assert.equal(await holding.release(), true);
      const handed = await waiting;
      assert.ok(handed && handed.token > holding.token, 'granted on the new master');
      assert.equal(await onReplica(name), handed.token);
      await handed.release();
    });

    it('takes a set of locks in one slot whole on its master, and refuses one across slots', async () => {
      const order = tag('order');
      const names = [`${order}:payment`, `${order}:stock`];
      const holding = await createMultiLock(cluster, names, { ttl: 10_000 }).tryAcquire();
      assert.ok(holding);
      for (const [i, name] of names.entries()) assert.equal(await onReplica(name), holding.tokens[i], 'synced whole');
      const crossed = createMultiLock(cluster, [...names].reverse(), { ttl: 10_000 }).acquire({ wait: 10_000 });
      await until(async () => (await waiters((await shard(names[0])).master, names[0])) === 1);
      assert.equal(await holding.renew(20_000), true);
      assert.equal(await holding.release(), true);
      const handed = await crossed;
      assert.ok(handed && handed.token > holding.token, 'the crossed set granted whole');
      assert.equal(await handed.release(), true);
      await assert.rejects(createMultiLock(cluster, ['order:{a}', 'order:{b}']).tryAcquire(), /CROSSSLOT/);
    });

    it('takes a free lock on the importing master while its slot migrates (ASK)', async () => {
      const name = tag('invoice');
      const { slot, master, port } = await shard(name);
      let importing;
      for (const node of nodes) {
        if (node.port !== port && (await node.admin.call('INFO', 'replication')).includes('role:master')) { importing = node; break; }
      }
      const [sourceId, targetId] = [await master.call('CLUSTER', 'MYID'), await importing.admin.call('CLUSTER', 'MYID')];
      await importing.admin.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceId);
      await master.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
      try {
        const holding = await createLock(cluster, name, { ttl: 10_000 }).tryAcquire();
        assert.ok(holding, 'granted');
        await importing.admin.call('ASKING');
        assert.equal(await importing.admin.call('LOCK.FENCE', name), holding.token, 'by the importing master');
      } finally {
        for (const node of nodes) {
          if ((await node.admin.call('INFO', 'replication')).includes('role:master')) {
            await node.admin.call('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
          }
        }
      }
    });
  });
}
