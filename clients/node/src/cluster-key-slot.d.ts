/** The Redis Cluster hash slot of a key (CRC16 of its hash tag, mod 16384): the package of that
 * name, which node-redis and ioredis use too, ships no types. */
declare module 'cluster-key-slot' {
  export default function generate(key: string | Buffer): number;
}
