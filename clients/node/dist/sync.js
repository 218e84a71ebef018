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
/** A grant or renewal was made on the master but does not count: `reason` says why — the
 * in-sync set was smaller than `lock.min-insync-replicas`, not every member acknowledged it
 * within the sync timeout, the master was replaced by a failover — or no connection came free
 * for it within the sync timeout (nothing was sent). An acquire's grant, or a re-entry's new
 * hold, is released (owner-checked); a downgrade or upgrade stays made on the master while the
 * holding keeps its mode, token and lease; a renewal leaves the holding's lease the last synced
 * one. Not "busy": the lock was free, the replicas were not there. */
export class NotReplicatedError extends Error {
    acked;
    wanted;
    write;
    reason;
    name = 'NotReplicatedError';
    /** `acked`: replicas the `WAIT` counted (in the in-sync set or not); `wanted`: replicas that
     * had to have it (the in-sync set's members, at least `lock.min-insync-replicas`; or the
     * fixed count); `write`: what was not synced (`'grant'` for an acquire, a re-entry, a
     * downgrade and an upgrade); `reason`: why it does not count. */
    constructor(acked, wanted, write = 'grant', reason = `${acked} of the ${wanted} replicas wanted acknowledged in time`) {
        super(`the ${write} does not count: ${reason}`);
        this.acked = acked;
        this.wanted = wanted;
        this.write = write;
        this.reason = reason;
    }
}
export const DEFAULT_SYNC_TIMEOUT = 1_000;
/** `LOCK.INSYNC`: the master's in-sync replica set ({@link InSync}). */
export const INSYNC = ['LOCK.INSYNC'];
/** The fields of a `LOCK.INSYNC` reply; an error reply as it is, and an error for a reply
 * that is not an array of 6. */
export function inSyncOf(reply) {
    if (reply instanceof Error)
        return reply;
    if (!Array.isArray(reply) || reply.length !== 6)
        return new Error(`LOCK.INSYNC replied ${String(reply)}: not an in-sync set`);
    const [offset, acked, members, required, replid, replid2] = reply;
    return {
        offset: Number(offset),
        acked: Number(acked),
        members: Number(members),
        required: Number(required),
        replid: String(replid),
        replid2: String(replid2),
    };
}
/** `WAIT n timeout` or `WAITAOF 1 n timeout`, `timeoutMs` at least 1 (0 would be no limit). */
export function waitCommand(sync, replicas, timeoutMs) {
    const timeout = String(Math.max(Math.ceil(timeoutMs), 1));
    return sync.aof ? ['WAITAOF', '1', String(replicas), timeout] : ['WAIT', String(replicas), timeout];
}
/** The acknowledgements a `WAIT` / `WAITAOF` reply reports. */
export function acksOf(sync, reply) {
    if (!sync.aof)
        return { replicas: Number(reply), local: true };
    const [local, replicas] = reply;
    return { replicas: Number(replicas), local: Number(local) >= 1 };
}
/**
 * Why writes synced in `trip` do not count, or `undefined` when they count: when `after` says
 * the set has at least the members the master requires and every member acknowledged
 * `before.offset`, `after` came from the master `before` came from, not one this client saw
 * `replaced`, and (AOF) the master has them on disk. `timeoutMs`, the sync timeout, is for the
 * reason.
 */
export function shortfall(trip, replaced, timeoutMs) {
    const { before, hint, waited, after } = trip;
    const missing = (reason, again = false) => ({
        acked: waited.replicas,
        wanted: Math.max(after.members, after.required),
        reason,
        again,
    });
    if (replaced || after.replid !== before.replid) {
        return missing('this master was replaced by a failover: its writes do not count');
    }
    if (after.members < after.required) {
        return missing(`the master has ${after.members} in-sync replicas, fewer than lock.min-insync-replicas (${after.required})`);
    }
    if (after.acked < before.offset) {
        const again = after.members > Math.min(waited.replicas, hint);
        return missing(`not every in-sync replica acknowledged within ${timeoutMs} ms`, again);
    }
    if (!waited.local)
        return missing(`the master did not fsync its AOF within ${timeoutMs} ms`);
    return undefined;
}
/** What one client saw in the `LOCK.INSYNC` replies of its masters: the members of each
 * master's set in its last reply — how many replicas the next `WAIT` waits for, a hint
 * correctness never depends on — and the replication IDs of masters replaced by a failover
 * (a promoted replica reports its old master's as `replid2`). */
export class Seen {
    /** The members of the last reply, by master address (`''` for one server). */
    members = new Map();
    replaced = new Set();
    /** The members of the last reply of the master at `address` (0 before any). */
    hint(address) {
        return this.members.get(address) ?? 0;
    }
    /** Takes note of a reply of the master at `address`; whether that master is one this client
     * saw replaced — an old master still taking writes after a failover (a split brain): none
     * of its writes count. */
    heard(address, inSync) {
        this.members.set(address, inSync.members);
        if (/[^0]/.test(inSync.replid2))
            this.replaced.add(inSync.replid2);
        return this.replaced.has(inSync.replid);
    }
}
