/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and how a wait gets a connection of its own.
 *
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
 * over the program's connection: it goes over a duplicate, which is closed when the reply has
 * come — or when it has not come `margin` ms after the wait should have ended (ioredis's
 * `commandTimeout` would otherwise report a failure while the server still grants the lock).
 */

import keySlot from 'cluster-key-slot';

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

/** A node of a Redis Cluster as node-redis names it. */
export interface NodeRedisClusterNode {
  host: string;
  port: number;
}

/** What the locks use of a node-redis cluster client (`createCluster()`, v4 and later). */
export interface NodeRedisCluster {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  getSlotMaster(slot: number): NodeRedisClusterNode;
  getMasters(): NodeRedisClusterNode[];
  nodeClient(node: NodeRedisClusterNode): NodeRedisClient | Promise<NodeRedisClient>;
}

/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  duplicate(override?: Record<string, unknown>): IORedisClient;
  disconnect(): void;
  options: { keyPrefix?: string; host?: string; port?: number };
}

/** What the locks use of an ioredis cluster client (`new Cluster()`). */
export interface IORedisCluster {
  isCluster: true;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  slots: string[][];
  nodes(role?: 'all' | 'master' | 'slave'): IORedisClient[];
  refreshSlotsCache(callback?: (error?: Error | null) => void): void;
  options: { keyPrefix?: string };
}

/** A node-redis or ioredis client, of one server or of a Redis Cluster. */
export type Client = NodeRedisClient | IORedisClient | NodeRedisCluster | IORedisCluster;

/** One command, then the connection is closed. */
interface Dedicated {
  send(args: string[]): Promise<unknown>;
  close(): void;
}

/** The client as the locks use it: commands on a lock go to the master serving it (in a
 * cluster, the master of its slot). */
export class Connection {
  /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
  readonly prefix: string;

  constructor(private readonly client: Client) {
    this.prefix = isIORedis(client) || isIORedisCluster(client) ? (client.options.keyPrefix ?? '') : '';
  }

  /** What was learned of the master serving `key`, shared by every lock on it. */
  learned(key: string): Learned {
    let known = LEARNED.get(this.client);
    if (!known) {
      known = new Map();
      LEARNED.set(this.client, known);
    }
    const place = isCluster(this.client) ? this.masterAddress(key) : '';
    let learned = known.get(place);
    if (!learned) {
      learned = new Learned();
      known.set(place, learned);
    }
    return learned;
  }

  /** Sends a quick command on a lock over the program's own connection, routed in a cluster by
   * `key` (default `args[1]`, a single lock's key; a set's first key otherwise). */
  async send(args: string[], key: string = args[1]): Promise<unknown> {
    const client = this.client;
    if (isIORedis(client) || isIORedisCluster(client)) {
      const [command, ...rest] = args;
      return client.call(command, ...rest);
    }
    if (isNodeRedisCluster(client)) return client.sendCommand(key, false, args);
    return client.sendCommand(args);
  }

  /** Sends a keyless command (`INFO replication`) to the master serving `key`. */
  async sendToMaster(key: string, args: string[]): Promise<unknown> {
    const client = this.client;
    if (isNodeRedisCluster(client)) {
      return (await client.nodeClient(client.getSlotMaster(keySlot(key)))).sendCommand(args);
    }
    if (isIORedisCluster(client)) {
      const [command, ...rest] = args;
      return this.ioredisNode(client, this.masterAddress(key)).call(command, ...rest);
    }
    return this.send(args);
  }

  /**
   * Sends a command on `key` over a connection of its own to the master serving it, closed
   * afterwards — one that blocks in the server (a wait), or a grant to sync — and, when its
   * reply is not null and `then` is given, `then` on the same connection; resolves to both
   * replies. In a cluster it follows `MOVED` (relearning the slots) and `ASK` (to the
   * importing master). Rejects with {@link LostReply} when no reply came within `timeoutMs`
   * (`undefined`: no limit), or the connection failed: the server may have done it or not.
   */
  async sendOwn(key: string, args: string[], timeoutMs: number | undefined, then?: string[]): Promise<[unknown, unknown]> {
    let asking: string | undefined;
    for (let redirects = 0; ; redirects++) {
      try {
        return await this.sendOwnOnce(key, args, timeoutMs, then, asking);
      } catch (error) {
        const redirect = /^(MOVED|ASK) \d+ (\S+)/.exec(error instanceof Error ? error.message : '');
        if (!redirect || redirects >= REDIRECTS) throw error;
        asking = redirect[1] === 'ASK' ? redirect[2] : undefined;
        if (!asking) await this.relearnSlots(key);
      }
    }
  }

