//! What the fuzz targets and the seed generator (`seeds.rs`) share: the layout of each target's
//! input, so that seeds are valid encodings of exactly what the targets decode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use zrecord::diagnostics::{Entry, ENTRY_BYTES, PATCH_BYTES};
use zrecord::diagnostics::Meta;
use zrecord::pipeline::{
    BatchConfig, BucketConfig, LoaderConfig, MemorySource, MergePolicy, PrefetchConfig,
    SamplerConfig, SamplerMode, ShardConfig, ShardMode,
};
use zrecord_testing::{ImageSpec, SimFs};
use zrecord::{Codec, DType, Field, Schema, Writer, WriterConfig};

/// Reads an input front to back; past the end every read gives zeros / empty.
#[derive(Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn u8(&mut self) -> u8 {
        let (b, rest) = self
            .data
            .split_first()
            .map_or((0, &[][..]), |(b, r)| (*b, r));
        self.data = rest;
        b
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }

    pub fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let s = self.bytes(2);
        b[..s.len()].copy_from_slice(s);
        u16::from_le_bytes(b)
    }

    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let s = self.bytes(4);
        b[..s.len()].copy_from_slice(s);
        u32::from_le_bytes(b)
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let s = self.bytes(8);
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// table_decode: [mode u8][first index u64][slots...]

/// Mode bit of `table_decode`: write a correct entry CRC into every slot before decoding, so
/// the fuzzer explores what lies behind the checksum.
pub const TABLE_FIX_CRC: u8 = 1;

