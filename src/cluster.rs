//! Where a lock lives in Redis Cluster: a hand-over may only create a lock on the master that
//! owns its slot. Clients blocked in `LOCK.ACQUIRE ... WAIT` are connections to one node, and
//! Redis does not unblock module-blocked clients when their key's slot migrates away.

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{Context, ContextFlags, RedisError, RedisString, RedisValue};

/// Whether the server runs in cluster mode (`cluster-enabled`, which cannot change while it
/// runs), noted at load so that commands need not ask the server every time.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Notes at load whether the server runs in cluster mode.
pub fn note_mode(ctx: &Context) {
    let enabled = ctx.get_flags().contains(ContextFlags::CLUSTER);
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// True when the server runs in cluster mode (as noted at load).
#[must_use]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// True unless this node runs in cluster mode and does not own `key`'s slot, or is migrating
/// it to another node (`CLUSTER KEYSLOT`, and the `myself` line of `CLUSTER NODES`).
///
/// # Errors
/// When the cluster commands fail.
pub fn serves(ctx: &Context, key: &RedisString) -> Result<bool, RedisError> {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return Ok(true);
    }
    let RedisValue::Integer(slot) =
        ctx.call("CLUSTER", &[b"KEYSLOT".as_slice(), key.as_slice()])?
    else {
        return Err(RedisError::Str("ERR CLUSTER KEYSLOT replied no slot"));
    };
    let nodes = String::try_from(ctx.call("CLUSTER", &["NODES"])?)?;
    Ok(nodes
        .lines()
        .find(|line| {
            line.split(' ')
                .nth(2)
                .is_some_and(|flags| flags.contains("myself"))
        })
        .is_some_and(|myself| owns(myself, slot)))
}

/// Whether a `CLUSTER NODES` line lists `slot` as its own and not migrating: its fields from
/// the ninth on are slots (`5`), ranges (`0-5460`) and migrations (`[5->-<node-id>]`).
fn owns(line: &str, slot: i64) -> bool {
    let mut owned = false;
    for field in line.split(' ').skip(8) {
        if let Some(migration) = field.strip_prefix('[') {
            if migration.split("->-").next().and_then(|s| s.parse().ok()) == Some(slot) {
                return false;
            }
        } else {
            let (first, last) = field.split_once('-').unwrap_or((field, field));
            if let (Ok(first), Ok(last)) = (first.parse::<i64>(), last.parse::<i64>()) {
                owned |= (first..=last).contains(&slot);
            }
        }
    }
    owned
}

#[cfg(test)]
mod tests {
    use super::owns;

    const MYSELF: &str =
        "07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-e7d1]";

    #[test]
    fn slots_in_ranges_and_single_slots_are_owned() {
        assert!(owns(MYSELF, 0));
        assert!(owns(MYSELF, 5460));
        assert!(owns(MYSELF, 7000));
        assert!(!owns(MYSELF, 6000));
    }

    #[test]
    fn a_migrating_slot_is_not_served() {
        let migrating = MYSELF.replace("[5461->-e7d1]", "[42->-e7d1]");
        assert!(!owns(&migrating, 42));
        assert!(owns(&migrating, 41));
    }

    #[test]
    fn a_node_without_slots_owns_none() {
        assert!(!owns(
            "e7d1 127.0.0.1:30002@40002 myself,master - 0 0 2 connected",
            0
        ));
    }
}
