//! An indexed min-max heap: the soonest and the latest of a set of deadlines in O(1), and
//! insert, remove and change in O(log n) (Atkinson, Sack, Santoro and Strothotte, "Min-max
//! heaps and generalized priority queues", CACM 1986).
//!
//! The heap holds slot numbers of items kept elsewhere (the shared holders of a lock); each item
//! knows its position in the heap, so any item can be removed or moved without a search. Levels
//! alternate: a node on an even level (the root's) is the smallest of its subtree, a node on an
//! odd level the largest.

/// The items a heap orders, seen through their slot numbers.
pub trait Slots {
    /// The key of the item in `slot` (a deadline, in unix ms).
    fn key(&self, slot: u32) -> i64;
    /// Records that the item in `slot` now sits at `position` of the heap.
    fn set_position(&mut self, slot: u32, position: u32);
}

/// Slot numbers in min-max heap order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MinMaxHeap {
    slots: Vec<u32>,
}

impl MinMaxHeap {
    /// The slot with the smallest key.
    #[must_use]
    pub fn min(&self) -> Option<u32> {
        self.slots.first().copied()
    }

    /// The slot with the largest key.
    #[must_use]
    pub fn max(&self, items: &impl Slots) -> Option<u32> {
        match self.slots.as_slice() {
            [] => None,
            [only] | [_, only] => Some(*only),
            [_, left, right, ..] => Some(if items.key(*left) >= items.key(*right) {
                *left
            } else {
                *right
            }),
        }
    }

    /// Heap bytes it owns.
    #[must_use]
    pub fn heap_size(&self) -> usize {
        self.slots.capacity() * size_of::<u32>()
    }

    /// Adds `slot`, whose key `items` already knows.
    pub fn push(&mut self, items: &mut impl Slots, slot: u32) {
        grow_gently(&mut self.slots);
        self.slots.push(slot);
        self.place(items, self.slots.len() - 1);
        self.fix(items, self.slots.len() - 1);
    }

    /// Removes the slot at heap `position` (as [`Slots::set_position`] reported it).
    pub fn remove(&mut self, items: &mut impl Slots, position: u32) {
        let position = position as usize;
        let Some(last) = self
            .slots
            .len()
            .checked_sub(1)
            .filter(|last| position <= *last)
        else {
            return;
        };
        self.slots.swap(position, last);
        self.slots.pop();
        if position < last {
            self.place(items, position);
            self.fix(items, position);
        }
    }

    /// Restores the order after the key of the slot at `position` changed.
    pub fn changed(&mut self, items: &mut impl Slots, position: u32) {
        self.fix(items, position as usize);
    }

    /// Replaces every slot number by `renumber(slot)`: the keys stay where they are.
    pub fn renumber(&mut self, renumber: impl Fn(u32) -> u32) {
        for slot in &mut self.slots {
            *slot = renumber(*slot);
        }
    }

    /// The key at `position` (callers stay within the heap).
    fn key(&self, items: &impl Slots, position: usize) -> i64 {
        self.slots
            .get(position)
            .map_or(i64::MAX, |slot| items.key(*slot))
    }

    fn place(&self, items: &mut impl Slots, position: usize) {
        if let Some(slot) = self.slots.get(position) {
            items.set_position(*slot, as_position(position));
        }
    }

    fn swap(&mut self, items: &mut impl Slots, a: usize, b: usize) {
        if a.max(b) >= self.slots.len() {
            return;
        }
        self.slots.swap(a, b);
        self.place(items, a);
        self.place(items, b);
    }

    /// The item at `position` may be out of order with its ancestors or its descendants (not
    /// both): moves it up or down until the heap is in order again.
    fn fix(&mut self, items: &mut impl Slots, position: usize) {
        if position == 0 {
            self.trickle_down(items, 0);
            return;
        }
        let parent = (position - 1) / 2;
        let on_min = on_min_level(position);
        let (mine, parents) = (self.key(items, position), self.key(items, parent));
        if (on_min && mine > parents) || (!on_min && mine < parents) {
            // It belongs on the parent's kind of level; the parent comes down in its place.
            self.swap(items, position, parent);
            self.bubble_up(items, parent, !on_min);
            self.trickle_down(items, position);
        } else if !self.bubble_up(items, position, on_min) {
            self.trickle_down(items, position);
        }
    }

    /// Moves the item at `position` up over its grandparents while it is smaller (`min`) or
    /// larger than them. True if it moved.
    fn bubble_up(&mut self, items: &mut impl Slots, mut position: usize, min: bool) -> bool {
        let start = position;
        while position > 2 {
            let grandparent = (position - 3) / 4;
            let (mine, theirs) = (self.key(items, position), self.key(items, grandparent));
            if (min && mine < theirs) || (!min && mine > theirs) {
                self.swap(items, position, grandparent);
                position = grandparent;
            } else {
                break;
            }
        }
        position != start
    }

