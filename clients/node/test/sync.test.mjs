// Grants — a holder's re-entry, downgrade and upgrade too — and renewals synced to the master's
// in-sync replica set before they count (the `sync` option: `SYNC`, the server holds the reply
// until the set has the write), with node-redis and ioredis (each version helpers.mjs runs;
// what a write that does not count does, with the newest only), on a real master and replica:
// running and stopped (SIGSTOP), a refused grant released by the server; a replica that just
// joined the set waited for; a replica killed for good counting until the master drops it from
// the set, and `lock.min-insync-replicas` refusing grants below it; a held reply given up on;
// the pooled connections reused, and an exhausted pool queued for within the caller's budget.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { LostReply, NotReplicatedError, createLock, createReadWriteLock, setPoolSizes } from '../dist/index.js';
import { CLIENTS, NEWEST, attach, close, group, inSyncReplicas, infoField, lockInfo, pair, startServer, unique, until, waiters } from './helpers.mjs';

/** The server refuses a write the in-sync set did not acknowledge after 200 ms (`QUICK`). */
const SYNC_TIMEOUT = ['sync-timeout-ms', '200'];
const { master, replica, stop } = await pair(SYNC_TIMEOUT);
after(stop);

const QUICK = { timeout: 200 };
const NOT_ACKNOWLEDGED = 'not every in-sync replica acknowledged within 200 ms';
/** The rejection of a grant the stopped replica did not acknowledge: the server released it. */
const grantNotSynced = (error) => error instanceof NotReplicatedError && error.write === 'grant' && error.released &&
  error.reason === NOT_ACKNOWLEDGED;
/** Sets the master's `lock.sync-timeout-ms` for `routine`, then back to 200 ms. */
async function syncTimeout(ms, routine) {
  await master.admin.call('CONFIG', 'SET', 'lock.sync-timeout-ms', String(ms));
  try {
    return await routine();
  } finally {
    await master.admin.call('CONFIG', 'SET', 'lock.sync-timeout-ms', '200');
  }
}

