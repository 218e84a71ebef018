// Each write as the client sends it, against a scripted stand-in for ioredis (no server
// needed): an acquire without waiting and a renewal alone with SYNC (the server syncs it to the
// in-sync set), those of one tick in one batch with NOSYNC and LOCK.SYNC behind them; a wait
// with SYNC;
// NOSYNC with sync off or a fixed count — whose WAIT, and WAITAOF for the AOF, go behind it; a
// LOCK.SYNC refused with NOREPLICAS: a batched grant released by the client before it rejects,
// a SYNC one never (the server did); a module without SYNC or LOCK.SYNC named; a held reply
// waited for up to the sync timeout and the margin, then given up on with its connection
// closed; a grant refused by a master that became a replica released in the background.
// Sessions are off here (the stand-in does not answer LOCK.SESSION; session.test.mjs has them
// on a server).

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { LostReply, NotReplicatedError, createLock, setSessionOptions } from '../dist/index.js';

/** An ioredis-like client (and its duplicates) whose commands `answer` answers (a promise:
 * answered when it settles), all logged in `sent`; an `Error` answer is an error reply.
 * `closed` counts the duplicates closed. */
function scripted(answer) {
  const sent = [];
  const counts = { closed: 0, opened: 0 };
  const make = () => ({
    options: {},
    status: 'ready',
    call: async (...args) => {
      sent.push(args);
      const reply = await answer(args);
      if (reply instanceof Error) throw reply;
      return reply;
    },
    duplicate: () => { counts.opened++; return make(); },
    connect: async () => {},
    disconnect: () => { counts.closed++; },
    on: () => {},
  });
  const client = make();
  setSessionOptions(client, { enabled: false });
  return { client, sent, counts };
}

/** A master that grants and renews everything, and answers `WAIT n` with `acked` replicas
 * (`WAITAOF` with `[local, acked]`). */
function master({ acked = 2, local = 1 } = {}) {
  return (args) => {
    switch (args[0]) {
      case 'LOCK.ACQUIRE':
      case 'LOCK.RENEW':
      case 'LOCK.RELEASE':
        return 1;
      case 'WAIT':
        return acked;
      case 'WAITAOF':
        return [local, acked];
      case 'LOCK.SYNC':
        return 'OK';
      default:
        return new Error(`ERR unknown command '${args[0]}'`);
    }
  };
}

/** Each command sent: its name, and its last argument for a lock write (SYNC or NOSYNC) or its
 * count for a WAIT. */
const names = (sent) => sent.map((args) => {
  if (args.length === 1) return args[0];
  return args[0].startsWith('WAIT') ? `${args[0]} ${args.at(-2)}` : `${args[0]} ${args.at(-1)}`;
});

/** What the master answers to LOCK.SYNC when the in-sync set did not acknowledge. */
const SYNC_REFUSED = 'NOREPLICAS the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2); the writes before it do not count: release the grants they made';

it('sends a lone grant and a lone renewal with SYNC: the server syncs it', async () => {
  const { client, sent } = scripted(master());
  const holding = await createLock(client, 'k', { ttl: 10_000 }).tryAcquire();
  assert.ok(holding);
  assert.equal(await holding.renew(), true);
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE SYNC', 'LOCK.RENEW SYNC']);
  assert.deepEqual(sent[0], ['LOCK.ACQUIRE', 'k', holding.owner, '10000', 'SYNC']);
});

it('sends a wait in the server with SYNC, and the writes of one tick together behind one LOCK.SYNC', async () => {
  const { client, sent, counts } = scripted(master());
  assert.ok(await createLock(client, 'k').acquire({ wait: 1_000 }));
  assert.deepEqual(sent[0].slice(-3), ['WAIT', '1000', 'SYNC']);
  sent.length = 0;
  const opened = counts.opened;
  const granted = await Promise.all(['a', 'b', 'c'].map((name) => createLock(client, name).tryAcquire()));
  assert.ok(granted.every(Boolean));
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE NOSYNC', 'LOCK.ACQUIRE NOSYNC', 'LOCK.ACQUIRE NOSYNC', 'LOCK.SYNC']);
  assert.equal(counts.opened - opened, 1, 'on one connection of the sync pool');
});

