//! Offset entries (`Entry::decode`) and patch-log entries (`decode_patch`) decode from any bytes
//! without panicking, and whatever decodes re-encodes to exactly the bytes it came from.
//!
//! Input: `[mode u8][first index u64][bytes...]`. The bytes are cut into 24-byte offset entries
//! for records `first, first + 1, …` (the last one may be short) and, separately, into 32-byte
//! patch entries. With mode bit 0 set, every 24-byte slot gets a correct entry CRC first, so the
//! checks behind the checksum are fuzzed too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zrecord::diagnostics::{decode_patch, encode_patch, Entry, ENTRY_BYTES, PATCH_BYTES};
use zrecord_fuzz::{fix_entry_crc, Input, TABLE_FIX_CRC};

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    let first = input.u64();
    let mut bytes = input.rest().to_vec();
    if mode & TABLE_FIX_CRC != 0 {
        for (k, slot) in bytes.chunks_mut(ENTRY_BYTES).enumerate() {
            fix_entry_crc(first.wrapping_add(k as u64), slot);
        }
    }
    for (k, slot) in bytes.chunks(ENTRY_BYTES).enumerate() {
        let index = first.wrapping_add(k as u64);
        if let Ok(e) = Entry::decode(index, slot) {
            assert_eq!(
                &e.encode(index)[..],
                slot,
                "entry {index} does not round-trip"
            );
            assert!(e.end() >= e.offset);
        }
    }
    if mode & TABLE_FIX_CRC != 0 {
        // Patch slots: the index is the slot's first 8 bytes; fix the entry behind it.
        for slot in bytes.chunks_mut(PATCH_BYTES) {
            let index = u64::from_le_bytes(
                slot.get(..8)
                    .and_then(|s| s.try_into().ok())
                    .unwrap_or_default(),
            );
            if let Some(entry) = slot.get_mut(8..) {
                fix_entry_crc(index, entry);
            }
        }
    }
    for slot in bytes.chunks(PATCH_BYTES) {
        if let Ok((index, e)) = decode_patch(slot) {
            assert_eq!(
                &encode_patch(index, &e)[..],
                slot,
                "patch does not round-trip"
            );
        }
    }
});
