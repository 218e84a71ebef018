//! A lock's saved form (`leasehold_core::saved`, what `rdb_load` reads from an RDB file or a
//! `RESTORE` payload): any bytes, in any encoding version, are refused or load as a lock that
//! saves and loads back the same, with its holders within its limit.
#![no_main]

use leasehold_core::lock::Lock;
use leasehold_core::saved::tape::{Reader, Writer};
use leasehold_core::saved::{ENCODING_VERSION, load, load_counter, save};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, &[u8])| {
    let (version, bytes) = (i32::from(input.0 % 4), input.1);
    let _ = load_counter(version, &mut Reader(bytes));
    let Ok(lock) = load(version, &mut Reader(bytes)) else {
        return;
    };
    let mut writer = Writer::default();
    save(&lock, &mut writer);
    assert_eq!(
        load(ENCODING_VERSION, &mut Reader(&writer.0)).as_ref(),
        Ok(&lock)
    );
    if let Lock::Shared(shared) = &lock {
        let limit = shared.limit.map_or(usize::MAX, |limit| limit as usize);
        assert!((1..=limit).contains(&shared.holders.len()));
    }
});