for (const [label, connect] of Object.entries(CLIENTS)) {
  describe(label, () => {
    let client;
    before(async () => { client = await connect(master.port); });
    after(() => close(client));

    it('a grant is on the replica when it is returned, immediate or handed over', async () => {
      const name = unique('synced');
      const holding = await createLock(client, name, { ttl: 10_000 }).tryAcquire();
      assert.equal(await replica.admin.call('LOCK.FENCE', name), holding.token, 'already on the replica');
      const waiting = createLock(client, name, { ttl: 10_000 }).acquire({ wait: 5_000 });
      await until(async () => (await waiters(master.admin, name)) === 1);
      await holding.release();
      const handed = await waiting;
      assert.equal(await replica.admin.call('LOCK.FENCE', name), handed.token, 'the hand-over too');
      await handed.release();
    });


    it('a re-entry, a downgrade and an upgrade are on the replica when they return', async () => {
      const name = unique('changed');
      const holding = await createReadWriteLock(client, name, { ttl: 10_000 }).write.tryAcquire();
      const inner = await holding.reenter();
      assert.equal((await lockInfo(replica.admin, name)).holds, 2, 'the new hold, already on the replica');
      await inner.release();
      assert.equal(await holding.downgrade(), true);
      assert.equal((await lockInfo(replica.admin, name)).mode, 'shared', 'the downgrade');
      assert.equal(await holding.upgrade(), true);
      const upgraded = await lockInfo(replica.admin, name);
      assert.deepEqual([upgraded.mode, upgraded.token], ['exclusive', holding.token], 'the upgrade, with its new token');
      await holding.release();
    });


    it('reuses its connections: 200 synced grants and 4 × 25 waits open at most a pool each', async () => {
      const received = () => infoField(master.admin, 'total_connections_received');
      const lock = createLock(client, unique('reused'), { ttl: 10_000 });
      const before = await received();
      for (let i = 0; i < 200; i++) await (await lock.tryAcquire()).release();
      const granted = await received();
      assert.ok(granted - before <= 16, `${granted - before} connections for 200 synced grants`);
      const contended = createLock(client, unique('contended'), { ttl: 10_000 });
      await Promise.all(Array.from({ length: 4 }, async () => {
        for (let i = 0; i < 25; i++) await (await contended.acquire({ wait: 30_000 })).release();
      }));
      const waited = (await received()) - granted;
      assert.ok(waited <= 32, `${waited} connections for 100 waits`);
    });


    it('a full wait pool makes a waiter queue within its wait, and never blocks the holder', async (t) => {
      const own = await connect(master.port);
      t.after(() => close(own));
      setPoolSizes(own, { wait: 2 });
      const name = unique('full');
      const holding = await createLock(own, name, { ttl: 30_000 }).tryAcquire();
      const served = [1, 2].map(async () => {
        const granted = await createLock(own, name, { ttl: 10_000 }).acquire({ wait: 60_000 });
        assert.ok(granted);
        await granted.release();
      });
      await until(async () => (await waiters(master.admin, name)) === 2);
      const started = Date.now();
      assert.equal(await createLock(own, name).acquire({ wait: 300 }), null, 'no connection came free');
      const took = Date.now() - started;
      assert.ok(took >= 290 && took < 5_000, `answered in ${took} ms`);
      assert.equal(await holding.renew(), true, 'the holder renews, synced, while waiters fill the wait pool');
      assert.equal(await holding.release(), true);
      await Promise.all(served);
    });

    // What a write that does not count does is the same whichever library carried it: these
    // run with the newest of each library only.
    if (label in NEWEST) {
      it('a grant the replica lacks is refused and released by the server, or retried within the wait', async () => {
        const name = unique('unsynced');
        const lock = createLock(client, name, { ttl: 10_000, sync: QUICK });
        await (await lock.tryAcquire()).release();
        replica.signal('SIGSTOP');
        try {
          await assert.rejects(lock.tryAcquire(), grantNotSynced);
          assert.equal(await master.admin.exists(name), 0, 'released');
          setTimeout(() => replica.signal('SIGCONT'), 500);
          const holding = await lock.acquire({ wait: 5_000 });
          assert.ok(holding, 'retried within the wait');
          assert.equal(await replica.admin.call('LOCK.FENCE', name), holding.token);
          await holding.release();
        } finally {
          replica.signal('SIGCONT');
        }
        const off = await createLock(client, unique('off'), { sync: false }).tryAcquire();
        assert.ok(off);
      });


      it('a hand-over the replica lacks is refused, tried again within the wait, and leaves the lock free', async () => {
        const name = unique('handed');
        const holding = await createLock(client, name, { ttl: 10_000, sync: false }).tryAcquire();
        replica.signal('SIGSTOP');
        try {
          const waiting = createLock(client, name, { ttl: 10_000, sync: QUICK }).acquire({ wait: 600 });
          await until(async () => (await waiters(master.admin, name)) === 1);
          await holding.release();
          await assert.rejects(waiting, grantNotSynced);
          assert.equal(await master.admin.exists(name), 0, 'the server released every grant it refused');
        } finally {
          replica.signal('SIGCONT');
        }
      });


      it('a reply held past the sync timeout and the margin is given up on: the grant does not stay', async () => {
        const name = unique('given-up');
        replica.signal('SIGSTOP');
        try {
          await syncTimeout(10_000, async () => {
            const started = Date.now();
            await assert.rejects(createLock(client, name, { sync: { timeout: 100 }, timeoutMargin: 100 }).tryAcquire(), LostReply);
            assert.ok(Date.now() - started < 2_000);
            // Its connection closed, the server releases the grant it held (and the client
            // releases it too): long before the server's 10 s.
            await until(async () => (await master.admin.exists(name)) === 0, 2_000);
          });
        } finally {
          replica.signal('SIGCONT');
        }
      });


      it('a renewal the replica lacks does not count; a watched holding is lost when its last synced lease ends', async () => {
        const name = unique('renewal');
        const holding = await createLock(client, name, { ttl: 2_000, watchdog: true, sync: QUICK }).tryAcquire();
        assert.ok(await holding.renew(), 'synced while the replica runs');
        replica.signal('SIGSTOP');
        try {
          await assert.rejects(holding.renew(60_000), (error) =>
            error instanceof NotReplicatedError && error.write === 'renewal' && !error.released && error.reason === NOT_ACKNOWLEDGED);
          assert.ok((await master.admin.pttl(name)) > 50_000, 'renewed on the master only');
          assert.equal(holding.signal.aborted, false, 'the lease from the last synced renewal still runs');
          // The watchdog's renewals are not synced either: the holding is lost 2 s after the last
          // one that was, not 60 s after the one the master has.
          await until(async () => holding.signal.aborted, 10_000);
        } finally {
          replica.signal('SIGCONT');
        }
        await holding.release();
      });


      it('a shorter renewal the replica lacks bounds the lease the holding counts on', async () => {
        const holding = await createLock(client, unique('shorter'), { ttl: 10_000, watchdog: true, sync: QUICK }).tryAcquire();
        replica.signal('SIGSTOP');
        try {
          const sent = Date.now();
          await assert.rejects(holding.renew(300), NotReplicatedError);
          // The master may have shortened the lease to 300 ms: the holding is lost then, not
          // when the grant's 10 s lease would have ended.
          await until(async () => holding.signal.aborted, 5_000);
          assert.ok(Date.now() - sent < 5_000);
        } finally {
          replica.signal('SIGCONT');
        }
        await holding.release();
      });


      it('a re-entry the replica lacks is given back; a downgrade or an upgrade it lacks loses the holding', async () => {
        const options = { ttl: 3_000, watchdog: true, sync: QUICK };
        const [writing, reading] = [unique('unsynced-writer'), unique('unsynced-reader')];
        const writer = await createReadWriteLock(client, writing, options).write.tryAcquire();
        const reader = await createReadWriteLock(client, reading, options).read.tryAcquire();
        const tokens = [writer.token, reader.token];
        replica.signal('SIGSTOP');
        try {
          await assert.rejects(writer.reenter(60_000), grantNotSynced);
          assert.equal((await lockInfo(master.admin, writing)).holds, 1, 'the new hold given back by the server');
          assert.equal(writer.signal.aborted, false, 'the holding stays as it was');
          await assert.rejects(writer.downgrade(60_000), grantNotSynced);
          assert.equal(await lockInfo(master.admin, writing), null, 'released by the server');
          assert.equal(writer.signal.aborted, true, 'the holding is lost');
          await assert.rejects(reader.upgrade(60_000), grantNotSynced);
          assert.equal(await lockInfo(master.admin, reading), null, 'released by the server');
          assert.equal(reader.signal.aborted, true);
          assert.deepEqual([writer.token, reader.token], tokens, 'the tokens kept: the new one does not count');
        } finally {
          replica.signal('SIGCONT');
        }
        assert.equal(await writer.release(), false);
        assert.equal(await reader.release(), false);
      });

    }
  });
}

