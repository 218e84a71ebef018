/**
 * What an election's observers see: who leads (`LOCK.LEADER`), and every change of it
 * (`LOCK.OBSERVE ... LAST epoch value BLOCK ms`, a vacancy always reported before the next
 * leader), as {@link LeaderState}s. The campaign, the term and its renewal are the locks' own
 * (index.ts): a campaign is an acquire with a value.
 */
import { Connection } from './connection.js';
/** Who leads an election, as the server told it. Nobody leads: `leader` null, `epoch` 0,
 * `value` `''`, `ttl` -2. */
export interface LeaderState {
    /** The candidate that leads, or null when nobody does. */
    leader: string | null;
    /** The term's epoch, its fencing token (a JS `number`, below 2^53); 0 when nobody leads. */
    epoch: number;
    /** What the leader proclaims (`''` when nobody leads, or for a plain lock's holder). */
    value: string;
    /** The term's lease left, ms; -1 if someone made the key persistent, -2 when nobody leads. */
    ttl: number;
}
/** How an observer stops. */
export interface ObserveOptions {
    /** Ends the observation: the iteration ends (no error), a blocked `LOCK.OBSERVE` is given up
     * on and its connection closed. */
    signal?: AbortSignal;
}
/** Nobody leads. */
export declare const NOBODY: LeaderState;
/**
 * The state a `LOCK.LEADER` or `LOCK.OBSERVE` reply tells: null (`LOCK.LEADER`'s) is nobody; a
 * map — a flat array of field–value pairs in RESP2, a `Map` or an object in RESP3 — a state.
 */
export declare function stateOf(reply: unknown): LeaderState;
/**
 * Every state of the election `key` (prefixed): the current one first (`LOCK.OBSERVE key`), then
 * each that differs from the one before (`LOCK.OBSERVE key LAST epoch value BLOCK ms`, asked
 * again when nothing changed), on a connection of the wait pool lent for each call. A lost reply
 * (a dropped connection, or none within the block and `margin`) is asked again with the same
 * `LAST`, so no change is missed (whole terms may be, between two calls — never a vacancy).
 * Ends when `signal` aborts, or when the pool is closed while it waits for a connection;
 * rejects with any other error (an error reply, a failed connect).
 */
export declare function observe(connection: Connection, key: string, margin: number, signal?: AbortSignal): AsyncGenerator<LeaderState, void, undefined>;