    fn trickle_down(&mut self, items: &mut impl Slots, mut position: usize) {
        let min = on_min_level(position);
        let before = |a: i64, b: i64| if min { a < b } else { a > b };
        loop {
            let first_child = 2 * position + 1;
            let descendants = [
                first_child,
                first_child + 1,
                2 * first_child + 1,
                2 * first_child + 2,
                2 * first_child + 3,
                2 * first_child + 4,
            ];
            let Some(best) = descendants
                .into_iter()
                .filter(|&candidate| candidate < self.slots.len())
                .reduce(|best, candidate| {
                    if before(self.key(items, candidate), self.key(items, best)) {
                        candidate
                    } else {
                        best
                    }
                })
            else {
                return;
            };
            if !before(self.key(items, best), self.key(items, position)) {
                return;
            }
            self.swap(items, position, best);
            if best <= first_child + 1 {
                return; // a child: it has no grandchildren to compete with
            }
            let parent = (best - 1) / 2;
            if before(self.key(items, parent), self.key(items, best)) {
                self.swap(items, best, parent);
            }
            position = best;
        }
    }
}

/// Makes room for one more item in a full `items`, growing it by an eighth instead of doubling:
/// a lock with many holders then keeps at most 12.5% unused, and pushes stay O(1) amortized
/// (each item is copied about eight times over the vector's growth).
pub fn grow_gently<T>(items: &mut Vec<T>) {
    if items.len() == items.capacity() {
        items.reserve_exact((items.len() / 8).max(4));
    }
}

/// True for positions on a min level: depth 0, 2, 4, ...
fn on_min_level(position: usize) -> bool {
    (position + 1).ilog2().is_multiple_of(2)
}

/// Heap positions fit in `u32`: a lock cannot hold more holders than memory.
fn as_position(position: usize) -> u32 {
    u32::try_from(position).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// Items with a key and a heap position each; `None` for a removed one.
    #[derive(Default)]
    struct Items(Vec<Option<(i64, u32)>>);

    impl Slots for Items {
        fn key(&self, slot: u32) -> i64 {
            self.0[slot as usize].map_or(i64::MIN, |(key, _)| key)
        }
        fn set_position(&mut self, slot: u32, position: u32) {
            if let Some(item) = &mut self.0[slot as usize] {
                item.1 = position;
            }
        }
    }

    fn check(heap: &MinMaxHeap, items: &Items) {
        let keys: Vec<i64> = items.0.iter().flatten().map(|(key, _)| *key).collect();
        assert_eq!(heap.slots.len(), keys.len());
        for (position, slot) in heap.slots.iter().enumerate() {
            assert_eq!(
                items.0[*slot as usize].map(|(_, at)| at),
                Some(position as u32)
            );
        }
        for position in 0..heap.slots.len() {
            let mut below = vec![2 * position + 1, 2 * position + 2];
            while let Some(descendant) = below.pop() {
                if descendant >= heap.slots.len() {
                    continue;
                }
                let (mine, theirs) = (heap.key(items, position), heap.key(items, descendant));
                if on_min_level(position) {
                    assert!(mine <= theirs, "min level {position} above {descendant}");
                } else {
                    assert!(mine >= theirs, "max level {position} above {descendant}");
                }
                below.extend([2 * descendant + 1, 2 * descendant + 2]);
            }
        }
        let (min, max) = (keys.iter().min(), keys.iter().max());
        assert_eq!(heap.min().map(|slot| items.key(slot)).as_ref(), min);
        assert_eq!(heap.max(items).map(|slot| items.key(slot)).as_ref(), max);
    }

    #[test]
    fn levels_alternate_from_a_min_root() {
        let levels: Vec<bool> = [0, 1, 2, 3, 6, 7, 14, 15].map(on_min_level).to_vec();
        assert_eq!(levels, [true, false, false, true, true, false, false, true]);
    }

    #[test]
    fn min_and_max_stay_right_under_random_pushes_removals_and_changes() {
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (mut heap, mut items) = (MinMaxHeap::default(), Items::default());
            for _ in 0..300 {
                let live: Vec<u32> = (0..items.0.len() as u32)
                    .filter(|slot| items.0[*slot as usize].is_some())
                    .collect();
                match rng.random_range(0..3) {
                    0 if !live.is_empty() => {
                        let slot = live[rng.random_range(0..live.len())];
                        let position = items.0[slot as usize].map_or(0, |(_, at)| at);
                        heap.remove(&mut items, position);
                        items.0[slot as usize] = None;
                    }
                    1 if !live.is_empty() => {
                        let slot = live[rng.random_range(0..live.len())];
                        let item = items.0[slot as usize].as_mut().map(|item| {
                            item.0 = rng.random_range(0..1_000);
                            item.1
                        });
                        heap.changed(&mut items, item.unwrap_or(0));
                    }
                    _ => {
                        items.0.push(Some((rng.random_range(0..1_000), 0)));
                        let slot = items.0.len() as u32 - 1;
                        heap.push(&mut items, slot);
                    }
                }
                check(&heap, &items);
            }
        }
    }

    #[test]
    fn an_empty_heap_has_no_min_or_max() {
        let heap = MinMaxHeap::default();
        assert_eq!((heap.min(), heap.max(&Items::default())), (None, None));
    }
}