describe('pooled connections', () => {
  it('a full sync pool makes a synced grant queue within its sync timeout, then answer not synced', (t) => syncTimeout(3_000, async () => {
    const own = await CLIENTS['ioredis 6'](master.port);
    t.after(() => close(own));
    setPoolSizes(own, { sync: 1 });
    const slow = createLock(own, unique('slow'), { ttl: 10_000, sync: { timeout: 3_000 } });
    const quick = createLock(own, unique('quick'), { ttl: 10_000, sync: { timeout: 300 } });
    // Grants the module made (not `INFO commandstats`, where Redis 7.2 and later count a
    // blocked command only once it is answered).
    const acquires = async () => {
      const stats = await master.admin.call('INFO', 'lock');
      return Number(/lock_acquisitions:(\d+)/.exec(stats)?.[1] ?? 0);
    };
    await (await slow.tryAcquire()).release(); // the one connection, open
    replica.signal('SIGSTOP');
    try {
      const before = await acquires();
      const first = slow.tryAcquire(); // held by the server on the one sync connection for 3 s
      await until(async () => (await acquires()) === before + 1);
      const started = Date.now();
      await assert.rejects(quick.tryAcquire(), (error) => error instanceof NotReplicatedError && error.acked === 0);
      const took = Date.now() - started;
      assert.ok(took >= 290 && took < 2_500, `answered in ${took} ms`);
      assert.equal(await acquires(), before + 1, 'queued, never sent');
      await assert.rejects(first, NotReplicatedError);
    } finally {
      replica.signal('SIGCONT');
    }
  }));

  it('one that reached a replica (READONLY, as after a failover) is closed, not reused', async (t) => {
    const toReplica = await CLIENTS['ioredis 6'](replica.port);
    t.after(() => close(toReplica));
    assert.equal(await toReplica.ping(), 'PONG');
    const received = () => infoField(replica.admin, 'total_connections_received');
    const lock = createLock(toReplica, unique('readonly'), { ttl: 10_000 });
    const before = await received();
    for (let i = 0; i < 2; i++) await assert.rejects(lock.tryAcquire(), /READONLY/);
    assert.equal((await received()) - before, 2, 'a new connection each time');
  });
});

