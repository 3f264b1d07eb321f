//! Offset-table entries and patch-log entries.
//!
//! An offset entry is 24 bytes, little-endian:
//!
//! ```text
//!  0      2           7          10     11     12         16          20         24
//!  +------+-----------+----------+------+------+----------+-----------+----------+
//!  |chunk | offset    | phys_len | codec| dict | data_crc | logical   | entry_crc|
//!  | u16  | u40       | u24      | u8   | u8   | u32      | len u32   | u32      |
//!  +------+-----------+----------+------+------+----------+-----------+----------+
//! ```
//!
//! `codec` is 0 raw, 1 deflate, 2 zstd, 3 zstd with a dictionary; `dict` is the dictionary's
//! number for code 3 and 0 otherwise (it was a reserved zero byte in format version 1).
//! `data_crc` is the CRC32C of the stored (physical) bytes, except for zstd (codes 2 and 3),
//! where it is the CRC32C of the logical (decoded) bytes. `entry_crc` is the CRC32C of the
//! record index (u64 LE) followed by bytes 0..20, so a damaged entry, or a correct entry found at
//! the wrong index, is detected when it is read. A patch entry is the record index (u64 LE)
//! followed by the offset entry for that index: 32 bytes.

use super::dtype::StoredCodec;
use super::{MAX_CHUNK_BYTES, MAX_RECORD_BYTES};

/// Size of an offset entry in bytes.
pub const ENTRY_BYTES: usize = 24;
/// Size of a patch-log entry in bytes.
pub const PATCH_BYTES: usize = 8 + ENTRY_BYTES;

/// Where one field of one record lives, decoded from its offset entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The chunk holding the stored bytes.
    pub chunk: u16,
    /// Byte offset of the stored bytes in the chunk (< 2^40).
    pub offset: u64,
    /// Stored length in bytes (< 2^24). Zero means the field is absent (empty).
    pub physical_len: u32,
    /// The codec the stored bytes use.
    pub codec: StoredCodec,
    /// CRC32C of the stored bytes (of the logical bytes for zstd).
    pub data_crc: u32,
    /// Length of the record after decoding (equals `physical_len` for raw records).
    pub logical_len: u32,
}

impl Entry {
    /// The entry of an absent (empty) record.
    pub const EMPTY: Entry = Entry {
        chunk: 0,
        offset: 0,
        physical_len: 0,
        codec: StoredCodec::Raw,
        data_crc: 0,
        logical_len: 0,
    };

