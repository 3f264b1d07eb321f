//! Writes the seed corpora, `fuzz/corpus/<target>/`: small valid encodings of what each target
//! decodes (and a few near misses). Run from the repository root:
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds
//! ```
//!
//! The files are named by content, so running it again adds nothing that is already there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::executor::block_on;
use zrecord::diagnostics::{Dictionary, Encoder, StoredCodec};
use zrecord::diagnostics::Meta;
use zrecord::pipeline::{LoaderBuilder, LoaderState};
use zrecord::Codec;
use zrecord_fuzz::{
    base, loader_config, loader_source, record_input, Mutation, END_MUTATIONS, LOADER_CONFIGS,
    TABLE_FIX_CRC,
};

fn write(target: &str, data: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("seed-{:08x}", zrecord::diagnostics::crc32c(data));
    std::fs::write(dir.join(name), data).unwrap();
}

fn file(name: &str) -> Vec<u8> {
    base()
        .files
        .get(&PathBuf::from(name))
        .cloned()
        .flatten()
        .unwrap_or_default()
}

fn file_index(suffix: &str) -> u8 {
    base()
        .names
        .iter()
        .position(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap() as u8
}

fn meta_seeds() {
    let b = base();
    write("meta_decode", &file("meta.json"));
    let mut m: Meta = b.meta.clone();
    write("meta_decode", &m.encode());
    m.fields.truncate(1);
    m.chunks.clear();
    m.len = 0;
    write("meta_decode", &m.encode());
    m.version = 2;
    write("meta_decode", &m.encode());
}

fn table_seeds() {
    for p in &base().names {
        let name = p.to_string_lossy();
        if name.ends_with(".offsets") || name.ends_with(".patches") {
            let bytes = file(&name);
            for mode in [0, TABLE_FIX_CRC] {
                let mut v = vec![mode];
                v.extend_from_slice(&0u64.to_le_bytes());
                v.extend_from_slice(&bytes[..bytes.len().min(24 * 8)]);
                write("table_decode", &v);
            }
        }
    }
}

fn record_seeds() {
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 7) as u8).collect();
    let mut d = Encoder::new(6);
    let (codec, stored) = d.encode(Codec::Deflate, 0, None, &data);
    assert_eq!(codec, StoredCodec::Deflate);
    let stored = stored.to_vec();
    let n = data.len() as u32;
    write("record_decode", &record_input(1, n, &stored)); // honest
    write("record_decode", &record_input(1, n - 1, &stored)); // says less: a bomb
    write("record_decode", &record_input(1, n + 1, &stored)); // says more
    write("record_decode", &record_input(0, 5, b"hello")); // raw
    write("record_decode", &record_input(1, u32::MAX, &stored)); // past the limit
                                                                 // 4 MiB of zeros in a few KiB, claimed as 100 bytes.
    let zeros = vec![0u8; 4 << 20];
    let bomb = d.encode(Codec::Deflate, 0, None, &zeros).1.to_vec();
    write("record_decode", &record_input(1, 100, &bomb));
    // zstd frames: plain, a bomb, and one made with the target's fixed dictionary.
    let (codec, stored) = d.encode(Codec::zstd(), 0, None, &data);
    assert_eq!(codec, StoredCodec::Zstd);
    let stored = stored.to_vec();
    write("record_decode", &record_input(2, n, &stored));
    write("record_decode", &record_input(2, n - 1, &stored));
    let bomb = d.encode(Codec::zstd(), 0, None, &zeros).1.to_vec();
    write("record_decode", &record_input(2, 100, &bomb));
    let dict = Dictionary::new(1, b"the quick brown fox jumps over the lazy dog ".repeat(64))
        .expect("a dictionary");
    let text = b"the lazy dog jumps over the quick brown fox ".repeat(20);
    let (codec, stored) = d.encode(Codec::zstd_dict(), 0, Some(&dict), &text);
    assert_eq!(codec, StoredCodec::ZstdDict(1));
    write("record_decode", &record_input(3, text.len() as u32, stored));
}

fn npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let prefix = if version == 1 { 10 } else { 12 };
    let mut text = dict.as_bytes().to_vec();
    while (prefix + text.len() + 1) % 64 != 0 {
        text.push(b' ');
    }
    text.push(b'\n');
    let mut v = b"\x93NUMPY".to_vec();
    v.extend_from_slice(&[version, 0]);
    if version == 1 {
        v.extend_from_slice(&(text.len() as u16).to_le_bytes());
    } else {
        v.extend_from_slice(&(text.len() as u32).to_le_bytes());
    }
    v.extend_from_slice(&text);
    v.extend_from_slice(data);
    v
}

