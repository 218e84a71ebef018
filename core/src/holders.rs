//! The holders of a shared lock (a read-write lock's readers, a semaphore's permits): each with
//! its own owner, fencing token, hold count and lease deadline.
//!
//! Every operation a command needs is O(1) or O(log k) for k holders, where Redisson's Lua
//! read lock and semaphores scan all of them:
//! - by owner: a hash index ([`hashbrown::HashTable`] of slot numbers, `SipHash` with a per-process
//!   key, so clients cannot choose owners that collide);
//! - by lease: a min-max heap of deadlines ([`MinMaxHeap`]), whose smallest is the next lease
//!   to end and whose largest is the key's own expiry (`PTTL key`);
//! - by token: the slots, in the order holders arrived, which is token order since every new
//!   holding gets a new, larger token. A holder that leaves leaves a dead slot behind, dropped
//!   when it is last and compacted away once the dead outnumber the living (amortized O(1)).
//!
//! A holder takes 72 bytes, plus about 12 for the index and the heap.

use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;

use hashbrown::HashTable;

use crate::heap::{MinMaxHeap, Slots, grow_gently};
use crate::owner::Owner;
use crate::session::Tie;

/// One shared holding. Two are equal when their owner, token, deadline, hold count and
/// tie are: where the deadline heap keeps them is not part of the holding.
#[derive(Debug, Clone)]
pub struct Holder {
    /// The owner identifier (1 to 256 bytes).
    pub owner: Owner,
    /// The fencing token issued when this holding began.
    pub token: u64,
    /// When the lease ends, unix time in ms.
    pub deadline_ms: i64,
    /// The reentrant hold count; 0 marks a dead slot.
    pub holds: u32,
    /// Where this holder sits in the deadline heap.
    position: u32,
    /// The session it is tied to and its entry there ([`crate::session`]), on the master that
    /// tied it.
    pub tie: Option<Tie>,
}

impl Holder {
    /// A holding of `owner` with this `token`, hold count and lease deadline.
    #[must_use]
    pub fn new(owner: &[u8], token: u64, holds: u32, deadline_ms: i64) -> Self {
        Self {
            owner: Owner::new(owner),
            token,
            deadline_ms,
            holds,
            position: 0,
            tie: None,
        }
    }

    fn is_dead(&self) -> bool {
        self.holds == 0
    }
}

impl PartialEq for Holder {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.owner,
            self.token,
            self.deadline_ms,
            self.holds,
            self.tie,
        ) == (
            &other.owner,
            other.token,
            other.deadline_ms,
            other.holds,
            other.tie,
        )
    }
}

impl Eq for Holder {}

/// The slots, as the deadline heap sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Slab(Vec<Holder>);

impl Slab {
    fn holder(&self, slot: u32) -> Option<&Holder> {
        self.0.get(slot as usize)
    }

    fn holder_mut(&mut self, slot: u32) -> Option<&mut Holder> {
        self.0.get_mut(slot as usize)
    }

    fn hash_of(&self, slot: u32) -> u64 {
        self.holder(slot).map_or(0, |holder| hash(&holder.owner))
    }
}

impl Slots for Slab {
    fn key(&self, slot: u32) -> i64 {
        self.holder(slot)
            .map_or(i64::MAX, |holder| holder.deadline_ms)
    }
    fn set_position(&mut self, slot: u32, position: u32) {
        if let Some(holder) = self.holder_mut(slot) {
            holder.position = position;
        }
    }
}

/// The hash key of owners, random per process (as Redis seeds its dictionaries).
static HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

fn hash(owner: &[u8]) -> u64 {
    HASHER.hash_one(owner)
}

/// A shared lock's holders.
#[derive(Debug, Clone, Default)]
pub struct Holders {
    slab: Slab,
    by_owner: HashTable<u32>,
    by_deadline: MinMaxHeap,
    /// Dead slots in `slab`.
    dead: usize,
    /// Heap bytes of owners too long to be stored inline.
    spilled_bytes: usize,
}

