/**
 * How a write on a lock reaches the master, and its replicas before it counts.
 *
 * - Sync off: a grant without waiting and a renewal go over the program's own connection.
 * - A grant without waiting, or a renewal, synced: one pipeline on a connection of the sync
 *   pool — `INFO replication` (when the count is learned), the write, `WAIT k` — where `k` is
 *   the count learned so far; the `INFO` reply is learned, and if it raised the count past `k`,
 *   one more `WAIT` on the same connection (a `WAIT` covers every earlier write on its
 *   connection). One round trip, and the count as fresh as the write. Synced writes made in the
 *   same tick to the same master share that pipeline: one `INFO`, the writes, one `WAIT`.
 * - A wait in the server: on a connection of the wait pool, the acquire with `INFO` and `WAIT`
 *   pipelined behind it — the server runs them only once the acquire is answered, so the count
 *   is read at the grant, not before the wait.
 */
import { Connection } from './connection.js';
import { SyncOptions } from './sync.js';
/** The writes of one lock (or set of locks), routed by `key`. */
export declare class Writes {
    readonly connection: Connection;
    private readonly key;
    private readonly margin;
    private readonly sync;
    /** Writes wait for replicas. */
    private readonly synced;
    /** Which synced writes of other locks may share a pipeline with these: the same sync. */
    private readonly group;
    /** `margin`: how long after a reply should have come it is given up on, ms. */
    constructor(connection: Connection, key: string, sync: SyncOptions | false | undefined, margin: number);
    /** The sync timeout, ms. */
    private get syncMs();
    /**
     * A grant without waiting — an acquire, or a holder's re-entry or change of mode: the reply
     * (null when busy). A grant too few replicas had in time is given back with `release`, if
     * given (else it stays made on the master), and rejected with {@link NotReplicatedError}, as
     * is one that found no sync connection free within the sync timeout (then nothing was sent).
     */
    grant(command: string[], release?: string[]): Promise<unknown>;
    /**
     * An acquire that waits in the server up to `waitMs` (0: no limit), on a connection of the
     * wait pool queued for until `deadline` (ms since the epoch; `undefined`: no limit), else
     * rejected with {@link Exhausted}. A grant too few replicas had is released with `release`
     * and rejected with {@link NotReplicatedError}.
     */
    wait(command: string[], waitMs: number, deadline: number | undefined, release: string[]): Promise<{
        reply: unknown;
        answered: number;
    }>;
    /** A renewal: the reply. One `applied` but too few replicas had in time — or that found no
     * sync connection free within the sync timeout — rejects with {@link NotReplicatedError}. */
    renew(command: string[], applied: (reply: unknown) => boolean): Promise<unknown>;
    /** The reply of a write that reached enough replicas; otherwise the grant given back with
     * `release` (if any) and the rejection. */
    private counted;
    /**
     * A write that does not wait, synced, in the pipeline of the synced writes made in this tick
     * to the same master — or on its own after a redirection (`MOVED` / `ASK`). Rejects with its
     * error reply; with {@link NotReplicatedError} when no connection came free within the sync
     * timeout (nothing was sent).
     */
    private syncedWrite;
    /**
     * `commands` on a connection of the `kind` pool to the master serving `key`, with the sync
     * around them (for writes that do not wait, `INFO` before them; for a wait, behind it), and
     * one more `WAIT` if the count grew: each command's outcome. A lone command's error reply
     * rejects (so that a redirection is followed); with several, each is its outcome's `reply`.
     * Rejects with {@link LostReply} or {@link Exhausted} too.
     */
    private exchange;
    /** How many replicas the writes reached, of how many wanted: from the `INFO` and `WAIT`
     * replies, and — when something was written — after one more `WAIT` if the count grew past
     * the `known` one waited for. */
    private replicated;
}
