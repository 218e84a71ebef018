//! In Redis Cluster, the pools of each master: a wait or a synced write goes to the master of its
//! lock's slot, on a connection of that master's own pools ([`crate::pool`]). Which master serves
//! which slot is asked with `CLUSTER SLOTS` over the shared connection, and asked again after a
//! redirect (`MOVED`, `ASK`) or a failed connection. A redirect is not followed on a pooled
//! connection — the caller gets the error, as from a wait on the cluster connection, which never
//! retries.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ConnectionAddr, ConnectionInfo, FromRedisValue, RedisError, Value};

use crate::pool::{ClientOptions, Pools, is_lost_reply};

/// Redis Cluster's number of hash slots.
const SLOTS: u16 = 16_384;

/// A master's address, as `CLUSTER SLOTS` gives it.
type Address = (String, u16);

/// The masters of a cluster and their pools.
pub(crate) struct Masters {
    /// How to reach a node (credentials, TLS), from the first seed; its address is replaced.
    seed: ConnectionInfo,
    options: ClientOptions,
    /// Who serves which slots; empty: ask again.
    slots: Mutex<Vec<(RangeInclusive<u16>, Address)>>,
    pools: Mutex<HashMap<Address, Pools>>,
}

impl Masters {
    /// The masters of the cluster reached through `seed`, with pools of `options`' sizes.
    pub(crate) fn new(seed: ConnectionInfo, options: ClientOptions) -> Self {
        Self {
            seed,
            options,
            slots: Mutex::default(),
            pools: Mutex::default(),
        }
    }

    /// The pools of the master serving `key`'s slot, asking the cluster (over `shared`) when it
    /// is not known.
    ///
    /// # Errors
    /// `CLUSTER SLOTS` failed, or no master serves the slot.
    pub(crate) async fn pools(
        &self,
        key: &str,
        shared: &ClusterConnection,
    ) -> Result<Pools, RedisError> {
        let slot = slot(key);
        if let Some(pools) = self.known(slot)? {
            return Ok(pools);
        }
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let reply = shared
            .clone()
            .route_command(redis::cmd("CLUSTER").arg("SLOTS").clone(), random)
            .await?;
        *lock(&self.slots) = slot_ranges(reply)?;
        self.known(slot)?.ok_or_else(|| {
            RedisError::from(std::io::Error::other(format!(
                "no master serves slot {slot}"
            )))
        })
    }

    /// After `error` on a master's connection: forgets who serves which slots if the cluster
    /// may have changed (a redirect, a lost connection).
    pub(crate) fn heard(&self, error: &RedisError) {
        let redirected = matches!(error.code(), Some("MOVED" | "ASK" | "CLUSTERDOWN"));
        if redirected || is_lost_reply(error) {
            lock(&self.slots).clear();
        }
    }

    /// The pools of the master known to serve `slot`, if one is.
    fn known(&self, slot: u16) -> Result<Option<Pools>, RedisError> {
        let slots = lock(&self.slots);
        let Some((_, address)) = slots.iter().find(|(range, _)| range.contains(&slot)) else {
            return Ok(None);
        };
        let mut pools = lock(&self.pools);
        if let Some(known) = pools.get(address) {
            return Ok(Some(known.clone()));
        }
        let client = redis::Client::open(self.at(address))?;
        let opened = Pools::new(&client, self.options);
        pools.insert(address.clone(), opened.clone());
        Ok(Some(opened))
    }

    /// How to reach the node at `address`: as the seed, at that address.
    fn at(&self, (host, port): &Address) -> ConnectionInfo {
        let (host, port) = (host.clone(), *port);
        let addr = match self.seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        self.seed.clone().set_addr(addr)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Redis Cluster's hash slot of `key`: CRC16 (XMODEM) of its hash tag — the part between the
/// first `{` and the next `}`, if not empty — or of the whole key, modulo 16 384.
fn slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let tag = key.iter().position(|byte| *byte == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|byte| *byte == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key)) % SLOTS
}

/// The masters' slot ranges from `CLUSTER SLOTS`: `[[first, last, [host, port, ...], replicas...], ...]`.
fn slot_ranges(reply: Value) -> Result<Vec<(RangeInclusive<u16>, Address)>, RedisError> {
    let ranges: Vec<Vec<Value>> = FromRedisValue::from_redis_value(reply)?;
    ranges
        .into_iter()
        .map(|range| {
            let mut fields = range.into_iter();
            let mut next = || fields.next().unwrap_or(Value::Nil);
            let (first, last): (u16, u16) = (parse(next())?, parse(next())?);
            let master: Vec<Value> = parse(next())?;
            let mut master = master.into_iter();
            let host: String = parse(master.next().unwrap_or(Value::Nil))?;
            let port: u16 = parse(master.next().unwrap_or(Value::Nil))?;
            Ok((first..=last, (host, port)))
        })
        .collect()
}

fn parse<T: FromRedisValue>(value: Value) -> Result<T, RedisError> {
    Ok(T::from_redis_value(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_servers() {
        // `CLUSTER KEYSLOT`'s documented examples.
        assert_eq!(slot("somekey"), 11_058);
        assert_eq!(slot("foo{hash_tag}"), 2_515);
        assert_eq!(slot("bar{hash_tag}"), 2_515);
        assert_ne!(slot("{}a"), slot("{}b"), "an empty tag: the whole key");
    }

    #[test]
    fn cluster_slots_gives_each_range_its_master() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5_460),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(30_001), bulk("id")]),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(30_004), bulk("id2")]),
        ])]);
        let ranges = slot_ranges(reply).expect("parsed");
        assert_eq!(ranges, vec![(0..=5_460, ("127.0.0.1".to_owned(), 30_001))]);
    }
}
