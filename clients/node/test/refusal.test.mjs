// What the package makes of a lock write's replies (no server needed): the server's
// `NOREPLICAS` refusal as a NotReplicatedError, a module without synced writes named, and the
// client's own `WAIT` / `WAITAOF` behind a write with a fixed replica count.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { NotReplicatedError, isDemoted, refusalOf, shortfall, waitCommand } from '../dist/sync.js';

describe("the server's refusal", () => {
  it('of a grant is a NotReplicatedError that says what was missing, and that the server released it', () => {
    const error = refusalOf(new Error('NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the grant was released'), 'grant');
    assert.ok(error instanceof NotReplicatedError);
    assert.deepEqual([error.write, error.reason, error.released, error.acked, error.wanted],
      ['grant', 'not every in-sync replica acknowledged within 1000 ms', true, 0, 0]);
    assert.equal(error.message, 'the grant does not count: not every in-sync replica acknowledged within 1000 ms; the server released it');
  });

  it('of a renewal releases nothing', () => {
    const error = refusalOf(new Error('NOREPLICAS the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2); the renewal does not count: the lease before it does'), 'renewal');
    assert.ok(error instanceof NotReplicatedError);
    assert.deepEqual([error.write, error.reason, error.released],
      ['renewal', 'the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)', false]);
    assert.equal(error.message, 'the renewal does not count: the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)');
  });

  it('by a server no longer a master is one too, that released nothing: the new master may have the grant', () => {
    const error = refusalOf(new Error('NOREPLICAS this server is no longer a master; the grant was not released here: the new master may have it, release it there'), 'grant');
    assert.ok(error instanceof NotReplicatedError);
    assert.deepEqual([error.reason, error.released, isDemoted(error)], ['this server is no longer a master', false, true]);
    assert.equal(isDemoted(refusalOf(new Error('NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the grant was released'), 'grant')), false);
  });

  it("of SYNC by a module older than 0.7.0 (a syntax error) names the module needed", () => {
    const reply = new Error('ERR syntax error');
    const error = refusalOf(reply, 'grant');
    assert.ok(!(error instanceof NotReplicatedError));
    assert.match(error.message, /needs the lock module 0\.7\.0 or later/);
    assert.equal(error.cause, reply);
  });

  it('leaves any other error as it is', () => {
    const reply = new Error('WRONGTYPE Operation against a key holding the wrong kind of value');
    assert.equal(refusalOf(reply, 'grant'), reply);
  });
});

describe("the client's own WAIT, with a fixed replica count", () => {
  it('is WAIT n t, or WAITAOF 1 n t, never without a limit', () => {
    assert.deepEqual(waitCommand({}, 2, 1_000), ['WAIT', '2', '1000']);
    assert.deepEqual(waitCommand({ aof: true }, 2, 0.2), ['WAITAOF', '1', '2', '1']);
  });

  it('counts when the replicas acknowledged', () => {
    assert.equal(shortfall({}, 2, 2, 1_000, 'grant'), undefined);
    assert.equal(shortfall({ aof: true }, 1, [1, 1], 1_000, 'renewal'), undefined);
  });

  it('does not count with fewer, nor in AOF mode when the master did not fsync', () => {
    const fewer = shortfall({}, 2, 1, 1_000, 'grant');
    assert.ok(fewer instanceof NotReplicatedError);
    assert.deepEqual([fewer.acked, fewer.wanted, fewer.released], [1, 2, false]);
    assert.equal(fewer.message, 'the grant does not count: 1 of the 2 replicas wanted acknowledged within 1000 ms');
    const local = shortfall({ aof: true }, 1, [0, 1], 1_000, 'renewal');
    assert.equal(local.reason, 'the master did not fsync its AOF within 1000 ms');
    assert.equal(local.write, 'renewal');
  });

  it("passes the WAIT's error reply on", () => {
    const reply = new Error('ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.');
    assert.equal(shortfall({ aof: true }, 0, reply, 1_000, 'grant'), reply);
  });
});
