/**
 * A bounded pool of dedicated connections to one server: lent to one caller at a time, given
 * back once every reply sent on it was read, closed instead when a reply was lost.
 *
 * Written here rather than taken from node-redis or npm because a lock needs three things none
 * of them offers together: a queue budget per caller (an acquire's own wait; node-redis's
 * `createClientPool` and `generic-pool` have one timeout for the whole pool), a way to throw a
 * connection away instead of returning it (`createClientPool` returns whatever its task used),
 * and a failed connect that rejects the caller (`generic-pool` retries it while its callers
 * wait on).
 */
/** No connection came free within the caller's budget. Nothing was sent. */
export class Exhausted extends Error {
    name = 'Exhausted';
}
/** The pool was closed (its client closed) while a caller queued for a connection. */
export class PoolClosed extends Error {
    name = 'PoolClosed';
}
export class Pool {
    factory;
    size;
    idle = [];
    /** Callers waiting for a connection, first come first served. */
    queue = [];
    /** Connections open or being opened, idle or lent. */
    count = 0;
    closed = false;
    /** One timer for the whole queue, armed for the earliest deadline in it at the most: a
     * timer per queued caller cost a tenth of a synced grant's time when 64 tasks shared 16
     * connections. */
    timer;
    /** When {@link timer} fires, ms since the epoch. */
    timerAt = Infinity;
    /** `size`: at most this many connections open at once. */
    constructor(factory, size) {
        this.factory = factory;
        this.size = size;
    }
    /**
     * A connection: an idle one, a new one while fewer than `size` are open, or else the next
     * one given back or freed, queued until `deadline` (ms since the epoch; `undefined`: as long
     * as it takes). Rejects with {@link Exhausted} at the deadline, {@link PoolClosed} when the
     * pool closes first, or the connect error.
     */
    borrow(deadline) {
        if (this.closed)
            return Promise.reject(new PoolClosed('the client was closed'));
        for (let connection = this.idle.pop(); connection !== undefined; connection = this.idle.pop()) {
            if (this.factory.alive(connection))
                return Promise.resolve(connection);
            this.forget(connection);
        }
        if (this.count < this.size)
            return this.open();
        return new Promise((resolve, reject) => {
            this.queue.push({ resolve, reject, deadline });
            if (deadline !== undefined && deadline < this.timerAt)
                this.arm(deadline);
        });
    }
    /** Sets the queue's timer to fire at `at` (ms since the epoch). */
    arm(at) {
        clearTimeout(this.timer);
        this.timerAt = at;
        this.timer = setTimeout(() => this.expire(), Math.max(at - Date.now(), 0));
        // A queued caller waits for a connection in use, whose socket keeps the process up.
        this.timer.unref?.();
    }
    /** Stops the queue's timer once nobody queues. */
    disarmIfIdle() {
        if (this.queue.length > 0 || this.timer === undefined)
            return;
        clearTimeout(this.timer);
        this.timer = undefined;
        this.timerAt = Infinity;
    }
    /** Rejects the queued callers whose deadline came with {@link Exhausted}, and sets the timer
     * for the earliest deadline left. */
    expire() {
        this.timer = undefined;
        this.timerAt = Infinity;
        const now = Date.now();
        let next = Infinity;
        for (let at = 0; at < this.queue.length; at++) {
            const { deadline, reject } = this.queue[at];
            if (deadline === undefined)
                continue;
            if (deadline <= now) {
                this.queue.splice(at--, 1);
                reject(new Exhausted('no connection came free in time'));
            }
            else {
                next = Math.min(next, deadline);
            }
        }
        if (next !== Infinity)
            this.arm(next);
    }
    /** Takes back a connection every reply of which was read: to the first queued caller, or
     * idle. */
    giveBack(connection) {
        if (this.closed || this.count > this.size || !this.factory.alive(connection)) {
            this.discard(connection);
            return;
        }
        const queued = this.queue.shift();
        if (!queued) {
            this.idle.push(connection);
            return;
        }
        this.disarmIfIdle();
        queued.resolve(connection);
    }
    /** Closes a connection whose reply was lost (or that failed); a queued caller gets a new
     * one in its place. */
    discard(connection) {
        this.forget(connection);
        this.serveQueue();
    }
    /** Closes the idle connections now and lent ones when they come back; rejects the queued
     * callers. */
    close() {
        this.closed = true;
        for (const connection of this.idle.splice(0))
            this.forget(connection);
        clearTimeout(this.timer);
        this.timer = undefined;
        this.timerAt = Infinity;
        for (const queued of this.queue.splice(0))
            queued.reject(new PoolClosed('the client was closed'));
    }
    async open() {
        this.count++;
        try {
            return await this.factory.open();
        }
        catch (error) {
            this.count--;
            this.serveQueue();
            throw error;
        }
    }
    forget(connection) {
        this.count--;
        this.factory.close(connection);
    }
    /** Opens connections for queued callers while there is room. */
    serveQueue() {
        while (!this.closed && this.queue.length > 0 && this.count < this.size) {
            const queued = this.queue.shift();
            this.open().then(queued.resolve, queued.reject);
        }
        this.disarmIfIdle();
    }
}