it('releases each grant of a batch whose LOCK.SYNC was refused, before it rejects; a busy one is told busy', async () => {
  const { client, sent } = scripted((args) => {
    if (args[0] === 'LOCK.SYNC') return new Error(SYNC_REFUSED);
    if (args[0] === 'LOCK.ACQUIRE' && args[1] === 'busy') return null;
    return master()(args);
  });
  const outcomes = await Promise.allSettled(['a', 'b', 'busy'].map((name) => createLock(client, name).tryAcquire().finally(() => {
    if (name !== 'busy') assert.ok(sent.some(([command, key]) => command === 'LOCK.RELEASE' && key === name), `${name} released first`);
  })));
  for (const { status, reason } of outcomes.slice(0, 2)) {
    assert.equal(status, 'rejected');
    assert.ok(reason instanceof NotReplicatedError && reason.write === 'grant' && reason.released &&
      reason.reason === 'the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)', String(reason));
  }
  assert.deepEqual(outcomes[2], { status: 'fulfilled', value: null });
  const releases = sent.filter(([command]) => command === 'LOCK.RELEASE');
  assert.deepEqual(releases.map(([, key, owner]) => [key, owner]), ['a', 'b'].map((name) => [name, sent.find(([command, key]) => command === 'LOCK.ACQUIRE' && key === name)[2]]),
    'as their owners, and nothing else');
});

it("never releases a grant the server refused (SYNC, a lone one's or a wait's): the server did", async () => {
  const refusal = 'NOREPLICAS the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2); the grant was released';
  // Waits refused; the last try without waiting, at the wait's end, finds the lock busy.
  const { client, sent } = scripted((args) => {
    if (args[0] === 'LOCK.ACQUIRE') return args.at(-1) === 'SYNC' ? new Error(refusal) : null;
    return master()(args);
  });
  await assert.rejects(createLock(client, 'k').tryAcquire(), (error) => error instanceof NotReplicatedError && error.released);
  let refused;
  const holding = await createLock(client, 'k').acquire({ wait: 100 }).catch((error) => { refused = error; });
  assert.ok(holding === null || (refused instanceof NotReplicatedError && refused.released &&
    refused.reason === 'the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)'), String(refused));
  assert.ok(sent.some((args) => args.at(-1) === 'SYNC'), 'refused waits');
  assert.ok(sent.every(([command]) => command !== 'LOCK.RELEASE'), 'no LOCK.RELEASE');
});

it('rejects renewals the server refused, alone or in a batch, which leaves the holdings as they were', async () => {
  const refusal = 'NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the renewal does not count: the lease before it does';
  const { client, sent } = scripted((args) => {
    if (args[0] === 'LOCK.SYNC') return new Error(SYNC_REFUSED);
    return args[0] === 'LOCK.RENEW' && args.at(-1) === 'SYNC' ? new Error(refusal) : master()(args);
  });
  const holdings = [];
  for (const name of ['a', 'b']) holdings.push(await createLock(client, name, { ttl: 10_000 }).tryAcquire());
  const notCounted = (error) => error instanceof NotReplicatedError && error.write === 'renewal' && !error.released;
  sent.length = 0;
  await assert.rejects(holdings[0].renew(), notCounted);
  await Promise.all(holdings.map((holding) => assert.rejects(holding.renew(), notCounted)));
  for (const holding of holdings) assert.equal(holding.signal.aborted, false);
  assert.deepEqual(names(sent), ['LOCK.RENEW SYNC', 'LOCK.RENEW NOSYNC', 'LOCK.RENEW NOSYNC', 'LOCK.SYNC']);
});

it('names the module needed when the server does not know SYNC (before 0.7.0), with sync on or off', async () => {
  const old = (args) => (args[0].startsWith('LOCK.') && /^N?O?SYNC$/.test(args.at(-1)) ? new Error('ERR syntax error') : master()(args));
  const { client } = scripted(old);
  await assert.rejects(createLock(client, 'k').tryAcquire(), /needs the lock module 0\.7\.0 or later/);
  await assert.rejects(createLock(client, 'k', { sync: false }).tryAcquire(), /needs the lock module 0\.7\.0 or later/);
});

