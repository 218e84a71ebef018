// Grants synced to the master's replicas before they are returned (the `sync` option), with
// node-redis and ioredis, on a real master and replica: running, stopped (SIGSTOP) and
// detached.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { NotReplicatedError, createLock } from '../dist/index.js';
import { CLIENTS, close, startServer, until, waiters } from './helpers.mjs';

const master = await startServer(['--repl-diskless-sync-delay', '0']);
const replica = await startServer();
await replica.admin.call('REPLICAOF', '127.0.0.1', String(master.port));
await until(async () => (await master.admin.call('INFO', 'replication')).includes('state=online'));
await master.admin.set('settled', '1');
assert.equal(await master.admin.call('WAIT', '1', '10000'), 1);
after(() => { replica.signal('SIGCONT'); master.stop(); replica.stop(); });

let counter = 0;
const unique = (what) => `${what}:${process.pid}:${counter++}`;
const QUICK = { timeout: 200 };

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

    it('a grant the replica lacks is released and reported, or retried within the wait', async () => {
      const name = unique('unsynced');
      const lock = createLock(client, name, { ttl: 10_000, sync: QUICK });
      await (await lock.tryAcquire()).release();
      replica.signal('SIGSTOP');
      try {
        await assert.rejects(lock.tryAcquire(), (error) =>
          error instanceof NotReplicatedError && error.acked === 0 && error.wanted === 1);
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
  });
}

describe('the replica count', () => {
  it('is not lowered when the same master loses a replica', async () => {
    const client = await CLIENTS['ioredis 6'](master.port);
    const name = unique('split');
    const lock = createLock(client, name, { ttl: 10_000, sync: QUICK });
    await (await lock.tryAcquire()).release();
    await replica.admin.call('REPLICAOF', 'NO', 'ONE');
    for (let i = 0; i < 2; i++) {
      await assert.rejects(lock.tryAcquire(), NotReplicatedError);
    }
    assert.ok(await createLock(client, name, { sync: { replicas: 0 } }).tryAcquire());
    close(client);
  });
});
