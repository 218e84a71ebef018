/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and how a wait gets a connection of its own.
 *
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
 * over the program's connection: it goes over a duplicate, which is closed when the reply has
 * come — or when it has not come `margin` ms after the wait should have ended (ioredis's
 * `commandTimeout` would otherwise report a failure while the server still grants the lock).
 */

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
   * Sends a command that blocks in the server for up to `waitMs` (0: no limit) over a
   * connection of its own, closed afterwards. Rejects with {@link LostReply} when no reply
   * came `marginMs` after the wait should have ended, or the connection failed: the server
   * may have done it or not.
   */
  async sendWaiting(args: string[], waitMs: number, marginMs: number): Promise<unknown> {
    const dedicated = await this.dedicated();
    let timer: NodeJS.Timeout | undefined;
    const expiry = new Promise<never>((_, reject) => {
      if (waitMs > 0) {
        timer = setTimeout(() => reject(new LostReply('no reply in time')), waitMs + marginMs);
      }
    });
    try {
      return await Promise.race([dedicated.send(args), expiry]);
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
