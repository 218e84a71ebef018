/**
 * How the locks talk to the server through the client the program already has — node-redis
 * (v4 and later) or ioredis — and the connections they borrow for themselves.
 *
 * Quick commands (a grant that is not synced, a release) go over the program's own connection.
 * A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, and so does a synced
 * write (`SYNC`: the server holds its reply until the replicas have it), so those go over
 * dedicated connections — duplicates of the program's client, without the client's command
 * timeout or retries — kept in two bounded pools per client (per master in a cluster, {@link
 * PoolSizes}): one for waits, one for synced writes, so that waiters never starve a holder's
 * renewal. The synced acquires and renewals queued for a master at the same time share one
 * connection of the sync pool, behind one `LOCK.SYNC` ({@link Connection.batched}, batch.ts). A connection is given back once every reply sent on it came, and closed when one
 * did not come `margin` ms after it should have (ioredis's `commandTimeout` would otherwise
 * report a failure while the server still grants the lock; closing it makes the server release
 * a grant it still held for it) or the connection failed. Closing the program's client closes
 * its pools (a connection lent to a wait once the wait ends).
 *
 * Each master's place also keeps the client's session there ({@link SessionKeeper}) on a
 * connection of its own; closing the program's client closes the session (`LOCK.SESSION
 * CLOSE`) and that connection. A pooled connection that carries tied writes is bound to the
 * session (`LOCK.SESSION USE id`) in the pipeline of the first of them, and again when the
 * session was replaced; one bound that carries untied writes is unbound first (`USE NONE`):
 * {@link binding}.
 */

import keySlot from 'cluster-key-slot';

import { Batcher, Committed, commit } from './batch.js';
import { Dedicated, Exhausted, Factory, Pool, Replied } from './pool.js';
import { Session, SessionKeeper, SessionOptions, binding, tiedByUse, wantsSession } from './session.js';

export { Exhausted, PoolClosed } from './pool.js';

/** What the locks use of a node-redis client (`createClient()`, v4 and later). */
export interface NodeRedisClient {
  sendCommand(args: string[]): Promise<unknown>;
  duplicate(overrides?: { socket?: object; commandOptions?: object }): NodeRedisDuplicate;
  readonly options?: { socket?: object; commandOptions?: object };
  on(event: 'end', listener: () => void): unknown;
}

