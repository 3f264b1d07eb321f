//! CRC32C (Castagnoli), the one checksum of the format: record bytes, offset entries, patch
//! entries and `meta.json` all use it (`docs/FORMAT.md`). A leaf module: `format/`, `io/` and
//! `store/` call it, and it calls nothing of theirs.
//!
//! One implementation, `crc-fast`: it folds with carry-less multiplication where the CPU has it
//! (64 KiB records from DRAM checked at 13–15 GB/s on the project's machine against 8–10 GB/s for
//! the `crc32c` crate), and its `crc32_iscsi` entry point skips the per-call dispatch that made
//! general-purpose CRC calls cost more than the 28 bytes of an offset entry.

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// CRC32C of `data` continued from `crc`, the CRC32C of the bytes before it: equal to the CRC32C
/// of the concatenation.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

/// CRC32C of `index` (u64 little-endian) followed by `body`, the 20 bytes an offset entry
/// protects: the entry checksum (`docs/FORMAT.md`).
#[inline]
pub fn entry_crc(index: u64, body: &[u8; 20]) -> u32 {
    let mut b = [0u8; 28];
    let (head, tail) = b.split_at_mut(8);
    head.copy_from_slice(&index.to_le_bytes());
    tail.copy_from_slice(body);
    crc32c(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer() {
        // The CRC-32C check value (RFC 3720, the iSCSI catalogue).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn append_equals_the_crc_of_the_concatenation() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        for split in [0, 1, 7, 28, 500, 999, 1000] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data), "split {split}");
        }
    }

    #[test]
    fn entry_crc_covers_index_then_body() {
        let body: [u8; 20] = std::array::from_fn(|i| i as u8 * 13);
        for index in [0u64, 1, 0x9e37_79b9_7f4a_7c15, u64::MAX] {
            let mut all = index.to_le_bytes().to_vec();
            all.extend_from_slice(&body);
            assert_eq!(entry_crc(index, &body), crc32c(&all));
        }
    }
}
