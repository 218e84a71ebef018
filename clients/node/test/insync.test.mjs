// The decision whether synced writes count, from the master's `LOCK.INSYNC` replies around the
// `WAIT` (no server needed): the set's size against the required, every member's
// acknowledgement against the writes' offset, a master seen replaced, and when one more `WAIT`
// may still help.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { NotReplicatedError, Seen, acksOf, inSyncOf, shortfall } from '../dist/sync.js';

const ZEROS = '0'.repeat(40);

/** A `LOCK.INSYNC` reply's fields. */
function inSync({ offset = 100, acked = 100, members = 1, required = 1, replid = 'a', replid2 = ZEROS } = {}) {
  return { offset, acked, members, required, replid, replid2 };
}

/** A round trip after writes the first reply's offset (100) covers. */
function trip(after, { hint = 1, waited = 1, local = true } = {}) {
  return { before: inSync(), hint, waited: { replicas: waited, local }, after: inSync(after) };
}

describe('a synced write', () => {
  it('counts when every member acknowledged its offset and the set is large enough', () => {
    assert.equal(shortfall(trip({ offset: 130, acked: 100 }), false, 1_000), undefined);
    assert.equal(shortfall(trip({ members: 2, acked: 120 }), false, 1_000), undefined);
  });

  it('counts on a lone server: no members, none required', () => {
    assert.equal(shortfall(trip({ members: 0, required: 0 }, { hint: 0, waited: 0 }), false, 1_000), undefined);
  });

  it('does not count with fewer members than required, however many acknowledged', () => {
    const short = shortfall(trip({ members: 1, required: 2 }, { waited: 2 }), false, 1_000);
    assert.equal(short.reason, 'the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)');
    assert.deepEqual([short.acked, short.wanted, short.again], [2, 2, false]);
    const none = shortfall(trip({ members: 0, required: 1 }, { hint: 0, waited: 1 }), false, 1_000);
    assert.match(none.reason, /has 0 in-sync replicas, fewer than lock.min-insync-replicas \(1\)/);
  });

  it('does not count until every member acknowledged its offset', () => {
    const short = shortfall(trip({ members: 2, acked: 99 }, { hint: 2, waited: 1 }), false, 750);
    assert.equal(short.reason, 'not every in-sync replica acknowledged within 750 ms');
    assert.deepEqual([short.acked, short.wanted], [1, 2]);
  });

  it('waits once more when the WAIT stopped before every member could acknowledge', () => {
    const hintTooSmall = shortfall(trip({ members: 2, acked: 99 }, { hint: 1, waited: 2 }), false, 1_000);
    assert.equal(hintTooSmall.again, true, 'waited for fewer than the members');
    const countedFewer = shortfall(trip({ members: 2, acked: 99 }, { hint: 2, waited: 1 }), false, 1_000);
    assert.equal(countedFewer.again, true, 'counted fewer than the members');
    const waitedForAll = shortfall(trip({ members: 2, acked: 99 }, { hint: 2, waited: 2 }), false, 1_000);
    assert.equal(waitedForAll.again, false, 'all counted, after waiting for all: no use');
  });

  it('never counts on a master this client saw replaced, nor across a change of master', () => {
    const replaced = shortfall(trip({}), true, 1_000);
    assert.equal(replaced.reason, 'this master was replaced by a failover: its writes do not count');
    assert.equal(replaced.again, false);
    assert.ok(shortfall(trip({ replid: 'b' }), false, 1_000), 'the second reply from another master');
  });

  it('in AOF mode, also needs the master to have fsynced', () => {
    const short = shortfall(trip({}, { local: false }), false, 1_000);
    assert.equal(short.reason, 'the master did not fsync its AOF within 1000 ms');
    assert.deepEqual(acksOf({ aof: true }, [0, 2]), { replicas: 2, local: false });
    assert.deepEqual(acksOf({ aof: true }, [1, 2]), { replicas: 2, local: true });
    assert.deepEqual(acksOf({}, 3), { replicas: 3, local: true });
  });

  it('is refused with the reason', () => {
    const error = new NotReplicatedError(1, 2, 'renewal', 'not every in-sync replica acknowledged within 1000 ms');
    assert.equal(error.message, 'the renewal does not count: not every in-sync replica acknowledged within 1000 ms');
    assert.equal(error.reason, 'not every in-sync replica acknowledged within 1000 ms');
  });
});

describe('a LOCK.INSYNC reply', () => {
  it('gives its fields; an error reply or another shape is an error', () => {
    assert.deepEqual(inSyncOf([7, 5, 2, 1, 'a', ZEROS]), inSync({ offset: 7, acked: 5, members: 2, required: 1 }));
    const refused = new Error('ERR LOCK.INSYNC is answered by the master; this server is a replica');
    assert.equal(inSyncOf(refused), refused);
    assert.ok(inSyncOf('OK') instanceof Error);
    assert.ok(inSyncOf([1, 2, 3]) instanceof Error);
  });

  it('is noted per master: its members as the hint, its previous ID as replaced', () => {
    const seen = new Seen();
    assert.equal(seen.hint('m:1'), 0, 'none seen yet');
    assert.equal(seen.heard('m:1', inSync({ members: 2, replid: 'a' })), false);
    assert.equal(seen.heard('m:1', inSync({ members: 1, replid: 'a' })), false);
    assert.equal(seen.hint('m:1'), 1, 'lowered with the set');
    assert.equal(seen.heard('m:2', inSync({ members: 1, replid: 'b', replid2: 'a' })), false, 'promoted');
    assert.equal(seen.heard('m:1', inSync({ members: 1, replid: 'a' })), true, 'the old master, still taking writes');
    assert.deepEqual([seen.hint('m:1'), seen.hint('m:2')], [1, 1]);
  });
});