fn npy_seeds() {
    let f4: Vec<u8> = (0..6u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    write(
        "npy_header",
        &npy(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
            &f4,
        ),
    );
    let i2: Vec<u8> = (0..12u16).flat_map(|i| i.to_be_bytes()).collect();
    write(
        "npy_header",
        &npy(
            1,
            "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3, 2), }",
            &i2,
        ),
    );
    write(
        "npy_header",
        &npy(
            2,
            "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }",
            &[1, 0, 1, 1],
        ),
    );
    write(
        "npy_header",
        &npy(
            3,
            "{'descr': '<u8', 'fortran_order': True, 'shape': (1, 2), }",
            &[7; 16],
        ),
    );
    write(
        "npy_header",
        &npy(
            1,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }",
            &[],
        ),
    );
    // The fuzz findings (docs/FUZZING.md) are seeds too, as the files the fuzzer wrote:
    // fuzz/corpus/npy_header/seed-finding-*.
}

fn loader_seeds() {
    for sel in 0..LOADER_CONFIGS {
        for k in [0usize, 1, 3] {
            let mut loader = LoaderBuilder::new(loader_source())
                .config(loader_config(sel))
                .build()
                .unwrap();
            block_on(async {
                for _ in 0..k {
                    let _ = futures::StreamExt::next(&mut loader).await;
                }
            });
            let state: LoaderState = loader.state();
            let mut v = vec![sel];
            v.extend_from_slice(serde_json::to_string(&state).unwrap().as_bytes());
            write("loader_state", &v);
        }
    }
    // Elastic checkpoints: a 3-rank run, each rank stopped after its own number of batches,
    // merged for this configuration's rank.
    for sel in 0..LOADER_CONFIGS {
        let config = loader_config(sel);
        let old: Vec<LoaderState> = (0..3u64)
            .map(|rank| {
                let shard = config.shard.total(3).index(rank);
                let mut loader = LoaderBuilder::new(loader_source())
                    .config(config.shard(shard))
                    .build()
                    .unwrap();
                block_on(async {
                    for _ in 0..=rank {
                        let _ = futures::StreamExt::next(&mut loader).await;
                    }
                });
                loader.state()
            })
            .collect();
        let merged = LoaderBuilder::new(loader_source())
            .config(config)
            .merge_checkpoints(&old)
            .unwrap();
        let mut v = vec![sel];
        v.extend_from_slice(serde_json::to_string(&merged).unwrap().as_bytes());
        write("loader_state", &v);
    }
    let _ = Arc::strong_count(&loader_source());
}

fn dataset_seeds() {
    let tail = [0u8, 3, 25, 7, 1, 1, 200, 9];
    let seed = |ms: &[Mutation]| {
        let mut v = Vec::new();
        for m in ms {
            m.encode(&mut v);
        }
        v.push(END_MUTATIONS);
        v.extend_from_slice(&tail);
        write("dataset_dir", &v);
    };
    let meta = file_index("meta.json");
    let chunk = file_index("00000.zr");
    let offsets = base()
        .names
        .iter()
        .position(|p| {
            p.to_string_lossy().starts_with("a.") && p.to_string_lossy().ends_with(".offsets")
        })
        .unwrap() as u8;
    let patches = base()
        .names
        .iter()
        .position(|p| p.to_string_lossy().ends_with(".patches"))
        .unwrap() as u8;
    seed(&[]);
    seed(&[Mutation::Xor {
        file: meta,
        offset: 40,
        bytes: vec![1],
    }]);
    seed(&[Mutation::Write {
        file: chunk,
        offset: 10,
        bytes: vec![0xFF; 4],
    }]);
    seed(&[Mutation::Truncate {
        file: offsets,
        offset: 100,
    }]);
    seed(&[Mutation::Xor {
        file: offsets,
        offset: 30,
        bytes: vec![0, 0, 1],
    }]);
    seed(&[Mutation::Remove { file: patches }]);
    seed(&[Mutation::Grow {
        file: chunk,
        len: 100,
    }]);
    seed(&[Mutation::Insert {
        file: chunk,
        offset: 0,
        bytes: vec![0; 3],
    }]);
}

/// Small JPEGs (RGB, grey, odd sizes), a PNG-like near miss and a truncated JPEG.
fn image_seeds() {
    let px = |w: u16, h: u16, c: usize| -> Vec<u8> {
        (0..usize::from(w) * usize::from(h) * c).map(|i| (i * 37 % 251) as u8).collect()
    };
    for (w, h, color, c) in [
        (16, 16, jpeg_encoder::ColorType::Rgb, 3),
        (9, 5, jpeg_encoder::ColorType::Rgb, 3),
        (12, 7, jpeg_encoder::ColorType::Luma, 1),
    ] {
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, 80)
            .encode(&px(w, h, c), w, h, color)
            .unwrap();
        write("image_decode", &out);
        write("image_decode", &out[..out.len() / 2]);
    }
    write("image_decode", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x04\0\0\0\x04\x08\x02\0\0\0");
}

fn main() {
    image_seeds();
    meta_seeds();
    table_seeds();
    record_seeds();
    npy_seeds();
    loader_seeds();
    dataset_seeds();
    println!("seeds written under {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
