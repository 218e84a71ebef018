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

/** What the locks use of a node-redis client (`createClient()`, v4 and later). */
export interface NodeRedisClient {
  sendCommand(args: string[]): Promise<unknown>;
  duplicate(): NodeRedisDuplicate;
}

/** A node-redis duplicate, connected for one wait. */
export interface NodeRedisDuplicate {
  connect(): Promise<unknown>;
  sendCommand(args: string[]): Promise<unknown>;
  destroy?(): unknown;
  disconnect?(): Promise<unknown>;
}

/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  duplicate(override?: Record<string, unknown>): IORedisClient;
  disconnect(): void;
  options: { keyPrefix?: string };
}

/** A node-redis or ioredis client. */
export type Client = NodeRedisClient | IORedisClient;

/** One command, then the connection is closed. */
interface Dedicated {
  send(args: string[]): Promise<unknown>;
  close(): void;
}

/** The client as the locks use it. */
export class Connection {
  /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
  readonly prefix: string;

  constructor(private readonly client: Client) {
    this.prefix = isIORedis(client) ? (client.options.keyPrefix ?? '') : '';
  }

  /** What was learned of the master behind this client, shared by every lock on it. */
  get learned(): Learned {
    let known = LEARNED.get(this.client);
    if (!known) {
      known = new Learned();
      LEARNED.set(this.client, known);
    }
    return known;
  }

  /** Sends a quick command over the program's own connection. */
  async send(args: string[]): Promise<unknown> {
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
  async sendOwn(args: string[], timeoutMs: number | undefined, then?: string[]): Promise<[unknown, unknown]> {
    const dedicated = await this.dedicated();
    let timer: NodeJS.Timeout | undefined;
    const expiry = new Promise<never>((_, reject) => {
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => reject(new LostReply('no reply in time')), timeoutMs);
      }
    });
    const exchange = async (): Promise<[unknown, unknown]> => {
      const reply = await dedicated.send(args);
      return [reply, reply !== null && then ? await dedicated.send(then) : undefined];
    };
    try {
      return await Promise.race([exchange(), expiry]);
    } catch (error) {
      throw isServerError(error) ? error : new LostReply(String(error));
    } finally {
      clearTimeout(timer);
      dedicated.close();
    }
  }

  private async dedicated(): Promise<Dedicated> {
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
    (own as { on?: (event: string, listener: () => void) => void }).on?.('error', () => {});
    await own.connect();
    return {
      send: (args) => own.sendCommand(args),
      close: () => {
        if (own.destroy) {
          own.destroy();
        } else {
          own.disconnect?.().catch(() => {});
        }
      },
    };
  }
}

const LEARNED = new WeakMap<Client, Learned>();

/** A wait's reply did not come: the server may have granted the lock, or not. */
export class LostReply extends Error {
  override name = 'LostReply';
}

function isIORedis(client: Client): client is IORedisClient {
  return typeof (client as IORedisClient).call === 'function';
}

/**
 * An error reply of the server (`ERR ...`, `WRONGTYPE ...`, `TRYAGAIN ...`): its message starts
 * with the error code, in capitals. Connection failures (`Connection is closed.`, `read
 * ECONNRESET`, ...) do not.
 */
export function isServerError(error: unknown): boolean {
  return error instanceof Error && /^[A-Z]+ /.test(error.message);
}

/** `TRYAGAIN`: the server could not issue a fencing token yet; a moment later it can. */
export function isTryAgain(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('TRYAGAIN');
}