    /// Encodes the entry for record `index`.
    ///
    /// # Panics
    ///
    /// If a field is out of its on-disk width (`offset ≥ 2^40`, a length ≥ 2^24): the writer checks
    /// these limits with typed errors before it builds an entry, so this is a bug, not bad input.
    pub fn encode(&self, index: u64) -> [u8; ENTRY_BYTES] {
        assert!(self.offset < MAX_CHUNK_BYTES, "offset exceeds u40");
        assert!(
            u64::from(self.physical_len) <= MAX_RECORD_BYTES,
            "length exceeds u24"
        );
        assert!(
            u64::from(self.logical_len) <= MAX_RECORD_BYTES,
            "length exceeds u24"
        );
        let mut b = [0u8; ENTRY_BYTES];
        let off = self.offset.to_le_bytes();
        let plen = self.physical_len.to_le_bytes();
        b[0..2].copy_from_slice(&self.chunk.to_le_bytes());
        b[2..7].copy_from_slice(&off[0..5]);
        b[7..10].copy_from_slice(&plen[0..3]);
        b[10] = self.codec.code();
        b[11] = self.codec.dictionary();
        b[12..16].copy_from_slice(&self.data_crc.to_le_bytes());
        b[16..20].copy_from_slice(&self.logical_len.to_le_bytes());
        let crc = entry_crc(index, &b[0..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks the entry stored for record `index`. The error is a reason for a
    /// corruption report; the caller adds the file, field and offset.
    pub fn decode(index: u64, b: &[u8]) -> Result<Entry, String> {
        let b: &[u8; ENTRY_BYTES] = b
            .get(..ENTRY_BYTES)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| format!("entry is shorter than {ENTRY_BYTES} bytes"))?;
        let [c0, c1, o0, o1, o2, o3, o4, p0, p1, p2, codec, dict, d0, d1, d2, d3, l0, l1, l2, l3, e0, e1, e2, e3] =
            *b;
        let stored_crc = u32::from_le_bytes([e0, e1, e2, e3]);
        let computed = entry_crc(index, &b[..20]);
        if stored_crc != computed {
            return Err(format!(
                "entry checksum mismatch: stored {stored_crc:#010x}, computed {computed:#010x}"
            ));
        }
        let codec = StoredCodec::from_bytes(codec, dict)?;
        let e = Entry {
            chunk: u16::from_le_bytes([c0, c1]),
            offset: u64::from_le_bytes([o0, o1, o2, o3, o4, 0, 0, 0]),
            physical_len: u32::from_le_bytes([p0, p1, p2, 0]),
            codec,
            data_crc: u32::from_le_bytes([d0, d1, d2, d3]),
            logical_len: u32::from_le_bytes([l0, l1, l2, l3]),
        };
        e.check()?;
        Ok(e)
    }

    /// Structural checks that hold for every valid entry.
    fn check(&self) -> Result<(), String> {
        if u64::from(self.logical_len) > MAX_RECORD_BYTES {
            return Err(format!(
                "logical length {} exceeds the record limit",
                self.logical_len
            ));
        }
        match self.codec {
            StoredCodec::Raw if self.physical_len != self.logical_len => Err(format!(
                "raw record with physical length {} and logical length {}",
                self.physical_len, self.logical_len
            )),
            c @ (StoredCodec::Deflate | StoredCodec::Zstd | StoredCodec::ZstdDict(_))
                if self.physical_len == 0 || self.logical_len == 0 =>
            {
                Err(format!("{c} record with a zero length"))
            }
            _ => Ok(()),
        }
    }

    /// End of the stored bytes in the chunk. A decoded entry's end is below 2^41 (offset < 2^40,
    /// length < 2^24); for a hand-made entry past `u64::MAX` it saturates, which still compares
    /// as past the end of every chunk.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.physical_len))
    }
}

fn entry_crc(index: u64, body: &[u8]) -> u32 {
    match <&[u8; 20]>::try_from(body) {
        Ok(b) => crate::checksum::entry_crc(index, b),
        Err(_) => {
            crate::checksum::crc32c_append(crate::checksum::crc32c(&index.to_le_bytes()), body)
        }
    }
}

/// Encodes a patch-log entry: record `index` now lives at `entry`.
pub fn encode_patch(index: u64, entry: &Entry) -> [u8; PATCH_BYTES] {
    let mut b = [0u8; PATCH_BYTES];
    b[0..8].copy_from_slice(&index.to_le_bytes());
    b[8..].copy_from_slice(&entry.encode(index));
    b
}

/// Decodes a patch-log entry into (record index, entry).
pub fn decode_patch(b: &[u8]) -> Result<(u64, Entry), String> {
    let idx: [u8; 8] = b
        .get(0..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("patch entry is shorter than {PATCH_BYTES} bytes"))?;
    let index = u64::from_le_bytes(idx);
    let entry = Entry::decode(index, b.get(8..).unwrap_or_default())?;
    Ok((index, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        Entry {
            chunk: 65_534,
            offset: MAX_CHUNK_BYTES - 1,
            physical_len: 1000,
            codec: StoredCodec::Deflate,
            data_crc: 0xdead_beef,
            logical_len: 4096,
        }
    }

    #[test]
    fn entry_round_trips() {
        for (i, e) in [Entry::EMPTY, sample()].into_iter().enumerate() {
            let idx = i as u64 * 1_000_003;
            assert_eq!(Entry::decode(idx, &e.encode(idx)).unwrap(), e);
        }
    }

    #[test]
    fn every_bit_flip_of_an_entry_is_detected() {
        let e = sample();
        let b = e.encode(7);
        for bit in 0..ENTRY_BYTES * 8 {
            let mut d = b;
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Entry::decode(7, &d).is_err(),
                "flip of bit {bit} not detected"
            );
        }
    }

    #[test]
    fn an_entry_at_the_wrong_index_is_detected() {
        let b = sample().encode(7);
        assert!(Entry::decode(8, &b).is_err());
    }

    #[test]
    fn truncated_entry_is_an_error_not_a_panic() {
        let b = sample().encode(1);
        for n in 0..ENTRY_BYTES {
            assert!(Entry::decode(1, &b[..n]).is_err());
        }
    }

    #[test]
    fn patch_round_trips_and_detects_flips() {
        let p = encode_patch(42, &sample());
        assert_eq!(decode_patch(&p).unwrap(), (42, sample()));
        for bit in 0..PATCH_BYTES * 8 {
            let mut d = p;
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_patch(&d).is_err(), "flip of bit {bit} not detected");
        }
        for n in 0..PATCH_BYTES {
            assert!(decode_patch(&p[..n]).is_err());
        }
    }
}