/// Writes the entry CRC of `index` into a 24-byte offset-entry slot.
pub fn fix_entry_crc(index: u64, slot: &mut [u8]) {
    if let Some(body) = slot.get(..20).and_then(|b| <&[u8; 20]>::try_from(b).ok()) {
        let crc = zrecord::diagnostics::entry_crc(index, body);
        if let Some(c) = slot.get_mut(20..24) {
            c.copy_from_slice(&crc.to_le_bytes());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// record_decode: [codec u8][logical_len u32][stored bytes...]

/// The input of `record_decode`.
pub fn record_input(codec: u8, logical_len: u32, stored: &[u8]) -> Vec<u8> {
    let mut v = vec![codec];
    v.extend_from_slice(&logical_len.to_le_bytes());
    v.extend_from_slice(stored);
    v
}

/// The 24 bytes of an offset entry for record 0 with a correct entry CRC, whatever its fields
/// (lengths are cut to their on-disk width, as a damaged file would hold them).
pub fn raw_entry(codec: u8, physical_len: u32, logical_len: u32, data_crc: u32) -> [u8; 24] {
    let mut b = [0u8; ENTRY_BYTES];
    b[7..10].copy_from_slice(&physical_len.to_le_bytes()[..3]);
    b[10] = codec;
    b[12..16].copy_from_slice(&data_crc.to_le_bytes());
    b[16..20].copy_from_slice(&logical_len.to_le_bytes());
    fix_entry_crc(0, &mut b);
    b
}

// ---------------------------------------------------------------------------------------------
// loader_state: [config selector u8][LoaderState JSON...]

/// Number of loader configurations `loader_state` chooses from.
pub const LOADER_CONFIGS: u8 = 6;

/// The records of the `loader_state` source: 23 of lengths 0..9.
pub fn loader_source() -> Arc<MemorySource> {
    Arc::new(MemorySource::new(
        (0..23u64)
            .map(|i| vec![i as u8; ((i * 13) % 9) as usize])
            .collect(),
    ))
}

/// Loader configuration number `sel % LOADER_CONFIGS`: plain and bucketed chains, one and
/// three workers, strict and best-effort merges, finite and endless epochs.
pub fn loader_config(sel: u8) -> LoaderConfig {
    let sel = sel % LOADER_CONFIGS;
    let mode = match sel % 3 {
        0 => SamplerMode::Shuffled,
        1 => SamplerMode::SequentialWrap { window_len: 4 },
        _ => SamplerMode::Random,
    };
    LoaderConfig::default()
        .sampler(
            SamplerConfig::default()
                .mode(mode)
                .seed(7)
                .epochs(if sel == 5 { None } else { Some(2) }),
        )
        .shard(
            ShardConfig::new(if sel >= 3 { 2 } else { 1 }, 0)
                .mode(if sel == 3 {
                    ShardMode::Contiguous
                } else {
                    ShardMode::Interleaved
                })
                .pad_to_equal(sel == 4)
                .drop_remainder(false),
        )
        .bucket((sel % 2 == 1).then(|| BucketConfig::default().buffer_size(8).pack_size(3).seed(2)))
        .batch(BatchConfig::new(3).drop_last(sel == 2))
        .prefetch(
            PrefetchConfig::default()
                .num_workers(if sel >= 2 { 3 } else { 1 })
                .worker_queue_size(2)
                .consumer_queue_size(2)
                .merge(if sel == 3 {
                    MergePolicy::BestEffort {
                        max_lead: 2,
                        max_skips_per_round: 1,
                    }
                } else {
                    MergePolicy::Strict
                }),
        )
}

// ---------------------------------------------------------------------------------------------
// dataset_dir: a small dataset built once on the simulated file system; the input is a list of
// mutations of its files, then the indices of random gathers.
//
//   mutation: [op u8][file u8][offset u32][len u8][len bytes]   (op 0xFF ends the list)
//   then:     [index u8]...                                      (random gathers, in fours)

/// A mutation of one file of the base dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Overwrite bytes at an offset (clamped to the file; the file grows if they run past it).
    Write {
        file: u8,
        offset: u32,
        bytes: Vec<u8>,
    },
    /// XOR bytes at an offset (clamped; nothing past the end).
    Xor {
        file: u8,
        offset: u32,
        bytes: Vec<u8>,
    },
    /// Truncate to an offset (clamped).
    Truncate { file: u8, offset: u32 },
    /// Grow by `len` zero bytes.
    Grow { file: u8, len: u8 },
    /// Remove the file.
    Remove { file: u8 },
    /// Insert bytes at an offset (clamped), shifting the rest.
    Insert {
        file: u8,
        offset: u32,
        bytes: Vec<u8>,
    },
}

/// Byte that ends the mutation list.
pub const END_MUTATIONS: u8 = 0xFF;
/// At most this many mutations are applied.
pub const MAX_MUTATIONS: usize = 8;

impl Mutation {
    /// The encoding `parse` reads.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (op, file, offset, bytes): (u8, u8, u32, &[u8]) = match self {
            Mutation::Write {
                file,
                offset,
                bytes,
            } => (0, *file, *offset, bytes),
            Mutation::Xor {
                file,
                offset,
                bytes,
            } => (1, *file, *offset, bytes),
            Mutation::Truncate { file, offset } => (2, *file, *offset, &[]),
            Mutation::Grow { file, len } => (3, *file, u32::from(*len), &[]),
            Mutation::Remove { file } => (4, *file, 0, &[]),
            Mutation::Insert {
                file,
                offset,
                bytes,
            } => (5, *file, *offset, bytes),
        };
        out.push(op);
        out.push(file);
        out.extend_from_slice(&offset.to_le_bytes());
        let n = bytes.len().min(255);
        out.push(n as u8);
        out.extend_from_slice(&bytes[..n]);
    }

    /// Reads the mutation list and leaves `input` at the gather indices.
    pub fn parse(input: &mut Input<'_>) -> Vec<Mutation> {
        let mut v = Vec::new();
        while !input.is_empty() && v.len() < MAX_MUTATIONS {
            let op = input.u8();
            if op == END_MUTATIONS {
                break;
            }
            let file = input.u8();
            let offset = input.u32();
            let n = input.u8();
            let bytes = input.bytes(usize::from(n)).to_vec();
            v.push(match op % 6 {
                0 => Mutation::Write {
                    file,
                    offset,
                    bytes,
                },
                1 => Mutation::Xor {
                    file,
                    offset,
                    bytes,
                },
                2 => Mutation::Truncate { file, offset },
                3 => Mutation::Grow {
                    file,
                    len: offset as u8,
                },
                4 => Mutation::Remove { file },
                _ => Mutation::Insert {
                    file,
                    offset,
                    bytes,
                },
            });
        }
        v
    }

    fn file(&self) -> u8 {
        match self {
            Mutation::Write { file, .. }
            | Mutation::Xor { file, .. }
            | Mutation::Truncate { file, .. }
            | Mutation::Grow { file, .. }
            | Mutation::Remove { file }
            | Mutation::Insert { file, .. } => *file,
        }
    }

    /// Applies the mutation to `files` (the base dataset's files, in `Base::files` order).
    pub fn apply(&self, files: &mut BTreeMap<PathBuf, Option<Vec<u8>>>, names: &[PathBuf]) {
        let Some(name) = names.get(usize::from(self.file()) % names.len().max(1)) else {
            return;
        };
        if let Mutation::Remove { .. } = self {
            files.remove(name);
            return;
        }
        let Some(Some(data)) = files.get_mut(name) else {
            return;
        };
        let clamp = |o: u32, len: usize| (o as usize).min(len);
        match self {
            Mutation::Write { offset, bytes, .. } => {
                let at = clamp(*offset, data.len());
                let end = at + bytes.len();
                if end > data.len() {
                    data.resize(end, 0);
                }
                data[at..end].copy_from_slice(bytes);
            }
            Mutation::Xor { offset, bytes, .. } => {
                let at = clamp(*offset, data.len());
                for (d, b) in data[at..].iter_mut().zip(bytes) {
                    *d ^= b;
                }
            }
            Mutation::Truncate { offset, .. } => {
                let at = clamp(*offset, data.len());
                data.truncate(at);
            }
            Mutation::Grow { len, .. } => data.resize(data.len() + usize::from(*len), 0),
            Mutation::Insert { offset, bytes, .. } => {
                let at = clamp(*offset, data.len());
                data.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { .. } => {}
        }
    }
}

/// One record of the base dataset: one byte string per field.
pub type Rec = Vec<Vec<u8>>;

/// The dataset the `dataset_dir` target mutates.
#[derive(Debug)]
pub struct Base {
    /// Relative path → bytes (`None`: a directory), as written by the writer.
    pub files: BTreeMap<PathBuf, Option<Vec<u8>>>,
    /// The regular files, in the order a mutation's file byte picks them.
    pub names: Vec<PathBuf>,
    /// The committed records.
    pub model: Vec<Rec>,
    /// The committed meta.
    pub meta: Meta,
}

/// The field names of the base dataset.
pub const FIELDS: [&str; 3] = ["a", "b", "c"];

fn record(i: u64, salt: u64) -> Rec {
    let a: Vec<u8> = (0..(i * 7 + salt) % 53)
        .map(|k| ((k / 3 + i + salt) % 7) as u8)
        .collect();
    let b: Vec<u8> = (0..(i * 5 + salt) % 11)
        .map(|k| (k * 31 + i * 17 + salt) as u8)
        .collect();
    let c = (i * 1000 + salt).to_le_bytes().to_vec();
    vec![a, b, c]
}

fn build_base() -> Result<Base, zrecord::Error> {
    let sim = SimFs::new();
    let root = Path::new("/sim");
    let dir = root.join("ds");
    sim.mkdir_durable(root)?;
    let schema = Schema::new()
        .field(Field::new("a", DType::Bytes).codec(Codec::Deflate))
        .field(Field::new("b", DType::U8))
        .field(Field::new("c", DType::I64).shape(vec![1]))
        .chunk_size_bytes(700);
    let config = WriterConfig::default().deflate_level(1).num_writers(1);
    let mut model: Vec<Rec> = Vec::new();
    let mut w = Writer::create_with_vfs(Arc::new(sim.clone()), &dir, &schema, config.clone())?;
    // Several chunks (small chunk size), patches (modify), a swap-remove, a compacted table
    // generation and a second commit's patches on top of it.
    for i in 0..24 {
        let r = record(i, 0);
        w.append(&r)?;
        model.push(r);
    }
    w.commit()?;
    for i in [2u64, 9, 17] {
        let r = record(i, 5);
        w.modify_record(i, &r)?;
        model[i as usize] = r;
    }
    w.modify(4, "a", b"")?;
    model[4][0] = Vec::new();
    w.delete(6)?;
    model.swap_remove(6);
    w.commit()?;
    w.force_compaction_at_next_commit();
    w.append(&record(99, 1))?;
    model.push(record(99, 1));
    w.commit()?;
    w.modify(1, "b", b"patched")?;
    model[1][1] = b"patched".to_vec();
    w.commit()?;
    drop(w);
    sim.sync_everything();
    let image = sim.crash_state().image(&ImageSpec::all_applied(), &dir)?;
    let files = image.entries;
    let names: Vec<PathBuf> = files
        .iter()
        .filter(|(_, c)| c.is_some())
        .map(|(p, _)| p.clone())
        .collect();
    let meta_bytes = files
        .get(Path::new("meta.json"))
        .cloned()
        .flatten()
        .unwrap_or_default();
    let meta = Meta::decode(&meta_bytes).map_err(|e| zrecord::Error::InvalidConfig {
        reason: format!("{e:?}"),
    })?;
    Ok(Base {
        files,
        names,
        model,
        meta,
    })
}

/// The base dataset, built once per process.
///
/// # Panics
/// If the writer fails on the simulated file system (a bug outside what is fuzzed).
pub fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| match build_base() {
        Ok(b) => b,
        Err(e) => panic!("building the base dataset failed: {e}"),
    })
}

