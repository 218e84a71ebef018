/**
 * Group commit: the synced writes queued for one master at the same time go together, on one
 * connection of the sync pool, behind one held reply.
 *
 * A write with `SYNC` has the server hold its reply — and with it its connection — until the
 * master's in-sync replica set has the write: a connection, and a blocked client in the server,
 * per write in flight, each sent and read on its own. Instead, the writes queued for a master
 * go out as one pipeline on one connection, each with `NOSYNC`, then `LOCK.SYNC` (lock module
 * 0.7.0 and later), which the server answers once the set has every write before it: `OK`, and
 * every write counts; an error, and none does — the server undid nothing, so {@link Writes}
 * gives back the grants (writes.ts).
 *
 * Whoever gets a connection of the sync pool sends everything queued (at most {@link MAX}
 * writes), then what was queued meanwhile on the same connection, until nothing is: under load
 * the batches grow by themselves. A lone write goes alone with `SYNC`, as before batching —
 * `LOCK.SYNC` behind it would cost one task a tenth more time and save nothing — its own reply
 * saying whether it counts (a grant the server refused, or whose connection closed first, it
 * released itself).
 * Writes queue as long as they would have for a connection of their own (their `deadline`):
 * then they reject with {@link Exhausted}, nothing sent.
 */
import { Exhausted } from './pool.js';
import { flagged } from './session.js';
/** The most writes in one batch. */
export const MAX = 64;
/** `commands` (lock writes without their flag), each with `NOSYNC`, then `LOCK.SYNC`, in one
 * pipeline on `own` — a lone one with `SYNC` — : each one's reply with `LOCK.SYNC`'s. Rejects
 * as {@link Sender.pipeline}. */
export async function commit(own, commands, timeoutMs) {
    const sent = Date.now();
    if (commands.length === 1) {
        const { replies: [reply] } = await own.pipeline([flagged(commands[0], 'SYNC')], timeoutMs);
        return [{ reply, synced: 'OK', sent, tie: own.tie }];
    }
    const { replies } = await own.pipeline([...commands.map((command) => flagged(command, 'NOSYNC')), ['LOCK.SYNC']], timeoutMs);
    const synced = replies[commands.length];
    return commands.map((_, at) => ({ reply: replies[at], synced, sent, tie: own.tie }));
}
/** The writes queued for one master (those tied to the client's session, or those not: a
 * connection's binding ties every acquire and renewal on it alike). */
export class Batcher {
    lend;
    queue = [];
    /** Senders waiting for a connection: each will send up to {@link MAX} of the queue. */
    waiting = 0;
    scheduled = false;
    constructor(lend) {
        this.lend = lend;
    }
    /** Sends `command` (a lock write without its flag) in the next batch, queued until
     * `deadline`, its batch's replies waited for up to `timeoutMs`. Rejects with {@link
     * Exhausted} when no connection came free before `deadline` (nothing was sent), with the
     * batch's `LostReply`, and with why no connection could be had (a connect error, the
     * session's, the pool closed). */
    add(command, deadline, timeoutMs) {
        return new Promise((resolve, reject) => {
            this.queue.push({ command, deadline, timeout: timeoutMs, resolve, reject });
            if (this.scheduled)
                return;
            this.scheduled = true;
            // Once the promise callbacks running now have run: the writes the tasks send in this turn
            // of the event loop go in one batch.
            process.nextTick(() => {
                this.scheduled = false;
                this.start();
            });
        });
    }
    /** Senders for the writes queued beyond what those waiting for a connection will take. */
    start() {
        while (this.queue.length > this.waiting * MAX)
            void this.send();
    }
    /** Borrows a connection, and sends batches on it while writes are queued. */
    async send() {
        this.waiting++;
        let lent = false;
        try {
            const deadline = this.queue.reduce((earliest, queued) => Math.min(earliest, queued.deadline), Infinity);
            await this.lend(deadline, async (own) => {
                this.waiting--;
                lent = true;
                for (let batch = this.take(); batch.length > 0; batch = this.take())
                    await this.commit(own, batch);
            });
        }
        catch (error) {
            // Once lent, the batch that failed was rejected with the error, and the connection closed.
            if (!lent) {
                this.waiting--;
                this.fail(error);
            }
        }
        if (this.queue.length > 0)
            this.start();
    }
    /** The next batch: the first {@link MAX} writes queued. */
    take() {
        return this.queue.splice(0, MAX);
    }
    async commit(own, batch) {
        let committed;
        try {
            committed = await commit(own, batch.map(({ command }) => command), Math.max(...batch.map(({ timeout }) => timeout)));
        }
        catch (error) {
            for (const queued of batch)
                queued.reject(error);
            throw error;
        }
        batch.forEach((queued, at) => queued.resolve(committed[at]));
    }
    /** No connection was lent: at its deadline, the writes whose deadline came reject with
     * {@link Exhausted}; otherwise every write queued rejects with why. */
    fail(error) {
        const now = Date.now();
        const failed = error instanceof Exhausted ? this.queue.filter(({ deadline }) => deadline <= now) : [...this.queue];
        for (const queued of failed) {
            this.queue.splice(this.queue.indexOf(queued), 1);
            queued.reject(error);
        }
    }
}
