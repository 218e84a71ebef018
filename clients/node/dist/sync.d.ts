/**
 * Writes synced to replicas before they count. Replication is asynchronous: without this, a
 * master can acknowledge a grant (or a renewal) and fail before any replica has it, and the
 * promoted replica grants the same lock again (or ends the lease earlier than the holder
 * believes).
 *
 * Which replicas must have a write is the master's to say: its module keeps the **in-sync
 * replica set** (the replicas that have every write it counted; a replica outside it makes
 * itself unpromotable), and `LOCK.INSYNC` reports it. A synced write is followed, on the
 * connection that carried it, by `LOCK.INSYNC` (its offset covers the write), `WAIT h timeout`
 * (or `WAITAOF 1 h timeout`) and `LOCK.INSYNC` again: the write counts when the second reply
 * says the set has the members the master requires and every member acknowledged the first
 * reply's offset ({@link shortfall}). `h` is only a hint for how long `WAIT` waits: the members
 * the last reply of that master showed ({@link Seen}). When it was too small, one more
 * `WAIT` for every member, and `LOCK.INSYNC`, follow within the sync timeout.
 */
/** How grants and renewals reach the replicas before they count. */
export interface SyncOptions {
    /**
     * A fixed number of replicas to wait for (`WAIT n`) instead of the master's in-sync replica
     * set; 0: off.
     *
     * Fewer than the master has is not safe: a failover may promote a replica that did not
     * acknowledge, which then grants the lock again. A ten-minute `make chaos` run (888e1d5) found
     * 16 double grants among grants synced to one of two replicas, all after `SENTINEL
     * FAILOVER` (later runs: docs/guarantees.md).
     */
    replicas?: number;
    /** How long to wait for them, ms (default 1 000: a replica that is up acknowledges within a
     * round trip plus its lag; a second runs out only when one is down or far behind). It also
     * bounds the wait for a connection of the sync pool. */
    timeout?: number;
    /** `WAITAOF 1 n` instead of `WAIT n`: on disk on the master and the replicas (Redis 7.2+,
     * Valkey 8+, with `appendonly yes`). */
    aof?: boolean;
}
/** A grant or renewal was made on the master but does not count: `reason` says why — the
 * in-sync set was smaller than `lock.min-insync-replicas`, not every member acknowledged it
 * within the sync timeout, the master was replaced by a failover — or no connection came free
 * for it within the sync timeout (nothing was sent). An acquire's grant, or a re-entry's new
 * hold, is released (owner-checked); a downgrade or upgrade stays made on the master while the
 * holding keeps its mode, token and lease; a renewal leaves the holding's lease the last synced
 * one. Not "busy": the lock was free, the replicas were not there. */
export declare class NotReplicatedError extends Error {
    readonly acked: number;
    readonly wanted: number;
    readonly write: 'grant' | 'renewal';
    readonly reason: string;
    name: string;
    /** `acked`: replicas the `WAIT` counted (in the in-sync set or not); `wanted`: replicas that
     * had to have it (the in-sync set's members, at least `lock.min-insync-replicas`; or the
     * fixed count); `write`: what was not synced (`'grant'` for an acquire, a re-entry, a
     * downgrade and an upgrade); `reason`: why it does not count. */
    constructor(acked: number, wanted: number, write?: 'grant' | 'renewal', reason?: string);
}
export declare const DEFAULT_SYNC_TIMEOUT = 1000;
/** `LOCK.INSYNC`: the master's in-sync replica set ({@link InSync}). */
export declare const INSYNC: string[];
/** A `LOCK.INSYNC` reply: the master's in-sync replica set as it answered. */
export interface InSync {
    /** The master's replication offset: it covers every write sent before on the connection. */
    offset: number;
    /** The lowest offset every member acknowledged (`offset` when the set is empty, 0 while a
     * member is not connected). */
    acked: number;
    /** How many replicas are in the set. */
    members: number;
    /** How many the master requires (`lock.min-insync-replicas`; 0 on a server never part of a
     * replication group). */
    required: number;
    /** The master's replication ID (`master_replid`). */
    replid: string;
    /** The ID of the master it took over from (`master_replid2`; forty `0`s when none). */
    replid2: string;
}
/** The fields of a `LOCK.INSYNC` reply; an error reply as it is, and an error for a reply
 * that is not an array of 6. */
export declare function inSyncOf(reply: unknown): InSync | Error;
/** `WAIT n timeout` or `WAITAOF 1 n timeout`, `timeoutMs` at least 1 (0 would be no limit). */
export declare function waitCommand(sync: SyncOptions, replicas: number, timeoutMs: number): string[];
/** What a `WAIT` / `WAITAOF` reply says. */
export interface Acks {
    /** How many replicas acknowledged. */
    replicas: number;
    /** The master has the writes on disk (`WAITAOF`'s local count is 1; always for `WAIT`). */
    local: boolean;
}
/** The acknowledgements a `WAIT` / `WAITAOF` reply reports. */
export declare function acksOf(sync: SyncOptions, reply: unknown): Acks;
/** One synced round trip's replies, after the writes: `LOCK.INSYNC`, `WAIT`, `LOCK.INSYNC`. */
export interface RoundTrip {
    /** `LOCK.INSYNC` right after the writes: its offset covers them. */
    before: InSync;
    /** How many replicas the `WAIT` waited for: the hint. */
    hint: number;
    /** What the `WAIT` answered. */
    waited: Acks;
    /** `LOCK.INSYNC` after the `WAIT`. */
    after: InSync;
}
/** Why writes do not count, and how far they got. */
export interface Shortfall {
    /** Replicas the `WAIT` counted. */
    acked: number;
    /** Replicas that had to have them: the in-sync set's members, at least the required. */
    wanted: number;
    reason: string;
    /** One more `WAIT` for every member may yet make them count (from a {@link RoundTrip}): only
     * acknowledgements are missing, and the `WAIT` stopped before every member could acknowledge
     * — it counted fewer replicas, or waited for fewer (the hint was too small). Whether time is
     * left is the caller's to check. */
    again?: boolean;
}
/**
 * Why writes synced in `trip` do not count, or `undefined` when they count: when `after` says
 * the set has at least the members the master requires and every member acknowledged
 * `before.offset`, `after` came from the master `before` came from, not one this client saw
 * `replaced`, and (AOF) the master has them on disk. `timeoutMs`, the sync timeout, is for the
 * reason.
 */
export declare function shortfall(trip: RoundTrip, replaced: boolean, timeoutMs: number): Shortfall | undefined;
/** What one client saw in the `LOCK.INSYNC` replies of its masters: the members of each
 * master's set in its last reply — how many replicas the next `WAIT` waits for, a hint
 * correctness never depends on — and the replication IDs of masters replaced by a failover
 * (a promoted replica reports its old master's as `replid2`). */
export declare class Seen {
    /** The members of the last reply, by master address (`''` for one server). */
    private readonly members;
    private readonly replaced;
    /** The members of the last reply of the master at `address` (0 before any). */
    hint(address: string): number;
    /** Takes note of a reply of the master at `address`; whether that master is one this client
     * saw replaced — an old master still taking writes after a failover (a split brain): none
     * of its writes count. */
    heard(address: string, inSync: InSync): boolean;
}