impl Holders {
    /// How many hold the lock.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slab.0.len() - self.dead
    }

    /// True when nobody holds it.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `owner`'s holding.
    #[must_use]
    pub fn get(&self, owner: &[u8]) -> Option<&Holder> {
        self.slab.holder(self.slot_of(owner)?)
    }

    /// The holder whose lease ends first.
    #[must_use]
    pub fn soonest(&self) -> Option<&Holder> {
        self.slab.holder(self.by_deadline.min()?)
    }

    /// The last lease to end: the key's expiry, in unix ms.
    #[must_use]
    pub fn latest_deadline(&self) -> Option<i64> {
        let slot = self.by_deadline.max(&self.slab)?;
        self.slab.holder(slot).map(|holder| holder.deadline_ms)
    }

    /// The holders, in token order.
    pub fn iter(&self) -> impl Iterator<Item = &Holder> {
        self.slab.0.iter().filter(|holder| !holder.is_dead())
    }

    /// The holders, newest (largest token) first.
    pub fn iter_newest_first(&self) -> impl Iterator<Item = &Holder> {
        self.slab.0.iter().rev().filter(|holder| !holder.is_dead())
    }

    /// Adds `holder`, whose owner does not hold the lock yet. O(log k) and O(1) amortized when
    /// its token is the largest, as a new holding's always is; O(k) otherwise.
    pub fn insert(&mut self, holder: Holder) {
        debug_assert!(self.get(&holder.owner).is_none());
        self.spilled_bytes += holder.owner.heap_size();
        let hash = hash(&holder.owner);
        // Slots stay in token order, dead ones included (they keep their token); a holder
        // whose token equals others' (`LOCK.RAISE` can make one) goes after them, so holders
        // loaded in their saved order keep it.
        let slot = self
            .slab
            .0
            .partition_point(|other| other.token <= holder.token);
        grow_gently(&mut self.slab.0);
        self.slab.0.insert(slot, holder);
        let slot = as_slot(slot);
        if (slot as usize) + 1 < self.slab.0.len() {
            self.renumber(|other| if other >= slot { other + 1 } else { other });
        }
        let slab = &self.slab;
        self.by_owner
            .insert_unique(hash, slot, |&other| slab.hash_of(other));
        self.by_deadline.push(&mut self.slab, slot);
    }

    /// Sets `owner`'s hold count (at least 1) and lease deadline; false if it holds nothing.
    pub fn update(&mut self, owner: &[u8], holds: u32, deadline_ms: i64) -> bool {
        let Some(slot) = self.slot_of(owner) else {
            return false;
        };
        let Some(holder) = self.slab.holder_mut(slot) else {
            return false;
        };
        holder.holds = holds;
        holder.deadline_ms = deadline_ms;
        let position = holder.position;
        self.by_deadline.changed(&mut self.slab, position);
        true
    }

    /// The tie `owner`'s holding keeps, to change ([`crate::lock::Lock::tie`]).
    pub fn tie_mut(&mut self, owner: &[u8]) -> Option<&mut Option<Tie>> {
        let slot = self.slot_of(owner)?;
        Some(&mut self.slab.holder_mut(slot)?.tie)
    }

    /// Unties every holding.
    pub fn untie_all(&mut self) {
        for holder in &mut self.slab.0 {
            holder.tie = None;
        }
    }

    /// Sets `holder` as given (a master's effect on a replica): in place when its owner holds
    /// the lock with the same token, else in place of the owner's holding, if any.
    pub fn put(&mut self, holder: Holder) {
        let same = self
            .get(&holder.owner)
            .is_some_and(|held| held.token == holder.token);
        if same {
            self.update(&holder.owner, holder.holds, holder.deadline_ms);
        } else {
            self.remove(&holder.owner);
            self.insert(holder);
        }
    }

    /// Gives `owner`'s holding the token `token` if that is larger than its own; returns the
    /// holding's token afterwards, or `None` if `owner` holds nothing. O(log k) when the token
    /// becomes the largest of the lock, O(k) otherwise.
    pub fn raise(&mut self, owner: &[u8], token: u64) -> Option<u64> {
        let current = self.get(owner)?.token;
        if token <= current {
            return Some(current);
        }
        let mut holder = self.remove(owner)?;
        holder.token = token;
        self.insert(holder);
        Some(token)
    }

    /// Ends `owner`'s holding and returns it.
    pub fn remove(&mut self, owner: &[u8]) -> Option<Holder> {
        let slot = self.slot_of(owner)?;
        self.take(slot)
    }

    /// Ends the holding whose lease ends first if it ended by `now_ms`, and returns it.
    pub fn pop_expired(&mut self, now_ms: i64) -> Option<Holder> {
        let slot = self.by_deadline.min()?;
        if self.slab.holder(slot)?.deadline_ms <= now_ms {
            self.take(slot)
        } else {
            None
        }
    }

    /// Heap bytes owned (for `MEMORY USAGE`).
    #[must_use]
    pub fn heap_size(&self) -> usize {
        self.slab.0.capacity() * size_of::<Holder>()
            + self.by_owner.allocation_size()
            + self.by_deadline.heap_size()
            + self.spilled_bytes
    }

    fn slot_of(&self, owner: &[u8]) -> Option<u32> {
        let slab = &self.slab;
        self.by_owner
            .find(hash(owner), |&slot| {
                slab.holder(slot)
                    .is_some_and(|holder| *holder.owner == *owner)
            })
            .copied()
    }

    /// Takes the holder in `slot` out of both indexes and leaves a dead slot, then drops dead
    /// slots at the end and compacts when most are dead.
    fn take(&mut self, slot: u32) -> Option<Holder> {
        let (position, token) = self
            .slab
            .holder(slot)
            .map(|holder| (holder.position, holder.token))?;
        let hash = self.slab.hash_of(slot);
        if let Ok(entry) = self.by_owner.find_entry(hash, |&other| other == slot) {
            entry.remove();
        }
        self.by_deadline.remove(&mut self.slab, position);
        let dead = Holder::new(b"", token, 0, 0);
        let holder = std::mem::replace(self.slab.holder_mut(slot)?, dead);
        self.spilled_bytes -= holder.owner.heap_size();
        self.dead += 1;
        while self.slab.0.last().is_some_and(Holder::is_dead) {
            self.slab.0.pop();
            self.dead -= 1;
        }
        if self.dead > 8 && self.dead > self.len() {
            self.compact();
        }
        Some(holder)
    }

    /// Drops every dead slot, keeping the living in token order.
    fn compact(&mut self) {
        let mut new_slot = Vec::with_capacity(self.slab.0.len());
        let mut living = 0;
        for holder in &self.slab.0 {
            new_slot.push(as_slot(living));
            living += usize::from(!holder.is_dead());
        }
        self.slab.0.retain(|holder| !holder.is_dead());
        self.slab.0.shrink_to(self.slab.0.len() * 9 / 8);
        self.dead = 0;
        self.renumber(|slot| new_slot.get(slot as usize).copied().unwrap_or(slot));
    }

    /// Rewrites every slot number in the indexes after the slots moved.
    fn renumber(&mut self, renumber: impl Fn(u32) -> u32) {
        for slot in self.by_owner.iter_mut() {
            *slot = renumber(*slot);
        }
        self.by_deadline.renumber(&renumber);
    }
}

