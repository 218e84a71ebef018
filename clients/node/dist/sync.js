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
/** The grant was made but fewer replicas than wanted had it in time; the lock released it
 * (owner-checked). Not "busy": the lock was free, the replicas were not there. */
export class NotReplicatedError extends Error {
    acked;
    wanted;
    name = 'NotReplicatedError';
    constructor(acked, wanted) {
        super(`the grant reached ${acked} of the ${wanted} replicas wanted; released`);
        this.acked = acked;
        this.wanted = wanted;
    }
}
export const DEFAULT_SYNC_TIMEOUT = 1_000;
/** How long what a master said of its replicas is used before it is asked again, ms. */
const REFRESH = 5_000;
/** `WAIT n timeout` or `WAITAOF 1 n timeout`. */
export function waitCommand(sync, replicas) {
    const timeout = String(Math.max(Math.ceil(sync.timeout ?? DEFAULT_SYNC_TIMEOUT), 1));
    return sync.aof ? ['WAITAOF', '1', String(replicas), timeout] : ['WAIT', String(replicas), timeout];
}
/** How many replicas a `WAIT` / `WAITAOF` reply says have the grant. */
export function ackedBy(sync, reply) {
    if (sync.aof) {
        const [local, replicas] = reply;
        return Number(local) >= 1 ? Number(replicas) : 0;
    }
    return Number(reply);
}
/** What one master said of its replicas: the most it reported online under its current
 * replication ID. */
export class Learned {
    replicationId;
    replicas = 0;
    /** The most replicas any master of this client had. */
    most = 0;
    askedAt;
    /** The count, if it was asked recently enough. */
    fresh() {
        return this.askedAt !== undefined && Date.now() - this.askedAt < REFRESH ? this.replicas : undefined;
    }
    /** Takes note of `INFO replication` and returns the count. */
    heard(info) {
        const field = (name) => info.split(/\r?\n/).find((line) => line.startsWith(`${name}:`))?.slice(name.length + 1).trim();
        const replicationId = field('master_replid');
        const online = field('role') === 'master'
            ? info.split(/\r?\n/).filter((line) => line.startsWith('slave') && line.includes('state=online')).length
            : 0;
        if (replicationId !== this.replicationId) {
            // A new master here (promoted, or the old one restarted) starts from one fewer than the
            // most any master had: its replicas reattach only some time after a failover.
            this.replicationId = replicationId;
            this.replicas = Math.max(this.most - 1, 0);
        }
        this.replicas = Math.max(this.replicas, online);
        this.most = Math.max(this.most, this.replicas);
        this.askedAt = Date.now();
        return this.replicas;
    }
    /** The next grant asks the master again (keeping the count for the same master). */
    askAgain() {
        this.askedAt = undefined;
    }
}