describe("a holding's lease", () => {
  it('moves with a synced downgrade', async (t) => {
    const client = await CLIENTS['node-redis 6'](master.port);
    t.after(() => close(client));
    // The watchdog renews (synced, 4.5 s) every 1.5 s: the replica stops before its first round.
    const options = { ttl: 4_500, watchdog: true, sync: QUICK };
    const holding = await createReadWriteLock(client, unique('moved'), options).write.tryAcquire();
    assert.equal(await holding.downgrade(9_000), true);
    replica.signal('SIGSTOP');
    try {
      // Past the grant's 4.5 s: the downgrade's 9 s lease still runs. (The watchdog's first
      // renewal, 4.5 s at 1.5 s, is not acknowledged: the master may have made it, so the lease
      // counted on ends 4.5 s after it, at 6 s, not at 9 s.)
      await new Promise((r) => setTimeout(r, 5_200));
      assert.equal(holding.signal.aborted, false, "the downgrade's lease outlasts the grant's 4.5 s");
      await until(() => holding.signal.aborted, 15_000);
    } finally {
      replica.signal('SIGCONT');
    }
    await holding.release();
  });
});

describe('the in-sync set', () => {
  /** How long a replica killed for good counts: it is dropped ~3.5-4 s after it died. */
  const FAST = ['insync-timeout-ms', '1000', 'insync-drop-delay-ms', '500', ...SYNC_TIMEOUT];

  it('is waited for by the server as it is: a replica that just joined is waited for', async () => {
    const alone = await startServer(['--repl-diskless-sync-delay', '0'], SYNC_TIMEOUT);
    const joining = await startServer();
    const client = await CLIENTS['node-redis 6'](alone.port);
    try {
      const lock = createLock(client, unique('joined'), { ttl: 10_000, sync: QUICK });
      await (await lock.tryAcquire()).release(); // a lone server: no replica to wait for
      await attach(alone, joining);
      joining.signal('SIGSTOP');
      await assert.rejects(lock.tryAcquire(), grantNotSynced);
      joining.signal('SIGCONT');
      assert.ok(await lock.acquire({ wait: 5_000 }), 'counted once the replica acknowledges');
    } finally {
      joining.signal('SIGCONT');
      await close(client);
      alone.stop();
      joining.stop();
    }
  });

  it('drops a replica killed for good, and then grants locks made before and after the kill again', async (t) => {
    const { primary, replicas, stop } = await group(FAST);
    const clients = await Promise.all(Object.values(CLIENTS).map((connect) => connect(primary.port)));
    t.after(async () => { await Promise.all(clients.map(close)); stop(); });
    const options = { ttl: 10_000, sync: QUICK };
    const made = clients.map((client) => createLock(client, unique('before'), options));
    for (const lock of made) await (await lock.tryAcquire()).release(); // synced to both replicas
    replicas[1].signal('SIGKILL');
    const killed = Date.now();
    const pending = new Set([...made, ...clients.map((client) => createLock(client, unique('after'), options))]);
    let refused = 0;
    while (pending.size > 0) {
      assert.ok(Date.now() - killed < 6_000, `${pending.size} locks still refused ${Date.now() - killed} ms after the kill`);
      await Promise.all([...pending].map(async (lock) => {
        try {
          const holding = await lock.tryAcquire();
          assert.equal(await inSyncReplicas(primary.admin), 1, 'granted only once the dead replica was dropped');
          pending.delete(lock);
          await holding.release();
        } catch (error) {
          if (!(error instanceof NotReplicatedError)) throw error;
          assert.equal(error.reason, NOT_ACKNOWLEDGED);
          refused++;
        }
      }));
    }
    assert.ok(refused > 0, 'refused while the dead replica was in the set');
  });

  it('refuses grants, naming lock.min-insync-replicas, while it has fewer members', async (t) => {
    const { primary, replicas, stop } = await group(['min-insync-replicas', '2', ...FAST]);
    const client = await CLIENTS['ioredis 6'](primary.port);
    t.after(() => { close(client); stop(); });
    const lock = createLock(client, unique('fewer'), { ttl: 10_000, sync: QUICK });
    await (await lock.tryAcquire()).release();
    replicas[1].signal('SIGKILL');
    await until(async () => (await inSyncReplicas(primary.admin)) === 1, 10_000);
    const fewer = (error) => error instanceof NotReplicatedError && error.released &&
      error.message === 'the grant does not count: the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2); the server released it';
    await assert.rejects(lock.tryAcquire(), fewer);
    assert.equal(await primary.admin.exists(lock.name), 0, 'released');
    await assert.rejects(lock.acquire({ wait: 500 }), fewer);
  });
});
