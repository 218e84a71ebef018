// The synced round trip as the client sends it, against a scripted stand-in for ioredis (no
// server needed): the writes, `LOCK.INSYNC`, `WAIT h`, `LOCK.INSYNC`; one more `WAIT` for every
// member when the hint was too small; writes of one tick behind one sync; a refusal with its
// reason and the grant given back; a fixed count and no sync at all as opt-outs. Sessions are
// off here (the stand-in does not answer LOCK.SESSION; session.test.mjs has them on a server).

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { NotReplicatedError, createLock, setSessionOptions } from '../dist/index.js';

const ZEROS = '0'.repeat(40);

/** An ioredis-like client (and its duplicates) whose commands `answer` answers, all logged in
 * `sent`; an `Error` answer is an error reply. */
function scripted(answer) {
  const sent = [];
  const make = () => ({
    options: {},
    status: 'ready',
    call: async (...args) => {
      sent.push(args);
      const reply = answer(args);
      if (reply instanceof Error) throw reply;
      return reply;
    },
    duplicate: () => make(),
    connect: async () => {},
    disconnect: () => {},
    on: () => {},
  });
  const client = make();
  setSessionOptions(client, { enabled: false });
  return { client, sent };
}

/** A master whose set has `members` of `required` members; each acknowledges what it is sent
 * once a `WAIT` asks for at least `ackedFrom` replicas. */
function master({ members = 2, required = 1, ackedFrom = members } = {}) {
  let offset = 0;
  let acked = 0;
  return (args) => {
    switch (args[0]) {
      case 'LOCK.ACQUIRE':
      case 'LOCK.RENEW':
        offset += 10;
        return 1;
      case 'LOCK.RELEASE':
        return 1;
      case 'WAIT':
        if (Number(args[1]) >= ackedFrom) acked = offset;
        return acked === offset ? members : 0;
      case 'LOCK.INSYNC':
        return [offset, acked, members, required, 'a', ZEROS];
      default:
        return new Error(`ERR unknown command '${args[0]}'`);
    }
  };
}

const names = (sent) => sent.map((args) => (args[0] === 'WAIT' ? `WAIT ${args[1]}` : args[0]));

it('asks the master, waits for its hint, and once more for every member when the hint was too small', async () => {
  const { client, sent } = scripted(master({ members: 2 }));
  const lock = createLock(client, 'k', { ttl: 10_000 });
  const holding = await lock.tryAcquire();
  assert.ok(holding);
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE', 'LOCK.INSYNC', 'WAIT 0', 'LOCK.INSYNC', 'WAIT 2', 'LOCK.INSYNC']);
  sent.length = 0;
  assert.equal(await holding.renew(), true);
  assert.deepEqual(names(sent), ['LOCK.RENEW', 'LOCK.INSYNC', 'WAIT 2', 'LOCK.INSYNC'], 'the hint learned: one round trip');
});

it('syncs a wait in the server behind the blocking acquire', async () => {
  const { client, sent } = scripted(master({ members: 1 }));
  assert.ok(await createLock(client, 'k').acquire({ wait: 1_000 }));
  assert.deepEqual(sent[0].slice(-2), ['WAIT', '1000']);
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE', 'LOCK.INSYNC', 'WAIT 0', 'LOCK.INSYNC', 'WAIT 1', 'LOCK.INSYNC']);
});

it('shares one sync among the writes of one tick', async () => {
  const { client, sent } = scripted(master({ members: 0, required: 0 }));
  const granted = await Promise.all(['a', 'b', 'c'].map((name) => createLock(client, name).tryAcquire()));
  assert.ok(granted.every(Boolean));
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE', 'LOCK.ACQUIRE', 'LOCK.ACQUIRE', 'LOCK.INSYNC', 'WAIT 0', 'LOCK.INSYNC']);
});

it('refuses with the reason, and gives the grant back', async () => {
  const { client, sent } = scripted(master({ members: 1, required: 2 }));
  await assert.rejects(createLock(client, 'k').tryAcquire(), (error) =>
    error instanceof NotReplicatedError && error.write === 'grant' && error.wanted === 2 &&
    error.message === 'the grant does not count: the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)');
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE', 'LOCK.INSYNC', 'WAIT 0', 'LOCK.INSYNC', 'LOCK.RELEASE'], 'no second WAIT: it cannot help');
});

it('refuses when a member does not acknowledge within the sync timeout', async () => {
  const { client, sent } = scripted(master({ members: 2, ackedFrom: 3 }));
  await assert.rejects(createLock(client, 'k', { sync: { timeout: 50 } }).tryAcquire(), (error) =>
    error instanceof NotReplicatedError && error.reason === 'not every in-sync replica acknowledged within 50 ms');
  assert.deepEqual(names(sent), ['LOCK.ACQUIRE', 'LOCK.INSYNC', 'WAIT 0', 'LOCK.INSYNC', 'WAIT 2', 'LOCK.INSYNC', 'LOCK.RELEASE']);
});

it('passes an error reply of LOCK.INSYNC on, and gives the grant back', async () => {
  const { client, sent } = scripted((args) =>
    args[0] === 'LOCK.INSYNC' ? new Error('ERR LOCK.INSYNC is answered by the master; this server is a replica') : master()(args));
  await assert.rejects(createLock(client, 'k').tryAcquire(), /this server is a replica/);
  assert.equal(sent.at(-1)[0], 'LOCK.RELEASE');
});

it('with a fixed count waits for it alone; with sync off sends the write alone', async () => {
  const fixed = scripted(master({ members: 2 }));
  assert.ok(await createLock(fixed.client, 'k', { sync: { replicas: 2, timeout: 300 } }).tryAcquire());
  assert.deepEqual(names(fixed.sent), ['LOCK.ACQUIRE', 'WAIT 2']);
  const timeout = Number(fixed.sent[1][2]);
  assert.ok(timeout > 0 && timeout <= 300, `WAIT waits what is left of the 300 ms sync timeout, not ${timeout}`);
  const off = scripted(master());
  assert.ok(await createLock(off.client, 'k', { sync: false }).tryAcquire());
  assert.deepEqual(names(off.sent), ['LOCK.ACQUIRE']);
});
