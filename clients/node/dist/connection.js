/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and how a wait gets a connection of its own.
 *
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
 * over the program's connection: it goes over a duplicate, which is closed when the reply has
 * come — or when it has not come `margin` ms after the wait should have ended (ioredis's
 * `commandTimeout` would otherwise report a failure while the server still grants the lock).
 */
import { Learned } from './sync.js';
/** The client as the locks use it. */
export class Connection {
    client;
    /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
    prefix;
    constructor(client) {
        this.client = client;
        this.prefix = isIORedis(client) ? (client.options.keyPrefix ?? '') : '';
    }
    /** What was learned of the master behind this client, shared by every lock on it. */
    get learned() {
        let known = LEARNED.get(this.client);
        if (!known) {
            known = new Learned();
            LEARNED.set(this.client, known);
        }
        return known;
    }
    /** Sends a quick command over the program's own connection. */
    async send(args) {
        const client = this.client;
        if (isIORedis(client)) {
            const [command, ...rest] = args;
            return client.call(command, ...rest);
        }
        return client.sendCommand(args);
    }
    /**
     * Sends a command over a connection of its own, closed afterwards — one that blocks in the
     * server (a wait), or a grant to sync — and, when its reply is not null and `then` is given,
     * `then` on the same connection; resolves to both replies. Rejects with {@link LostReply}
     * when no reply came within `timeoutMs` (`undefined`: no limit), or the connection failed:
     * the server may have done it or not.
     */
    async sendOwn(args, timeoutMs, then) {
        const dedicated = await this.dedicated();
        let timer;
        const expiry = new Promise((_, reject) => {
            if (timeoutMs !== undefined) {
                timer = setTimeout(() => reject(new LostReply('no reply in time')), timeoutMs);
            }
        });
        const exchange = async () => {
            const reply = await dedicated.send(args);
            return [reply, reply !== null && then ? await dedicated.send(then) : undefined];
        };
        try {
            return await Promise.race([exchange(), expiry]);
        }
        catch (error) {
            throw isServerError(error) ? error : new LostReply(String(error));
        }
        finally {
            clearTimeout(timer);
            dedicated.close();
        }
    }
    async dedicated() {
        const client = this.client;
        if (isIORedis(client)) {
            const own = client.duplicate({
                commandTimeout: undefined,
                maxRetriesPerRequest: 0,
                retryStrategy: () => null,
            });
            return {
                send: ([command, ...rest]) => own.call(command, ...rest),
                close: () => own.disconnect(),
            };
        }
        const own = client.duplicate();
        // The error handler keeps a dropped wait connection from crashing the program.
        own.on?.('error', () => { });
        await own.connect();
        return {
            send: (args) => own.sendCommand(args),
            close: () => {
                if (own.destroy) {
                    own.destroy();
                }
                else {
                    own.disconnect?.().catch(() => { });
                }
            },
        };
    }
}
const LEARNED = new WeakMap();
/** A wait's reply did not come: the server may have granted the lock, or not. */
export class LostReply extends Error {
    name = 'LostReply';
}
function isIORedis(client) {
    return typeof client.call === 'function';
}
/**
 * An error reply of the server (`ERR ...`, `WRONGTYPE ...`, `TRYAGAIN ...`): its message starts
 * with the error code, in capitals. Connection failures (`Connection is closed.`, `read
 * ECONNRESET`, ...) do not.
 */
export function isServerError(error) {
    return error instanceof Error && /^[A-Z]+ /.test(error.message);
}
/** `TRYAGAIN`: the server could not issue a fencing token yet; a moment later it can. */
export function isTryAgain(error) {
    return error instanceof Error && error.message.startsWith('TRYAGAIN');
}