impl PartialEq for Holders {
    /// The same holdings, however they are laid out.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Holders {}

/// Slot numbers fit in `u32`: a lock cannot hold more holders than memory.
fn as_slot(slot: usize) -> u32 {
    u32::try_from(slot).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// The holders as a plain list: what [`Holders`] must agree with.
    fn check(holders: &Holders, model: &[(String, u64, i64)]) {
        assert_eq!(holders.len(), model.len());
        let mut tokens: Vec<u64> = model.iter().map(|(_, token, _)| *token).collect();
        tokens.sort_unstable();
        let kept: Vec<u64> = holders.iter().map(|holder| holder.token).collect();
        assert_eq!(kept, tokens, "token order");
        for (owner, token, deadline) in model {
            let holder = holders
                .get(owner.as_bytes())
                .map(|h| (h.token, h.deadline_ms));
            assert_eq!(holder, Some((*token, *deadline)), "{owner}");
        }
        let deadlines = model.iter().map(|(_, _, deadline)| *deadline);
        assert_eq!(
            holders.soonest().map(|h| h.deadline_ms),
            deadlines.clone().min()
        );
        assert_eq!(holders.latest_deadline(), deadlines.max());
        let newest = holders.iter_newest_first().next().map(|h| h.token);
        assert_eq!(newest, tokens.last().copied());
    }

    #[test]
    fn holders_agree_with_a_plain_list_under_random_changes() {
        for seed in 0..100 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (mut holders, mut model) = (Holders::default(), Vec::new());
            let mut next_token = 1_000;
            for step in 0..400 {
                match rng.random_range(0..10) {
                    0..4 => {
                        // Mostly new holdings with the largest token; now and then a raised or
                        // replicated one that lands in the middle.
                        next_token += rng.random_range(1..5);
                        let token = if rng.random_bool(0.1) {
                            next_token - rng.random_range(0..next_token.min(900))
                        } else {
                            next_token
                        };
                        let owner =
                            format!("owner-{seed}-{step}{}", "x".repeat(rng.random_range(0..60)));
                        if model.iter().any(|(_, t, _)| *t == token) {
                            continue;
                        }
                        let deadline = rng.random_range(0..1_000);
                        holders.insert(Holder::new(owner.as_bytes(), token, 1, deadline));
                        model.push((owner, token, deadline));
                    }
                    4..6 if !model.is_empty() => {
                        let (owner, ..) = model.swap_remove(rng.random_range(0..model.len()));
                        assert!(holders.remove(owner.as_bytes()).is_some());
                    }
                    6..8 if !model.is_empty() => {
                        let at = rng.random_range(0..model.len());
                        model[at].2 = rng.random_range(0..1_000);
                        assert!(holders.update(model[at].0.as_bytes(), 2, model[at].2));
                    }
                    _ => {
                        let now = rng.random_range(0..300);
                        while let Some(gone) = holders.pop_expired(now) {
                            assert!(gone.deadline_ms <= now);
                        }
                        model.retain(|(_, _, deadline)| *deadline > now);
                    }
                }
                check(&holders, &model);
            }
            assert!(holders.get(b"nobody").is_none());
            assert!(!holders.update(b"nobody", 1, 0));
        }
    }

    #[test]
    fn a_holder_with_a_38_byte_owner_takes_under_96_bytes() {
        let mut holders = Holders::default();
        for i in 0..10_000_u64 {
            let owner = format!("8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c{i:06}:1");
            assert_eq!(owner.len(), 38);
            holders.insert(Holder::new(owner.as_bytes(), 1 + i, 1, 0));
        }
        let per_holder = holders.heap_size() / holders.len();
        assert!(per_holder <= 96, "{per_holder} bytes per holder");
    }

    #[test]
    fn dead_slots_are_compacted_away() {
        let mut holders = Holders::default();
        for i in 0..100_u64 {
            holders.insert(Holder::new(format!("o{i}").as_bytes(), 1 + i, 1, 0));
        }
        for i in 0..99 {
            holders.remove(format!("o{i}").as_bytes());
        }
        assert_eq!(holders.len(), 1);
        assert!(holders.slab.0.len() < 20, "{} slots", holders.slab.0.len());
        assert_eq!(holders.get(b"o99").map(|h| h.token), Some(100));
    }
}
