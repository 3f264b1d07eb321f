//! `Meta::decode` on arbitrary bytes never panics; what decodes re-encodes to bytes that decode
//! to the same meta, and re-encoding that is a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zrecord::diagnostics::Meta;

fuzz_target!(|data: &[u8]| {
    let Ok(meta) = Meta::decode(data) else {
        return;
    };
    let encoded = meta.encode();
    let again = Meta::decode(&encoded);
    assert_eq!(
        again.as_ref(),
        Ok(&meta),
        "a decoded meta does not round-trip"
    );
    assert_eq!(again.map(|m| m.encode()).as_deref(), Ok(&encoded[..]));
});
