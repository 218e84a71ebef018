/**
 * What an election's observers see: who leads (`LOCK.LEADER`), and every change of it
 * (`LOCK.OBSERVE ... LAST epoch value BLOCK ms`, a vacancy always reported before the next
 * leader), as {@link LeaderState}s. The campaign, the term and its renewal are the locks' own
 * (index.ts): a campaign is an acquire with a value.
 */
import { LostReply, PoolClosed } from './connection.js';
/** Nobody leads. */
export const NOBODY = Object.freeze({ leader: null, epoch: 0, value: '', ttl: -2 });
/** How long one `LOCK.OBSERVE` blocks in the server, ms: an observer asks again after that
 * (nothing changed), and gives up on a reply `timeoutMargin` later (a connection gone silent:
 * it asks again on a new one). */
const OBSERVE_BLOCK_MS = 10_000;
/** The longest pause before asking again after a lost reply, ms. */
const MAX_BACKOFF_MS = 1_000;
/**
 * The state a `LOCK.LEADER` or `LOCK.OBSERVE` reply tells: null (`LOCK.LEADER`'s) is nobody; a
 * map — a flat array of field–value pairs in RESP2, a `Map` or an object in RESP3 — a state.
 */
export function stateOf(reply) {
    if (reply === null || reply === undefined)
        return { ...NOBODY };
    let entries;
    if (Array.isArray(reply)) {
        entries = [];
        for (let at = 0; at + 1 < reply.length; at += 2)
            entries.push([reply[at], reply[at + 1]]);
    }
    else if (reply instanceof Map) {
        entries = [...reply.entries()];
    }
    else if (typeof reply === 'object') {
        entries = Object.entries(reply);
    }
    else {
        throw new Error(`not a leadership: ${String(reply)}`);
    }
    const fields = new Map(entries.map(([field, value]) => [String(field), value]));
    const leader = fields.get('leader');
    const value = fields.get('value');
    return {
        leader: leader === null || leader === undefined ? null : String(leader),
        epoch: Number(fields.get('epoch') ?? 0),
        value: value === null || value === undefined ? '' : String(value),
        ttl: Number(fields.get('ttl') ?? -2),
    };
}
/**
 * Every state of the election `key` (prefixed): the current one first (`LOCK.OBSERVE key`), then
 * each that differs from the one before (`LOCK.OBSERVE key LAST epoch value BLOCK ms`, asked
 * again when nothing changed), on a connection of the wait pool lent for each call. A lost reply
 * (a dropped connection, or none within the block and `margin`) is asked again with the same
 * `LAST`, so no change is missed (whole terms may be, between two calls — never a vacancy).
 * Ends when `signal` aborts, or when the pool is closed while it waits for a connection;
 * rejects with any other error (an error reply, a failed connect).
 */
export async function* observe(connection, key, margin, signal) {
    let last;
    let backoff = 0;
    while (!signal?.aborted) {
        const command = last === undefined
            ? ['LOCK.OBSERVE', key]
            : ['LOCK.OBSERVE', key, 'LAST', String(last.epoch), last.value, 'BLOCK', String(OBSERVE_BLOCK_MS)];
        let reply;
        try {
            reply = await connection.lend('wait', key, undefined, async (own) => {
                const { replies: [replied] } = await own.pipeline([command], OBSERVE_BLOCK_MS + margin, signal);
                // Thrown inside, so that `lend` follows a cluster's redirections.
                if (replied instanceof Error)
                    throw replied;
                return replied;
            });
        }
        catch (error) {
            if (signal?.aborted || error instanceof PoolClosed)
                return;
            if (!(error instanceof LostReply))
                throw error;
            await sleep(backoff);
            backoff = Math.min(Math.max(backoff * 2, 10), MAX_BACKOFF_MS);
            continue;
        }
        backoff = 0;
        // Null: nothing changed within the block.
        if (reply === null || reply === undefined)
            continue;
        last = stateOf(reply);
        yield last;
    }
}
function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
