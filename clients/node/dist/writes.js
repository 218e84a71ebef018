/**
 * How a write on a lock — a grant, a renewal — reaches the master, and its replicas before it
 * counts. Each write is one command with `SYNC` or `NOSYNC` (lock module 0.7.0 and later:
 * {@link refusalOf} names the module an older one needs):
 *
 * - The in-sync set (the default), for an acquire that does not wait and a renewal: `NOSYNC`,
 *   in a batch with the others queued for the same master at the same time, on one connection
 *   of the sync pool, `LOCK.SYNC` behind them (batch.ts): the server replies `OK` once every
 *   member of the master's in-sync set has them all, or refuses with `NOREPLICAS` within its
 *   `lock.sync-timeout-ms` — and undoes nothing: each grant of the batch is released here
 *   before its caller hears ({@link counted}), a renewal does not count. A batch whose reply
 *   was lost leaves its acquires to their callers, which release them in the background. A
 *   lone write goes with `SYNC`, as below.
 * - The in-sync set, for a re-entry, a downgrade, an upgrade (which only the server can undo
 *   exactly), a guarded or fenced command, or with `aof`: `SYNC` — the server replies once
 *   every member of the set has the write, or refuses it with `NOREPLICAS` (a refused grant it
 *   released itself: never released here); it holds the reply meanwhile, so the write goes
 *   alone on a connection of the sync pool; with `aof`, `WAITAOF 1 0 t` goes behind it in the
 *   same pipeline.
 * - A fixed replica count (`sync.replicas`): `NOSYNC`, with `WAIT n t` (`WAITAOF 1 n t`) behind
 *   it in one pipeline on a connection of the sync pool; a grant too few replicas acknowledged
 *   is released here.
 * - Sync off: `NOSYNC`, over the program's own connection (one tied to a session: over a
 *   connection of the sync pool).
 * - A wait in the server (`LOCK.ACQUIRE ... WAIT`): on a connection of the wait pool, synced
 *   as above.
 * - A write whose command ends in `SESSION` is tied to the client's session on the master it
 *   is sent to (each master has its own, and a redirected write goes to another): the
 *   connection lent to it is bound to that session (`LOCK.SESSION USE id`, first in the same
 *   pipeline, when it is not yet: {@link Own.pipeline}). `ERR no such session` tells that
 *   session's keeper it was replaced.
 *
 * A reply that does not come within the server's longest hold (the sync timeout, and a wait's
 * time) and `margin` is lost ({@link LostReply}): its connection is closed, which makes the
 * server release a grant it still held for it.
 */
