/**
 * How a write on a lock reaches the master, and its replicas before it counts.
 *
 * - Sync off: a grant without waiting and a renewal go over the program's own connection (one
 *   tied to a session: over a connection of the sync pool, with no sync behind it).
 * - A grant without waiting, or a renewal, synced: one pipeline on a connection of the sync
 *   pool, never `MULTI` — the write, `LOCK.INSYNC`, `WAIT h`, `LOCK.INSYNC` — where `h` is the
 *   members the master's last `LOCK.INSYNC` showed; if the write does not count because `h`
 *   was too small, one more `WAIT` for every member and `LOCK.INSYNC` on the same connection (a
 *   `WAIT` covers every earlier write on its connection), within the sync timeout. Synced
 *   writes made in the same tick to the same master share that pipeline: the writes, then one
 *   `LOCK.INSYNC`, `WAIT`, `LOCK.INSYNC`.
 * - A wait in the server: on a connection of the wait pool, the acquire with the same tail
 *   pipelined behind it — the server runs it only once the acquire is answered.
 * - A fixed replica count (`sync.replicas`): `WAIT n` alone after the writes.
 * - A write whose command ends in `SESSION` is tied to the client's session on the master it
 *   is sent to (each master has its own, and a redirected write goes to another): the
 *   connection lent to it is bound to that session (`LOCK.SESSION USE id`, first in the same
 *   pipeline, when it is not yet: {@link Own.pipeline}). Tied and untied writes made in the
 *   same tick go in pipelines of their own. `ERR no such session` tells that session's keeper
 *   it was replaced.
 */
import { Connection } from './connection.js';
import { Session } from './session.js';
import { SyncOptions } from './sync.js';
/** A write's reply that counts (an error reply rejects), when it came (ms since the epoch), and
 * the session it tied the holding to, if it asked for one. */
export interface Written {
    reply: unknown;
    answered: number;
    tie?: Session;
}
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
    grant(command: string[], release?: string[]): Promise<Written>;
    /**
     * An acquire that waits in the server up to `waitMs` (0: no limit), on a connection of the
     * wait pool queued for until `deadline` (ms since the epoch; `undefined`: no limit), else
     * rejected with {@link Exhausted}. A grant too few replicas had is released with `release`
     * and rejected with {@link NotReplicatedError}.
     */
    wait(command: string[], waitMs: number, deadline: number | undefined, release: string[]): Promise<Written>;
    /** A renewal: the reply. One `applied` but too few replicas had in time — or that found no
     * sync connection free within the sync timeout — rejects with {@link NotReplicatedError}. */
    renew(command: string[], applied: (reply: unknown) => boolean): Promise<Written>;
    /** A write over the program's own connection, not synced, tied to no session. */
    private sent;
    /** The write that counts (or was not `applied`); otherwise the grant given back with
     * `release` (if any) and the rejection. */
    private counted;
    /**
     * A write that does not wait, synced, in the pipeline of the synced writes made in this tick
     * to the same master and tied alike (to the session, or not) — or on its own after a
     * redirection (`MOVED` / `ASK`). Rejects with its error reply; with {@link
     * NotReplicatedError} when no connection came free within the sync timeout (nothing was sent).
     */
    private syncedWrite;
    /**
     * `commands` on a connection of the `kind` pool to the master serving `key`, with the sync
     * behind them: each command's outcome. Commands ending in `SESSION` (all of them, or none)
     * are tied to the client's session on that master (opened first if need be; their outcomes'
     * `tie`), on a connection bound to it. A lone command's error reply rejects (so that a
     * redirection is followed); with several, each is its outcome's `reply`. Rejects with {@link
     * LostReply} or {@link Exhausted} too, and with why a session could not be opened.
     */
    private exchange;
    /**
     * Why writes do not count, from the `replies` to their sync — `WAIT n` for a fixed count, else
     * `LOCK.INSYNC`, `WAIT hint`, `LOCK.INSYNC` — or `undefined` when they count. When something
     * was `written` and one more `WAIT` for every in-sync member may yet make it count, that
     * `WAIT` and a `LOCK.INSYNC` follow on the same connection if there is time left before
     * `syncEnd` (ms since the epoch), and their replies decide instead.
     */
    private unsynced;
}
