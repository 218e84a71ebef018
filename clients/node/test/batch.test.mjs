// Group commit (src/batch.ts): synced acquires and renewals sent at the same time go together on
// one connection of the sync pool, each with NOSYNC, behind one LOCK.SYNC — with the newest
// node-redis and ioredis, on a real master and replica: concurrent grants all granted, tied to
// the session and on the replica when they return, in fewer LOCK.SYNC than grants; the replica
// stopped (SIGSTOP), a batch refused and every lock given back by the client (the server undoes
// nothing behind LOCK.SYNC); a batch given up on (no reply in time) leaving no lock; renewals
// in a batch not counted; the sync pool's connections bounded. And what LOCK.SYNC's errors
// mean (an older module's, a demoted master's).

import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';

import { LostReply, NotReplicatedError, createLock, setPoolSizes } from '../dist/index.js';
import { isDemoted, unsyncedBy } from '../dist/sync.js';
import { NEWEST, close, infoField, lockInfo, pair, unique, until } from './helpers.mjs';

const SYNC_TIMEOUT = ['sync-timeout-ms', '200'];
const { master, replica, stop } = await pair(SYNC_TIMEOUT);
after(stop);

const QUICK = { timeout: 200 };
const TASKS = 40;

/** How many times the master ran `LOCK.SYNC`. */
async function syncs() {
  const stats = await master.admin.call('INFO', 'commandstats');
  return Number(/^cmdstat_lock\.sync:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
}

/** `TASKS` locks of their own, with `options`. */
const locks = (client, what, options) => Array.from({ length: TASKS }, () => createLock(client, unique(what), options));

for (const [label, connect] of Object.entries(NEWEST)) {
  describe(label, () => {
    it('concurrent grants go in batches: all granted, tied to the session, on the replica when they return', async (t) => {
      const client = await connect(master.port);
      t.after(() => close(client));
      const taken = locks(client, 'batched', { ttl: 10_000 });
      await (await taken[0].tryAcquire()).release(); // the session, opened
      const before = await syncs();
      const holdings = await Promise.all(taken.map((lock) => lock.tryAcquire()));
      const synced = (await syncs()) - before;
      assert.ok(synced >= 1 && synced < TASKS, `${synced} LOCK.SYNC for ${TASKS} grants`);
      const sessions = new Set();
      for (const [at, holding] of holdings.entries()) {
        assert.ok(holding, 'granted');
        assert.equal(await replica.admin.call('LOCK.FENCE', taken[at].name), holding.token, 'already on the replica');
        sessions.add((await lockInfo(master.admin, taken[at].name)).session);
      }
      assert.equal(sessions.size, 1, 'every grant tied to the one session');
      assert.notEqual([...sessions][0], null, 'a session');
      // Renewals go in batches too.
      assert.deepEqual(await Promise.all(holdings.map((holding) => holding.renew(20_000))), holdings.map(() => true));
      assert.ok((await replica.admin.pttl(taken[0].name)) > 10_000, 'the renewal on the replica');
      await Promise.all(holdings.map((holding) => holding.release()));
    });

    it('a batch the replica lacks is refused: every grant given back before the callers hear it', async (t) => {
      const client = await connect(master.port);
      t.after(() => close(client));
      const taken = locks(client, 'refused', { ttl: 10_000, sync: QUICK });
      await (await taken[0].tryAcquire()).release();
      replica.signal('SIGSTOP');
      try {
        const outcomes = await Promise.allSettled(taken.map(async (lock) => {
          try {
            return await lock.tryAcquire();
          } finally {
            // Given back before the rejection: the lock is free as the caller hears it.
            assert.equal(await master.admin.exists(lock.name), 0, `${lock.name} given back`);
          }
        }));
        for (const { status, reason } of outcomes) {
          assert.equal(status, 'rejected');
          assert.ok(reason instanceof NotReplicatedError, String(reason));
          assert.deepEqual([reason.write, reason.released, reason.reason], ['grant', true, 'not every in-sync replica acknowledged within 200 ms']);
        }
      } finally {
        replica.signal('SIGCONT');
      }
      assert.ok(await taken[1].acquire({ wait: 5_000 }), 'granted once the replica runs');
    });

    it('renewals in a batch the replica lacks do not count, and leave the holdings held', async (t) => {
      const client = await connect(master.port);
      t.after(() => close(client));
      const holdings = await Promise.all(locks(client, 'renewed', { ttl: 10_000, sync: QUICK }).map((lock) => lock.tryAcquire()));
      replica.signal('SIGSTOP');
      try {
        const renewed = await Promise.allSettled(holdings.map((holding) => holding.renew(60_000)));
        for (const { status, reason } of renewed) {
          assert.equal(status, 'rejected');
          assert.deepEqual([reason.name, reason.write, reason.released], ['NotReplicatedError', 'renewal', false]);
        }
        for (const holding of holdings) assert.equal(holding.signal.aborted, false, 'the lease before the renewal still counts');
      } finally {
        replica.signal('SIGCONT');
      }
      assert.deepEqual(await Promise.all(holdings.map((holding) => holding.release())), holdings.map(() => true), 'still held');
    });

    it('a batch given up on (no reply in time) closes its connection and leaves no lock', async (t) => {
      const client = await connect(master.port);
      t.after(() => close(client));
      const taken = locks(client, 'given-up', { ttl: 60_000, sync: { timeout: 100 }, timeoutMargin: 100 });
      await (await taken[0].tryAcquire()).release();
      await master.admin.call('CONFIG', 'SET', 'lock.sync-timeout-ms', '10000');
      replica.signal('SIGSTOP');
      try {
        const started = Date.now();
        const outcomes = await Promise.allSettled(taken.map((lock) => lock.tryAcquire()));
        for (const { status, reason } of outcomes) assert.ok(status === 'rejected' && reason instanceof LostReply, String(reason));
        assert.ok(Date.now() - started < 2_000);
        // The server undoes nothing behind LOCK.SYNC: the client releases every grant that may
        // have been made, long before the server's 10 s and the 60 s leases.
        await until(async () => (await Promise.all(taken.map((lock) => master.admin.exists(lock.name)))).every((n) => n === 0), 2_000);
      } finally {
        replica.signal('SIGCONT');
        await master.admin.call('CONFIG', 'SET', 'lock.sync-timeout-ms', '200');
      }
    });

    it('keeps to the sync pool: 64 tasks × 20 synced grants open at most its size', async (t) => {
      const client = await connect(master.port);
      t.after(() => close(client));
      const received = () => infoField(master.admin, 'total_connections_received');
      await (await createLock(client, unique('bounded'), { sync: false }).tryAcquire()).release(); // connected
      const before = await received();
      const run = async (size) => {
        setPoolSizes(client, { sync: size });
        await Promise.all(Array.from({ length: 64 }, async () => {
          const lock = createLock(client, unique('bounded'), { ttl: 10_000 });
          for (let i = 0; i < 20; i++) await (await lock.tryAcquire()).release();
        }));
      };
      await run(2);
      // The session's own connection, and two of the sync pool.
      assert.ok((await received()) - before <= 3, `${(await received()) - before} connections with a pool of 2`);
      await run(16);
      assert.ok((await received()) - before <= 17, `${(await received()) - before} connections with a pool of 16`);
    });
  });
}

describe("LOCK.SYNC's errors", () => {
  it('an older module (no LOCK.SYNC) is named, as SYNC refused is', () => {
    const error = unsyncedBy(new Error("ERR unknown command 'LOCK.SYNC', with args beginning with: "), 'grant');
    assert.match(error.message, /^the server answered "ERR unknown command 'LOCK.SYNC'.*this package needs the lock module 0\.7\.0 or later$/);
  });

  it("a demoted master's, NOREPLICAS or UNBLOCKED, is the one a synced write gets: released nowhere", () => {
    const demoted = [
      'NOREPLICAS this server is no longer a master; the writes before it do not count: the new master may have their grants, release them there',
      'UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)',
    ].map((message) => unsyncedBy(new Error(message), 'grant'));
    for (const error of demoted) {
      assert.ok(isDemoted(error), error.message);
      assert.equal(error.released, false);
    }
    assert.equal(unsyncedBy('OK', 'grant'), undefined);
    const renewal = unsyncedBy(new Error('NOREPLICAS not every in-sync replica acknowledged within 200 ms; the writes before it do not count: release the grants they made'), 'renewal');
    assert.deepEqual([renewal.write, renewal.released], ['renewal', false]);
  });
});
