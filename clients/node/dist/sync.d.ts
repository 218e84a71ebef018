/**
 * Grants synced to replicas before they are returned: after a grant the lock sends
 * `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`) on the connection that carried it,
 * and counts the grant only once enough replicas have it. Replication is asynchronous: without
 * this, a master can acknowledge a grant and fail before any replica has it, and the promoted
 * replica grants the same lock again.
 *
 * How many replicas to wait for, by default, is learned from the master (`INFO replication`:
 * its replicas online) and never lowered by a drop the same master sees: in a split brain an
 * old master loses exactly the replica that was promoted, and would otherwise count a grant as
 * synced to the one replica about to be re-pointed elsewhere. A master is known by its
 * replication ID, which a promotion changes, so a new master is learned anew.
 */
/** How grants reach the replicas before an acquire returns them. */
export interface SyncOptions {
    /** Replicas to wait for; omitted: every replica the master has online (learned). 0: off. */
    replicas?: number;
    /** How long to wait for them, ms (default 1 000: a replica that is up acknowledges within a
     * round trip plus its lag; a second runs out only when one is down or far behind). */
    timeout?: number;
    /** `WAITAOF 1 n` instead of `WAIT n`: on disk on the master and the replicas (Redis 7.2+,
     * Valkey 8+, with `appendonly yes`). */
    aof?: boolean;
}
/** The grant was made but fewer replicas than wanted had it in time; the lock released it
 * (owner-checked). Not "busy": the lock was free, the replicas were not there. */
export declare class NotReplicatedError extends Error {
    readonly acked: number;
    readonly wanted: number;
    name: string;
    constructor(acked: number, wanted: number);
}
export declare const DEFAULT_SYNC_TIMEOUT = 1000;
/** `WAIT n timeout` or `WAITAOF 1 n timeout`. */
export declare function waitCommand(sync: SyncOptions, replicas: number): string[];
/** How many replicas a `WAIT` / `WAITAOF` reply says have the grant. */
export declare function ackedBy(sync: SyncOptions, reply: unknown): number;
/** What one master said of its replicas: the most it reported online under its current
 * replication ID. */
export declare class Learned {
    private replicationId;
    private replicas;
    /** The most replicas any master of this client had. */
    private most;
    private askedAt;
    /** The count, if it was asked recently enough. */
    fresh(): number | undefined;
    /** Takes note of `INFO replication` and returns the count. */
    heard(info: string): number;
    /** The next grant asks the master again (keeping the count for the same master). */
    askAgain(): void;
}
