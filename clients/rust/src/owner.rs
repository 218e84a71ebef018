//! Owner identifiers: a random UUID (v4) per handle plus a process-wide counter, so two handles
//! never share an owner unless asked to.

use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A new owner: 32 hex digits of a UUID v4, a colon and a counter (38 bytes or less until the
/// counter reaches 100 000, so the server keeps it inline).
#[must_use]
pub fn new_owner() -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}:{n}", Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_unique_and_short() {
        let (a, b) = (new_owner(), new_owner());
        assert_ne!(a, b);
        assert!(a.len() <= 38, "{a}");
    }
}