/** A node-redis duplicate: a dedicated connection of a pool. */
export interface NodeRedisDuplicate {
  connect(): Promise<unknown>;
  sendCommand(args: string[]): Promise<unknown>;
  readonly isReady: boolean;
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Closes it at once (node-redis 5 and later; 5 throws `ClientClosedError` when it is closed
   * already). */
  destroy?(): unknown;
  /** Closes it (node-redis 4, which rejects with `ClientClosedError` when it is closed already). */
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

/** An ioredis pipeline (`redis.pipeline()`): commands sent together, not a transaction. */
export interface IORedisPipeline {
  call(command: string, ...args: (string | number)[]): unknown;
  exec(): Promise<[Error | null, unknown][] | null>;
}

/** What the locks use of an ioredis client (`new Redis()`). */
export interface IORedisClient {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  duplicate(override?: Record<string, unknown>): IORedisClient;
  pipeline(): IORedisPipeline;
  connect(): Promise<void>;
  disconnect(): void;
  on(event: 'end' | 'error', listener: () => void): unknown;
  readonly status: string;
  options: { keyPrefix?: string; host?: string; port?: number };
}

/** What the locks use of an ioredis cluster client (`new Cluster()`). */
export interface IORedisCluster {
  readonly isCluster: boolean;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  slots: string[][];
  nodes(role?: 'all' | 'master' | 'slave'): IORedisClient[];
  refreshSlotsCache(callback?: (error?: Error | null) => void): void;
  options: { keyPrefix?: string };
}

/** A node-redis or ioredis client, of one server or of a Redis Cluster. */
export type Client = NodeRedisClient | IORedisClient | NodeRedisCluster | IORedisCluster;

/** The most connections the locks of one client keep open to one master, per pool. */
export interface PoolSizes {
  /** For waits in the server (`acquire({ wait })`, `using`): each waiter holds one as long as
   * it waits (default 32). */
  wait?: number;
  /** For synced writes — a grant without waiting, a renewal — and for writes tied to a
   * session (default 16). */
  sync?: number;
}

/** Which pool a connection is borrowed from. */
export type PoolKind = keyof PoolSizes;

export const DEFAULT_POOL_SIZES: Required<PoolSizes> = { wait: 32, sync: 16 };

/** A pooled connection lent to one caller, to the master serving its key. */
export interface Own {
  /** The client's session on that master, when the caller asked for it ({@link
   * Connection.lend}): the one a command ending in `SESSION` is tied to. */
  readonly tie: Session | undefined;
  /**
   * Sends `commands` as one pipeline (never `MULTI`), and resolves to their replies in order,
   * an error reply as an `Error` value, with when each came (ms since the epoch). Acquires and
   * renewals ending in `SESSION` are tied to {@link tie} (none: untied), the others to none:
   * `LOCK.SESSION USE` goes first in the same pipeline when the connection's binding must
   * change ({@link binding}), and its reply is not among theirs. Rejects with {@link LostReply}
   * when not every reply came within `timeoutMs`, or the connection failed — or when `USE NONE`
   * was refused while an untied write behind it was done (it may have been tied to the session
   * the connection was bound to): the connection is then closed, not reused. Throws when tied
   * and untied acquires or renewals are mixed. When `signal` aborts first (a blocked `LOCK.OBSERVE`
   * given up on), rejects with its reason, and the connection is closed.
   */
  pipeline(commands: string[][], timeoutMs: number | undefined, signal?: AbortSignal): Promise<Replies>;
}

/** The replies of a pipeline, in order, and when each came (ms since the epoch). */
export interface Replies {
  replies: unknown[];
  arrived: number[];
}

/** A client (or a cluster node's client) whose duplicates a pool keeps. */
type Origin = NodeRedisClient | IORedisClient;

/** One master's pools, and the client they duplicate. */
interface Place {
  origin: Origin;
  pools: Record<PoolKind, Pool<Dedicated>>;
  /** The synced writes queued for the sync pool ({@link Connection.batched}): tied to the
   * session, and not. */
  batches: { tied: Batcher; untied: Batcher };
  /** The client's session on this master, once a lock asked for it. */
  session?: SessionKeeper;
}

/** The client as the locks use it: commands on a lock go to the master serving it (in a
 * cluster, the master of its slot). */
export class Connection {
  /** ioredis's `keyPrefix`, which it does not apply to module commands: the locks do. */
  readonly prefix: string;

