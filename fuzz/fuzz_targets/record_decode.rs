//! Record decode with a lying logical length. Input: `[codec u8][logical_len u32][stored...]`.
//!
//! 1. The offset entry a damaged table could hold for these bytes (correct checksums, the
//!    lengths as given, cut to their widths) goes through `Entry::decode`; if it is accepted,
//!    the stored bytes are decoded into exactly `logical_len` bytes, as a read does.
//! 2. Whatever the entry says, `format::codec::inflate` and the zstd decoder (plain, and with a
//!    fixed dictionary) run into an output of the claimed logical length capped at the record
//!    limit (16 MiB − 1).
//!
//! Neither may panic, write past its output (guard bytes after it are checked) or allocate more
//! than the record limit (the global allocator aborts on any larger allocation): a
//! decompression bomb must stop at the cap.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

use libdeflater::Decompressor;
use libfuzzer_sys::fuzz_target;
use zrecord::diagnostics::{inflate, Dictionary, Entry, StoredCodec, ZstdDecoder};
use zrecord::MAX_RECORD_BYTES;
use zrecord_fuzz::{raw_entry, Input};

const GUARD: usize = 64;
const CAP: usize = MAX_RECORD_BYTES as usize;
/// The largest allocation allowed: the one output buffer (cap plus guard).
const MAX_ALLOC: usize = CAP + GUARD;

struct Capped;

// SAFETY: forwards to the system allocator; only refuses (aborts on) oversized requests.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            eprintln!(
                "allocation of {} bytes, more than the record limit",
                layout.size()
            );
            std::process::abort();
        }
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOC {
            eprintln!("reallocation to {new_size} bytes, more than the record limit");
            std::process::abort();
        }
        // SAFETY: as `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

struct State {
    out: Vec<u8>,
    dec: Decompressor,
    zstd: ZstdDecoder,
    dict: std::sync::Arc<Dictionary>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Decodes with `codec` into `out[..len]` with guard bytes after it, and checks the guard.
fn decode_into(st: &mut State, codec: StoredCodec, stored: &[u8], len: usize) -> Result<(), String> {
    let len = len.min(CAP);
    st.out[len..len + GUARD].fill(0xA5);
    let out = &mut st.out[..len];
    let r = match codec {
        StoredCodec::Zstd => st.zstd.decode(None, stored, out),
        StoredCodec::ZstdDict(_) => st.zstd.decode(Some(&st.dict), stored, out),
        _ => inflate(&mut st.dec, stored, out),
    };
    assert!(
        st.out[len..len + GUARD].iter().all(|&b| b == 0xA5),
        "{codec} decoding wrote past its {len}-byte output"
    );
    r
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let codec = input.u8();
    let logical = input.u32();
    let stored = input.rest();
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let st = guard.get_or_insert_with(|| State {
        out: vec![0; CAP + GUARD],
        dec: Decompressor::new(),
        zstd: ZstdDecoder::new().expect("a zstd context"),
        // Raw content as a dictionary: zstd takes any bytes as a prefix.
        dict: Dictionary::new(1, b"the quick brown fox jumps over the lazy dog ".repeat(64))
            .expect("a dictionary"),
    });

    // 1. Through the entry, as a read does.
    let physical = stored.len().min(CAP) as u32;
    let stored_part = &stored[..physical as usize];
    let crc = zrecord::diagnostics::crc32c(stored_part);
    let entry = raw_entry(codec, physical, logical, crc);
    if let Ok(e) = Entry::decode(0, &entry) {
        assert!(u64::from(e.logical_len) <= MAX_RECORD_BYTES);
        match e.codec {
            StoredCodec::Raw => assert_eq!(e.physical_len, e.logical_len),
            c => {
                if decode_into(st, c, stored_part, e.logical_len as usize).is_ok() {
                    // A stream that decodes to exactly the recorded length decodes the same
                    // into a larger buffer: no output was cut.
                    let bigger = (e.logical_len as usize + 1).min(CAP);
                    if bigger > e.logical_len as usize {
                        assert!(decode_into(st, c, stored_part, bigger).is_err());
                    }
                }
            }
        }
    }

    // 2. The claimed length capped at the limit, whatever the entry checks say.
    for c in [StoredCodec::Deflate, StoredCodec::Zstd, StoredCodec::ZstdDict(1)] {
        let _ = decode_into(st, c, stored, (logical as usize).min(CAP));
    }
});