  private async sendOwnOnce(
    key: string,
    args: string[],
    timeoutMs: number | undefined,
    then: string[] | undefined,
    asking: string | undefined,
  ): Promise<[unknown, unknown]> {
    const dedicated = await this.dedicated(key, asking);
    let timer: NodeJS.Timeout | undefined;
    const expiry = new Promise<never>((_, reject) => {
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => reject(new LostReply('no reply in time')), timeoutMs);
      }
    });
    const exchange = async (): Promise<[unknown, unknown]> => {
      if (asking) await dedicated.send(['ASKING']);
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

  /** A connection of its own to the master serving `key`, or to the node at `address`. */
  private async dedicated(key: string, address?: string): Promise<Dedicated> {
    const client = this.client;
    if (isIORedis(client) || isIORedisCluster(client)) {
      const node = isIORedisCluster(client) ? this.ioredisNode(client, address ?? this.masterAddress(key)) : client;
      const own = node.duplicate({
        commandTimeout: undefined,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      // A failed connection rejects the command; the handler keeps ioredis from logging it.
      (own as { on?: (event: string, listener: () => void) => void }).on?.('error', () => {});
      return {
        send: ([command, ...rest]) => own.call(command, ...rest),
        close: () => own.disconnect(),
      };
    }
    const node = isNodeRedisCluster(client) ? await this.nodeRedisNode(client, key, address) : client;
    const own = node.duplicate();
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

  /** `host:port` of the master serving `key`, as the cluster client knows it now. */
  private masterAddress(key: string): string {
    const client = this.client;
    if (isIORedisCluster(client)) return client.slots[keySlot(key)]?.[0] ?? '';
    if (isNodeRedisCluster(client)) {
      const master = client.getSlotMaster(keySlot(key));
      return `${master.host}:${master.port}`;
    }
    return '';
  }

  private ioredisNode(client: IORedisCluster, address: string): IORedisClient {
    const node = client.nodes('master').find(({ options }) => `${options.host}:${options.port}` === address);
    if (!node) throw new Error(`no cluster master at ${address}`);
    return node;
  }

  private async nodeRedisNode(client: NodeRedisCluster, key: string, address?: string): Promise<NodeRedisClient> {
    const node = address === undefined
      ? client.getSlotMaster(keySlot(key))
      : client.getMasters().find(({ host, port }) => `${host}:${port}` === address);
    if (!node) throw new Error(`no cluster master at ${address}`);
    return client.nodeClient(node);
  }

  /** After `MOVED`: the cluster client learns where the slot of `key` went. */
  private async relearnSlots(key: string): Promise<void> {
    const client = this.client;
    if (isIORedisCluster(client)) {
      await new Promise<void>((done) => client.refreshSlotsCache(() => done()));
    } else if (isNodeRedisCluster(client)) {
      // A routed command meets the same MOVED, on which node-redis rediscovers the slots.
      await client.sendCommand(key, false, ['LOCK.FENCE', key]);
    }
  }
}

/** How many `MOVED` / `ASK` redirections a command on a connection of its own follows. */
const REDIRECTS = 5;

/** What was learned per client, by master address (`''` for one server). */
const LEARNED = new WeakMap<Client, Map<string, Learned>>();

/** A wait's reply did not come: the server may have granted the lock, or not. */
export class LostReply extends Error {
  override name = 'LostReply';
}

function isIORedis(client: Client): client is IORedisClient {
  return typeof (client as IORedisClient).call === 'function' && !isIORedisCluster(client);
}

function isIORedisCluster(client: Client): client is IORedisCluster {
  return (client as IORedisCluster).isCluster === true;
}

function isNodeRedisCluster(client: Client): client is NodeRedisCluster {
  return typeof (client as NodeRedisCluster).getSlotMaster === 'function';
}

function isCluster(client: Client): boolean {
  return isIORedisCluster(client) || isNodeRedisCluster(client);
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