  constructor(private readonly client: Client) {
    this.prefix = isIORedis(client) || isIORedisCluster(client) ? (client.options.keyPrefix ?? '') : '';
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

  /** Whether the locks of this client tie their holdings to a session ({@link
   * setSessionOptions}; default true). */
  get sessions(): boolean {
    return SESSION_OPTIONS.get(this.client)?.enabled !== false;
  }

  /**
   * Lends `use` a connection of the `kind` pool to the master serving `key`, and takes it back
   * when `use` settles (closed if a reply was lost or it reached a replica). With `tied`, the
   * client's session on that master comes with it (`own.tie`; opened first if need be). In a
   * cluster it follows `MOVED` (relearning the slots) and `ASK` (to the importing master) that
   * `use` throws — each master with its own session. Rejects with {@link Exhausted} when no
   * connection came free before `deadline` (ms since the epoch; `undefined`: no limit), with
   * the connect error when a new one could not connect, and with why a session could not be
   * opened.
   */
  async lend<T>(kind: PoolKind, key: string, deadline: number | undefined, use: (own: Own) => Promise<T>, tied = false): Promise<T> {
    let asking: string | undefined;
    for (let redirects = 0; ; redirects++) {
      try {
        return await this.lendOnce(kind, key, deadline, asking, use, tied);
      } catch (error) {
        const redirect = /^(MOVED|ASK) \d+ (\S+)/.exec(error instanceof Error ? error.message : '');
        if (!redirect || redirects >= REDIRECTS) throw error;
        asking = redirect[1] === 'ASK' ? redirect[2] : undefined;
        if (!asking) await this.relearnSlots(key);
      }
    }
  }

  /**
   * Sends `command` (a grant or a renewal, without its flag) to the master serving `key` in the
   * next batch of the writes queued for it ({@link Batcher}: together on one connection of the
   * sync pool, `LOCK.SYNC` behind them), queued until `deadline` (ms since the epoch), the
   * batch's replies waited for up to `timeoutMs`: its reply and `LOCK.SYNC`'s. One ending in
   * `SESSION` is tied to the client's session on that master. In a cluster it follows `MOVED`
   * (relearning the slots) and `ASK` (alone, to the importing master). Rejects as {@link lend}.
   */
  async batched(key: string, command: string[], deadline: number, timeoutMs: number): Promise<Committed> {
    const tied = wantsSession(command);
    let asking: string | undefined;
    for (let redirects = 0; ; redirects++) {
      let committed: Committed;
      if (asking === undefined) {
        const place = this.place(this.masterAddress(key), await this.origin(key));
        committed = await place.batches[tied ? 'tied' : 'untied'].add(command, deadline, timeoutMs);
      } else {
        committed = await this.lendOnce('sync', key, deadline, asking, async (own) => (await commit(own, [command], timeoutMs))[0], tied);
      }
      const redirect = /^(MOVED|ASK) \d+ (\S+)/.exec(committed.reply instanceof Error ? committed.reply.message : '');
      if (!redirect || redirects >= REDIRECTS) return committed;
      asking = redirect[1] === 'ASK' ? redirect[2] : undefined;
      if (!asking) await this.relearnSlots(key);
    }
  }

  private async lendOnce<T>(
    kind: PoolKind,
    key: string,
    deadline: number | undefined,
    asking: string | undefined,
    use: (own: Own) => Promise<T>,
    tied: boolean,
  ): Promise<T> {
    const address = asking ?? this.masterAddress(key);
    const place = this.place(address, await this.origin(key, asking));
    return this.lendFrom(place, kind, deadline, asking !== undefined, use, tied);
  }

  /** {@link lendOnce} on the master of `place` (`asking`: after `ASK`). */
  private async lendFrom<T>(
    place: Place,
    kind: PoolKind,
    deadline: number | undefined,
    asking: boolean,
    use: (own: Own) => Promise<T>,
    tied: boolean,
  ): Promise<T> {
    // The session first: one that cannot be opened (a replica: READONLY) costs no pooled
    // connection.
    const tie = tied && this.sessions ? await this.keeper(place).current() : undefined;
    const pool = place.pools[kind];
    const dedicated = await pool.borrow(deadline);
    const lent = new Lent(dedicated, asking, tie);
    try {
      return await use(lent);
    } finally {
      if (lent.spent) pool.discard(dedicated);
      else pool.giveBack(dedicated);
    }
  }

  /** The pools to the master at `address`, made on first use (and again when the cluster
   * client replaced its client for that node: the session stays, reconnecting through the new
   * one); closed, with the session, when that client closes. */
  private place(address: string, origin: Origin): Place {
    const places = perClient(PLACES, this.client);
    const known = places.get(address);
    if (known?.origin === origin) return known;
    const sizes = { ...DEFAULT_POOL_SIZES, ...SIZES.get(this.client) };
    const factory = dedicatedFactory(origin);
    const pools = { wait: new Pool(factory, sizes.wait), sync: new Pool(factory, sizes.sync) };
    const batcher = (tied: boolean): Batcher => new Batcher((deadline, use) => this.lendFrom(place, 'sync', deadline, false, use, tied));
    const place: Place = { origin, pools, batches: { tied: batcher(true), untied: batcher(false) } };
    known?.pools.wait.close();
    known?.pools.sync.close();
    if (known?.session) {
      place.session = known.session;
      place.session.open = factory.open;
    }
    places.set(address, place);
    origin.on('end', () => {
      place.pools.wait.close();
      place.pools.sync.close();
      if (places.get(address) === place) {
        places.delete(address);
        void place.session?.close();
      }
    });
    return place;
  }

  /** The client's session on the master of `place`, made (not yet opened) on first use. */
  private keeper(place: Place): SessionKeeper {
    place.session ??= new SessionKeeper(dedicatedFactory(place.origin).open, SESSION_OPTIONS.get(this.client)?.grace);
    return place.session;
  }

  /** The client the master serving `key` (or the node at `address`) is reached through. */
  private async origin(key: string, address?: string): Promise<Origin> {
    const client = this.client;
    if (isIORedisCluster(client)) return this.ioredisNode(client, address ?? this.masterAddress(key));
    if (isNodeRedisCluster(client)) return this.nodeRedisNode(client, key, address);
    return client;
  }

  /** `host:port` of the master serving `key`, as the cluster client knows it now (`''` for
   * one server). */
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

/** Sets the sizes of the pools the locks of `client` borrow connections from; pools already
 * open take the new sizes too (a smaller one closes connections as they come back). */
export function setPoolSizes(client: Client, sizes: PoolSizes): void {
  for (const size of Object.values(sizes)) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`a pool size must be a whole number of at least 1, not ${size}`);
  }
  const merged = { ...DEFAULT_POOL_SIZES, ...SIZES.get(client), ...sizes };
  SIZES.set(client, merged);
  for (const place of PLACES.get(client)?.values() ?? []) {
    place.pools.wait.size = merged.wait;
    place.pools.sync.size = merged.sync;
  }
}

/**
 * Sets how the locks of `client` tie their holdings to the client's session ({@link
 * SessionOptions}): `enabled` (default true) and the `grace` in ms (default: the server's). Set
 * it right after creating the client: `enabled` is read when a lock is created, `grace` when
 * the session opens (on the first acquire; per master in a cluster). Throws `RangeError` for a
 * grace that is not a whole number of at least 100 ms; the server refuses one above its
 * `lock.session-max-grace-ms` (60 000 by default) when the session opens, and the acquire
 * rejects with that error.
 */
export function setSessionOptions(client: Client, options: SessionOptions): void {
  const { grace } = options;
  if (grace !== undefined && (!Number.isInteger(grace) || grace < 100)) {
    throw new RangeError(`a session grace must be a whole number of at least 100 ms, not ${grace}`);
  }
  SESSION_OPTIONS.set(client, { ...SESSION_OPTIONS.get(client), ...options });
}

/** A pooled connection while it is lent: it knows whether it may be reused. */
class Lent implements Own {
  /** A reply did not come (or the connection failed), or the server is no longer a master
   * (`READONLY`: a failover demoted it; a new connection finds the new one): close it. */
  spent = false;

