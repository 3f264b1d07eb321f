//! A checkpoint from anywhere: `serde_json::from_slice::<LoaderState>` on arbitrary bytes, then
//! `LoaderBuilder::resume` over a small `MemorySource` and a few batches pulled. Errors are
//! fine; a panic, a hang or a batch with an index outside the source is a bug.
//!
//! Input: `[config u8][LoaderState JSON...]`; the first byte picks one of
//! `zrecord_fuzz::LOADER_CONFIGS` loader configurations (the checkpoint's config string must
//! match it for the resume to get past the header check).
#![no_main]

use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use zrecord::pipeline::{LoaderBuilder, LoaderState, Source};
use zrecord_fuzz::{loader_config, loader_source, Input};

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let sel = input.u8();
    let Ok(state) = serde_json::from_slice::<LoaderState>(input.rest()) else {
        return;
    };
    let source = loader_source();
    let len = source.len();
    let builder = LoaderBuilder::new(source).config(loader_config(sel));
    let Ok(mut loader) = builder.resume(&state) else {
        return;
    };
    block_on(async {
        for _ in 0..4 {
            match loader.next().await {
                None => break,
                Some(Err(_)) => {}
                Some(Ok(b)) => {
                    assert!(
                        b.batch.indices().iter().all(|&i| i < len),
                        "index out of range"
                    );
                    assert_eq!(b.data.len(), b.batch.indices().len());
                }
            }
        }
        let _ = loader.state();
        loader.shutdown().await;
    });
});