import { Exhausted } from './connection.js';
import { flagged, isNoSuchSession, wantsSession } from './session.js';
import { DEFAULT_SYNC_TIMEOUT, NotReplicatedError, refusalOf, shortfall, unsyncedBy, waitCommand } from './sync.js';
/** The writes of one lock (or set of locks), routed by `key`. */
export class Writes {
    connection;
    key;
    margin;
    sync;
    how;
    /** `margin`: how long after a reply should have come it is given up on, ms. */
    constructor(connection, 
    /** The key the writes are routed by (in a cluster, to its slot's master). */
    key, sync, margin) {
        this.connection = connection;
        this.key = key;
        this.margin = margin;
        this.sync = sync || {};
        if (sync === false || this.sync.replicas === 0)
            this.how = 'off';
        else
            this.how = this.sync.replicas === undefined ? 'insync' : 'fixed';
    }
    /** These writes' settings, routed by `key` instead (a fence's, say). */
    routedBy(key) {
        return new Writes(this.connection, key, this.how === 'off' ? false : this.sync, this.margin);
    }
    /** The sync timeout, ms. */
    get syncMs() {
        return this.sync.timeout ?? DEFAULT_SYNC_TIMEOUT;
    }
    /**
     * A grant without waiting — an acquire, or a holder's re-entry or change of mode: the reply
     * (null when busy). Rejects with {@link NotReplicatedError} when it does not count: refused by
     * the server (which released it), short of a fixed count's `WAIT` (then given back with
     * `release`, if given, else it stays made on the master), or no sync connection came free
     * within the sync timeout (nothing was sent).
     *
     * `batched` (an acquire, whose `release` gives back exactly its grant, and which a lost reply
     * has released by its caller): synced to the in-sync set in a batch (batch.ts) rather than
     * alone with `SYNC`; a `LOCK.SYNC` refused, the grant is given back with `release` before it
     * rejects. A re-entry or a change of mode goes alone: the server undoes one the set lacks, or
     * whose reply was lost (the client could not tell what to undo).
     */
    grant(command, release, batched = false) {
        return this.write(command, 'grant', (reply) => reply !== null, release, batched);
    }
    /**
     * An acquire that waits in the server up to `waitMs` (0: no limit), on a connection of the
     * wait pool queued for until `deadline` (ms since the epoch; `undefined`: no limit), else
     * rejected with {@link Exhausted}. Rejects with {@link NotReplicatedError} as {@link grant}
     * (`release`: for a fixed count's `WAIT`).
     */
    async wait(command, waitMs, deadline, release) {
        const outcome = await this.exchange('wait', command, 'grant', deadline, waitMs);
        return this.counted(outcome, outcome.reply !== null, release);
    }
    /** A renewal (or an election's `LOCK.PROCLAIM`, which the server syncs as a renewal): the
     * reply. One `applied` that does not count — refused by the server, short of a fixed count's
     * `WAIT`, or that found no sync connection free within the sync timeout — rejects with {@link
     * NotReplicatedError}. */
    renew(command, applied) {
        return this.write(command, 'renewal', applied, undefined, true);
    }
    /** What the writes say to the server: `SYNC` for the in-sync set, else `NOSYNC`. */
    get flag() {
        return this.how === 'insync' ? 'SYNC' : 'NOSYNC';
    }
    /**
     * A guarded or fenced command (`LOCK.GUARD ...`, `LOCK.FENCED ...`, saying {@link flag} where
     * its syntax puts it): its reply. Over the program's own connection with syncing off; else on a
     * connection of the sync pool — the server may hold the reply until its in-sync set has the
     * write — with a fixed count's `WAIT` behind it. Rejects with {@link NotHeldError} or {@link
     * StaleTokenError} when the server refused it (it did not run), with {@link NotReplicatedError}
     * (`write: 'command'`) when it ran but does not count (or no sync connection came free within
     * the sync timeout: nothing was sent), with the command's own error, and with {@link LostReply}.
     * It ties nothing: a pooled connection's session binding stays as it is.
     */
    async command(command) {
        if (this.how === 'off') {
            try {
                return await this.connection.send(command, this.key);
            }
            catch (error) {
                throw error instanceof Error ? refusalOf(error, 'command') : error;
            }
        }
        let outcome;
        try {
            outcome = await this.exchange('sync', command, 'command', Date.now() + this.syncMs, 0, false);
        }
        catch (error) {
            if (!(error instanceof Exhausted))
                throw error;
            throw new NotReplicatedError(0, this.sync.replicas ?? 0, 'command', `no sync connection came free within ${this.syncMs} ms: nothing was sent`);
        }
        if (outcome.unsynced)
            throw outcome.unsynced;
        return outcome.reply;
    }
    /** A write that does not wait: over the program's own connection when not synced nor tied;
     * synced to the in-sync set (without `aof`), in a batch when it may be ({@link batch}); else
     * alone on a connection of the sync pool. */
    async write(command, write, applied, release, batched) {
        if (this.how === 'off' && !wantsSession(command))
            return this.sent(command, write);
        let outcome;
        try {
            const deadline = Date.now() + this.syncMs;
            outcome = batched && this.how === 'insync' && !this.sync.aof
                ? await this.batch(command, write, deadline)
                : await this.exchange('sync', command, write, deadline, 0);
        }
        catch (error) {
            if (!(error instanceof Exhausted))
                throw error;
            throw new NotReplicatedError(0, this.sync.replicas ?? 0, write, `no sync connection came free within ${this.syncMs} ms: nothing was sent`);
        }
        return this.counted(outcome, applied(outcome.reply), release);
    }
    /** A write over the program's own connection, `NOSYNC`, tied to no session. */
    async sent(command, write) {
        const began = Date.now();
        try {
            return { reply: await this.connection.send(flagged(command, this.flag), this.key), began };
        }
        catch (error) {
            throw error instanceof Error ? refusalOf(error, write) : error;
        }
    }
    /** The write that counts (or was not `applied`); otherwise the grant given back with
     * `release` (if any; a failed release leaves it to its lease) and the rejection. */
    async counted(outcome, applied, release) {
        const { reply, unsynced, tie } = outcome;
        if (!applied || !unsynced)
            return { reply, began: outcome.began, tie };
        if (release)
            await this.connection.send(release, this.key).catch(() => { });
        throw unsynced;
    }
    /**
     * `command` with `NOSYNC`, synced to the in-sync set in a batch with the other writes queued
     * for its master (batch.ts: `LOCK.SYNC` behind them; alone, with `SYNC`), queued until
     * `deadline`: its outcome — `unsynced` when `LOCK.SYNC` was refused ({@link unsyncedBy}; the
     * server undid nothing: {@link counted} gives a grant back). Its own error reply rejects
     * ({@link refusalOf}: a lone write's `NOREPLICAS` too; `ERR no such session` replaces the
     * session it was tied to), a lost reply with {@link LostReply}, a queue that lasted until
     * `deadline` with {@link Exhausted}.
     */
    async batch(command, write, deadline) {
        const { reply, synced, sent, tie } = await this.connection.batched(this.key, command, deadline, this.syncMs + this.margin);
        if (tie && isNoSuchSession(reply))
            tie.keeper.replaced(tie);
        if (reply instanceof Error)
            throw refusalOf(reply, write);
        return { reply, began: sent, unsynced: unsyncedBy(synced, write), tie };
    }
    /** What the client waits for behind the write: `WAIT n` / `WAITAOF 1 n` for a fixed count,
     * `WAITAOF 1 0` for the AOF of a write synced to the in-sync set; nothing else. */
    tail() {
        if (this.how === 'fixed')
            return [waitCommand(this.sync, this.sync.replicas, this.syncMs)];
        if (this.how === 'insync' && this.sync.aof)
            return [waitCommand(this.sync, 0, this.syncMs)];
        return [];
    }
    /**
     * `command`, flagged, on a connection of the `kind` pool to the master serving this lock,
     * with the client's own wait behind it ({@link tail}): its outcome. A command ending in
     * `SESSION` is tied to the client's session on that master (opened first if need be; the
     * outcome's `tie`), on a connection bound to it. Its error reply rejects ({@link refusalOf};
     * a redirection is followed); rejects with {@link LostReply} when the replies did not all
     * come within `waitMs` (0 on the wait pool: no limit), the server's holds of the sync timeout
     * and the margin, with {@link Exhausted} when no connection came free before `deadline`, and
     * with why a session could not be opened.
     */
    exchange(kind, command, write, deadline, waitMs, flag = true) {
        const tied = wantsSession(command);
        return this.connection.lend(kind, this.key, deadline, async (own) => {
            const tail = this.tail();
            // The server may hold the write (`SYNC`), then each `WAIT` behind it, a sync timeout each.
            const holds = Math.max((this.how === 'insync' ? 1 : 0) + tail.length, 1);
            const timeout = waitMs === 0 && kind === 'wait' ? undefined : waitMs + holds * this.syncMs + this.margin;
            const sent = Date.now();
            const request = flag ? flagged(command, this.flag) : command;
            const { replies: [reply, ...waited], arrived } = await own.pipeline([request, ...tail], timeout);
            const tie = tied ? own.tie : undefined;
            if (tie && isNoSuchSession(reply))
                tie.keeper.replaced(tie);
            if (reply instanceof Error)
                throw refusalOf(reply, write);
            const unsynced = tail.length > 0 ? shortfall(this.sync, this.sync.replicas ?? 0, waited[0], this.syncMs, write) : undefined;
            return { reply, began: kind === 'wait' ? arrived[0] : sent, unsynced, tie };
        }, tied);
    }
}