  constructor(
    private readonly dedicated: Dedicated,
    private readonly asking: boolean,
    readonly tie: Session | undefined,
  ) {}

  async pipeline(commands: string[][], timeoutMs: number | undefined, signal?: AbortSignal): Promise<Replies> {
    const { commands: writes, use, to } = binding(commands, this.tie, this.dedicated.session);
    // After ASK, `ASKING` goes right before each command on a key (it covers the next command;
    // before the keyless `LOCK.SESSION` it does nothing).
    const sent = [...(use ? [use] : []), ...writes].flatMap((command) => (this.asking && command[0].startsWith('LOCK.') ? [['ASKING'], command] : [command]));
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const expiry = new Promise<never>((_, reject) => {
      if (timeoutMs !== undefined) timer = setTimeout(() => reject(new LostReply('no reply in time')), timeoutMs);
      if (signal) {
        onAbort = () => reject(new Aborted(signal.reason));
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
    });
    const replying = this.dedicated.pipeline(sent);
    // Replies that come after the connection was given up on are dropped with it.
    replying.catch(() => {});
    try {
      const replied = (await Promise.race([replying, expiry])).filter((_, at) => sent[at][0] !== 'ASKING');
      const failure = replied.find(([reply]) => reply instanceof Error && !isServerError(reply));
      if (failure) throw new LostReply(String(failure[0]));
      const used = use ? replied.shift()![0] : undefined;
      const replies = replied.map(([reply]) => reply);
      this.spent ||= replies.some((reply) => reply instanceof Error && reply.message.startsWith('READONLY'));
      if (use && used === 'OK') {
        this.dedicated.session = to;
      } else if (use && to === undefined && writes.some((command, at) => tiedByUse(command) && !(replies[at] instanceof Error))) {
        throw new LostReply(`LOCK.SESSION USE NONE replied ${String(used)}: a write behind it may be tied to a session`);
      }
      // A refused `USE id` leaves the binding as it was; the writes behind it name the session
      // themselves (refused with it when it ended).
      return { replies, arrived: replied.map(([, at]) => at) };
    } catch (error) {
      this.spent = true;
      if (error instanceof Aborted) throw error.reason;
      throw error instanceof LostReply ? error : new LostReply(String(error));
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }
}

/** A pipeline given up on because its caller's signal aborted: `reason` is the signal's. */
class Aborted {
  constructor(readonly reason: unknown) {}
}

/** Opens, checks and closes duplicates of `origin`. */
function dedicatedFactory(origin: Origin): Factory<Dedicated> {
  return {
    open: () => (isIORedis(origin) ? openIORedis(origin) : openNodeRedis(origin)),
    alive: (dedicated) => dedicated.alive(),
    close: (dedicated) => dedicated.close(),
  };
}

async function openIORedis(origin: IORedisClient): Promise<Dedicated> {
  const own = origin.duplicate({
    commandTimeout: undefined,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
    lazyConnect: true,
  });
  // A dropped connection rejects its commands; the handler keeps ioredis from logging it.
  own.on('error', () => {});
  await own.connect();
  return {
    // Commands sent one after another without waiting go out in order, and each reply is
    // seen as it comes: a pipeline.
    pipeline: (commands) => Promise.all(commands.map(([command, ...args]) => replied(own.call(command, ...args)))),
    alive: () => own.status === 'ready',
    close: () => closeQuietly(() => own.disconnect()),
  };
}

async function openNodeRedis(origin: NodeRedisClient): Promise<Dedicated> {
  const own = origin.duplicate({
    socket: { ...origin.options?.socket, reconnectStrategy: false },
    // No command timeout of node-redis's own (node-redis 6 gives every command 5 s unless told):
    // each pipeline has the package's, which closes the connection when it runs out. One of
    // node-redis's would fail a wait longer than it, and costs a timer and an AbortSignal per
    // command (a tenth of the package's CPU time with 64 concurrent synced grants).
    commandOptions: { ...origin.options?.commandOptions, timeout: 0 },
  });
  // The error handler keeps a dropped connection from crashing the program.
  own.on('error', () => {});
  await own.connect();
  return {
    // Commands sent in one tick go out in one write: a pipeline.
    pipeline: (commands) => Promise.all(commands.map((args) => replied(own.sendCommand(args)))),
    alive: () => own.isReady,
    close: () => closeQuietly(() => (own.destroy ? own.destroy() : own.disconnect?.())),
  };
}

/**
 * Closes a connection the locks opened (a duplicate of the program's client) at once with
 * `close`, its library's call for it, which may throw or reject: this never does, with every
 * version of either library and in every state of the connection. One already closed — as a
 * connection that dropped is, since it does not reconnect — has nothing left to close, but
 * node-redis 5's `destroy()` throws `ClientClosedError` on it and node-redis 4's `disconnect()`
 * rejects with it; a throw here would keep a dead session connection from being replaced, and
 * reach the caller of a pool.
 */
function closeQuietly(close: () => unknown): void {
  try {
    Promise.resolve(close()).catch(() => {});
  } catch {
    // Closed already.
  }
}

function replied(reply: Promise<unknown>): Promise<Replied> {
  return reply.then(
    (value) => [value, Date.now()],
    (error: unknown) => [error, Date.now()],
  );
}

/** How many `MOVED` / `ASK` redirections a command on a connection of its own follows. */
const REDIRECTS = 5;

/** The pools per client, by master address. */
const PLACES = new WeakMap<Client, Map<string, Place>>();
/** The pool sizes set per client. */
const SIZES = new WeakMap<Client, Required<PoolSizes>>();
/** The session options set per client. */
const SESSION_OPTIONS = new WeakMap<Client, SessionOptions>();

function perClient<T>(map: WeakMap<Client, Map<string, T>>, client: Client): Map<string, T> {
  let known = map.get(client);
  if (!known) {
    known = new Map();
    map.set(client, known);
  }
  return known;
}

/** A reply did not come: the server may have done the command, or not. */
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
