//! The packed holding of a `LOCK.APPLY` effect (`leasehold_core::packed`): any bytes unpack to a
//! holding or to nothing, and what unpacks packs back to the same holding.
#![no_main]

use leasehold_core::packed::{pack, unpack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Some((token, holds, lease)) = unpack(bytes) {
        assert_eq!(
            unpack(&pack(token, holds, lease)),
            Some((token, holds, lease))
        );
    }
});
