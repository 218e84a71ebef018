// The replica count a client learns from `INFO replication` (no server needed): the most any
// master had, never lowered, and nothing counted for a master the client saw replaced (an old
// master still taking writes after a failover).

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { Learned } from '../dist/sync.js';

function info(replid, online, replid2 = '0'.repeat(40)) {
  const replicas = Array.from({ length: online }, (_, i) => `slave${i}:ip=127.0.0.1,port=${i},state=online,offset=1,lag=0`);
  return ['# Replication', 'role:master', ...replicas, `master_replid:${replid}`, `master_replid2:${replid2}`].join('\r\n');
}

it('a master seen replaced counts no write', () => {
  const learned = new Learned();
  assert.equal(learned.heard(info('a', 2)), 2);
  assert.equal(learned.heard(info('a', 1)), 2, 'the same master lost one');
  assert.equal(learned.heard(info('b', 1, 'a')), 2, 'promoted: as many as the most before');
  assert.equal(learned.heard(info('a', 1)), undefined, 'the old master, with a replica that has not moved yet');
  assert.equal(learned.heard(info('b', 2)), 2);
});