it('names the module needed when the server does not know LOCK.SYNC, and releases the grants', async () => {
  const { client, sent } = scripted((args) => (args[0] === 'LOCK.SYNC' ? new Error("ERR unknown command 'LOCK.SYNC', with args beginning with: ") : master()(args)));
  await Promise.all(['a', 'b'].map((name) =>
    assert.rejects(createLock(client, name).tryAcquire(), /"ERR unknown command 'LOCK.SYNC'.*needs the lock module 0\.7\.0 or later/)));
  assert.deepEqual(names(sent).slice(0, 3), ['LOCK.ACQUIRE NOSYNC', 'LOCK.ACQUIRE NOSYNC', 'LOCK.SYNC']);
  assert.deepEqual(sent.slice(3).map(([command, key]) => `${command} ${key}`).sort(), ['LOCK.RELEASE a', 'LOCK.RELEASE b']);
});

it('waits for a held reply up to the sync timeout and the margin, then closes its connection', async () => {
  const held = (ms) => (args) => (args[0] === 'LOCK.ACQUIRE' ? new Promise((r) => setTimeout(() => r(1), ms)) : master()(args));
  const slow = scripted(held(150));
  assert.ok(await createLock(slow.client, 'k', { sync: { timeout: 100 }, timeoutMargin: 100 }).tryAcquire(), 'within 200 ms');
  const lost = scripted(held(60_000));
  const started = Date.now();
  await assert.rejects(createLock(lost.client, 'k', { sync: { timeout: 100 }, timeoutMargin: 100 }).tryAcquire(), LostReply);
  const took = Date.now() - started;
  assert.ok(took >= 190 && took < 2_000, `given up on after ${took} ms`);
  assert.equal(lost.counts.closed, 1, 'its connection closed: the server releases a grant it held for it');
});

it('with a fixed count sends NOSYNC and its WAIT behind it, and releases a grant too few acknowledged', async () => {
  const fixed = scripted(master({ acked: 2 }));
  assert.ok(await createLock(fixed.client, 'k', { sync: { replicas: 2, timeout: 300 } }).tryAcquire());
  assert.deepEqual(names(fixed.sent), ['LOCK.ACQUIRE NOSYNC', 'WAIT 2']);
  assert.equal(fixed.sent[1][2], '300');
  const short = scripted(master({ acked: 1 }));
  await assert.rejects(createLock(short.client, 'k', { sync: { replicas: 2 } }).tryAcquire(), (error) =>
    error instanceof NotReplicatedError && error.acked === 1 && error.wanted === 2 && !error.released);
  assert.deepEqual(names(short.sent), ['LOCK.ACQUIRE NOSYNC', 'WAIT 2', `LOCK.RELEASE ${short.sent[0][2]}`]);
});

it('with aof waits for the AOF behind a SYNC write; with sync off sends the write alone with NOSYNC', async () => {
  const aof = scripted(master({ local: 1 }));
  assert.ok(await createLock(aof.client, 'k', { sync: { aof: true } }).tryAcquire());
  assert.deepEqual(names(aof.sent), ['LOCK.ACQUIRE SYNC', 'WAITAOF 0']);
  const unsynced = scripted(master({ local: 0 }));
  await assert.rejects(createLock(unsynced.client, 'k', { sync: { aof: true } }).tryAcquire(), /did not fsync its AOF/);
  assert.equal(unsynced.sent.at(-1)[0], 'LOCK.RELEASE');
  const off = scripted(master());
  assert.ok(await createLock(off.client, 'k', { sync: false }).tryAcquire());
  assert.deepEqual(names(off.sent), ['LOCK.ACQUIRE NOSYNC']);
});

it('releases in the background a grant refused by a master that became a replica, and tries again as a new owner', async () => {
  const demoted = 'NOREPLICAS this server is no longer a master; the grant was not released here: the new master may have it, release it there';
  let refusals = 1;
  const { client, sent } = scripted((args) =>
    (args[0] === 'LOCK.ACQUIRE' && refusals-- > 0 ? new Error(demoted) : master()(args)));
  await assert.rejects(createLock(client, 'k').tryAcquire(), (error) =>
    error instanceof NotReplicatedError && !error.released && error.reason === 'this server is no longer a master');
  await until(() => sent.at(-1)[0] === 'LOCK.RELEASE');
  assert.equal(sent.at(-1)[2], sent[0][2], 'released as its owner');
  sent.length = 0;
  refusals = 1;
  const holding = await createLock(client, 'k').acquire({ wait: 1_000 });
  assert.ok(holding);
  const acquires = sent.filter(([command]) => command === 'LOCK.ACQUIRE');
  assert.equal(acquires.length, 2);
  assert.notEqual(acquires[1][2], acquires[0][2], 'tried again as a new owner');
  assert.equal(holding.owner, acquires[1][2]);
  await until(() => sent.some(([command, , owner]) => command === 'LOCK.RELEASE' && owner === acquires[0][2]));
  sent.length = 0;
  refusals = 1;
  await assert.rejects(createLock(client, 'f', { owner: 'fixed' }).acquire({ wait: 1_000 }), /no longer a master/);
  assert.equal(sent.filter(([command]) => command === 'LOCK.ACQUIRE').length, 1, 'a fixed owner is not asked for again');
});

async function until(condition) {
  for (let tries = 0; !condition(); tries++) {
    assert.ok(tries < 100, 'timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}