/// Writes `files` under `dst`.
pub fn materialise(files: &BTreeMap<PathBuf, Option<Vec<u8>>>, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for (p, c) in files {
        let at = dst.join(p);
        match c {
            None => std::fs::create_dir_all(&at)?,
            Some(bytes) => {
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&at, bytes)?
            }
        }
    }
    Ok(())
}

/// True if the mutated files hold a checksum the fuzzer forged: a changed `meta.json` that
/// still decodes to another meta, a changed offset or patch entry that still decodes, or
/// changed record bytes whose CRC32C still matches an entry of the base dataset. Only then may a
/// read return bytes other than the model's without an error.
pub fn forged(base: &Base, files: &BTreeMap<PathBuf, Option<Vec<u8>>>) -> bool {
    for (p, c) in files {
        let Some(new) = c else { continue };
        let old = base.files.get(p).cloned().flatten().unwrap_or_default();
        if *new == old {
            continue;
        }
        let name = p.to_string_lossy();
        if name == "meta.json" {
            if Meta::decode(new).is_ok_and(|m| m != base.meta) {
                return true;
            }
        } else if name.ends_with(".offsets") {
            for (i, slot) in new.chunks(ENTRY_BYTES).enumerate() {
                let old_slot = old.get(i * ENTRY_BYTES..(i + 1) * ENTRY_BYTES);
                if old_slot != Some(slot) && Entry::decode(i as u64, slot).is_ok() {
                    return true;
                }
            }
        } else if name.ends_with(".patches") {
            for (i, slot) in new.chunks(PATCH_BYTES).enumerate() {
                let old_slot = old.get(i * PATCH_BYTES..(i + 1) * PATCH_BYTES);
                if old_slot != Some(slot) && zrecord::diagnostics::decode_patch(slot).is_ok() {
                    return true;
                }
            }
        } else if name.starts_with("chunk/") {
            // Any stored range of any entry of any table file whose bytes changed but whose
            // CRC32C still matches.
            for entry in base_entries(base) {
                if !name.ends_with(&format!("{:05}.zr", entry.chunk)) {
                    continue;
                }
                let (s, e) = (entry.offset as usize, entry.end() as usize);
                let (Some(was), Some(now)) = (old.get(s..e), new.get(s..e)) else {
                    continue;
                };
                if was != now && zrecord::diagnostics::crc32c(now) == entry.data_crc {
                    return true;
                }
            }
        }
    }
    false
}

/// Every entry that decodes in any offset table or patch log of the base dataset.
fn base_entries(base: &Base) -> Vec<Entry> {
    let mut v = Vec::new();
    for (p, c) in &base.files {
        let Some(b) = c else { continue };
        let name = p.to_string_lossy();
        if name.ends_with(".offsets") {
            for (i, slot) in b.chunks(ENTRY_BYTES).enumerate() {
                v.extend(Entry::decode(i as u64, slot).ok());
            }
        } else if name.ends_with(".patches") {
            for slot in b.chunks(PATCH_BYTES) {
                v.extend(
                    zrecord::diagnostics::decode_patch(slot)
                        .ok()
                        .map(|(_, e)| e),
                );
            }
        }
    }
    v
}
