//! `zrecord bench make`: a synthetic dataset (random bytes or text, raw or compressed), and
//! with `--prepared` the append speed alone (records generated before the clock starts).

use super::{cpu_seconds, Rng};
use crate::args::{parse_size, parse_size_usize, CodecArg};
use crate::Res;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Instant;
use zrecord::{Codec, DType, Field, Schema, Writer, WriterConfig};

#[derive(Args)]
pub struct MakeArgs {
    /// Where to create the dataset (must not exist).
    dir: PathBuf,
    /// Number of records.
    #[arg(long)]
    records: u64,
    /// Bytes per record (e.g. 1024, 4K, 64KiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size_usize)]
    record_bytes: usize,
    /// Codec of the records.
    #[arg(long, value_enum, default_value_t = CodecArg::Raw)]
    codec: CodecArg,
    /// zstd level of `--codec zstd` and `zstd-dict`: 1 (fastest) to 19.
    #[arg(long, value_name = "LEVEL", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    zstd_level: i32,
    /// What the records hold, from fixed seeds (the same bytes on every machine). Default:
    /// random with `--codec raw`, nibbles with `--codec deflate`.
    #[arg(long, value_enum)]
    content: Option<Content>,
    /// Seed of the record bytes: datasets made with different seeds hold different bytes
    /// (the parts of a test collection); 0, the default, makes the bytes of earlier releases.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Chunk size (e.g. 268435456, 256M, 1GiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "256MiB")]
    chunk_bytes: u64,
    /// Append tasks of the writer (deflate, checksums and writes, each into its own chunk).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=16))]
    writers: u8,
    /// Generate every record in memory first, then time only the appends and the commit
    /// (without it, records are generated on the appending thread between appends, and the
    /// figure is the generator's as much as the writer's).
    #[arg(long)]
    prepared: bool,
    /// Print one JSON object (records, bytes, seconds, MB/s, CPU seconds of the timed part).
    #[arg(long)]
    json: bool,
    /// With `--prepared`: after the appends, also time the writer's encoder compressing the
    /// same records in a plain loop on this thread (same codec and level, the dictionary the
    /// writer trained, no checksums, no writes): the limit an append task can approach.
    #[arg(long, requires = "prepared")]
    compress_loop: bool,
}

/// What `bench make` writes into each record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Content {
    /// Random bytes: incompressible.
    Random,
    /// Every other 8-byte word a constant, the others random nibbles: about 3:1 with deflate,
    /// a literal-heavy stream that is slow to inflate.
    Nibbles,
    /// Words of a synthetic 4,096-word vocabulary with Zipf frequencies (s = 1.25), separated
    /// by spaces, commas, full stops and newlines: about 2.6:1 with deflate, like captions or
    /// token text.
    Text,
    /// JSON objects with a fixed key set (an id, a URL, a caption, sizes, a license, tags and
    /// scores), each about `--record-bytes` long (the caption and tags grow or shrink): like
    /// the metadata of a web-scraped image–text dataset.
    Json,
    /// Captions: sentences of the synthetic vocabulary, cut at a word, each 60–140% of
    /// `--record-bytes` long.
    Captions,
}

pub(super) fn make(a: &MakeArgs) -> Res {
    let codec = a.codec.codec(a.zstd_level);
    let content = a.content.unwrap_or(match codec {
        Codec::Raw => Content::Random,
        _ => Content::Nibbles,
    });
    let schema = Schema::new()
        .field(Field::new("data", DType::U8).codec(codec))
        .chunk_size_bytes(a.chunk_bytes);
    let config = WriterConfig::default().num_writers(usize::from(a.writers));
    let mut gen = Generator::new(content, a.record_bytes, a.seed);
    let mut loop_figure: Option<(f64, f64)> = None;
    let mut commit_seconds: Option<f64> = None;
    let (t, cpu, total) = match a.prepared {
        true => {
            // Every record back to back, then the appends alone are timed.
            let mut bytes = Vec::new();
            let mut ends = Vec::with_capacity(usize::try_from(a.records).unwrap_or(0));
            for i in 0..a.records {
                bytes.extend_from_slice(gen.next(i));
                ends.push(bytes.len());
            }
            let (t, cpu) = (Instant::now(), cpu_seconds());
            let mut w = Writer::create(&a.dir, &schema, config)?;
            let mut start = 0;
            for &end in &ends {
                w.append(&[bytes.get(start..end).unwrap_or_default()])?;
                start = end;
            }
            // The commit: the append tasks finish their queues, then every chunk is fsynced.
            let c0 = Instant::now();
            w.commit()?;
            commit_seconds = Some(c0.elapsed().as_secs_f64());
            drop(w);
            let elapsed = (t.elapsed(), cpu_seconds() - cpu);
            loop_figure = match a.compress_loop {
                true => Some(compress_loop(&a.dir, codec, &bytes, &ends)?),
                false => None,
            };
            (
                Instant::now() - elapsed.0,
                cpu_seconds() - elapsed.1,
                bytes.len() as u64,
            )
        }
        false => {
            let (t, cpu) = (Instant::now(), cpu_seconds());
            let mut w = Writer::create(&a.dir, &schema, config)?;
            let mut total = 0u64;
            for i in 0..a.records {
                let rec = gen.next(i);
                total += rec.len() as u64;
                w.append(&[rec])?;
            }
            w.commit()?;
            drop(w);
            (t, cpu, total)
        }
    };
    let s = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let total_f = total as f64;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "records": a.records,
                "bytes": total,
                "record_bytes_mean": total_f / a.records.max(1) as f64,
                "codec": codec.to_string(),
                "content": format!("{content:?}").to_lowercase(),
                "writers": a.writers,
                "prepared": a.prepared,
                "seconds": s,
                "mb_per_s": total_f / s / 1e6,
                "cpu_seconds": cpu,
                "commit_seconds": commit_seconds,
                "loop_mb_per_s": loop_figure.map(|(s, _)| total_f / s / 1e6),
                "loop_cpu_seconds": loop_figure.map(|(_, c)| c),
                "append_vs_loop": loop_figure.map(|(l, _)| l / s),
            })
        );
        return Ok(());
    }
    println!(
        "made {} records of {:.0} bytes on average ({}, {:?} content, {} append tasks{}) in {:.2} s: \
         {:.1} MB/s, {:.2} s of CPU",
        a.records,
        total_f / a.records.max(1) as f64,
        codec,
        content,
        a.writers,
        if a.prepared { ", prepared" } else { "" },
        s,
        total_f / s / 1e6,
        cpu
    );
    if let Some((l, c)) = loop_figure {
        println!(
            "the encoder alone, in a plain loop on one thread: {:.2} s, {:.1} MB/s, {:.2} s of CPU \
             (appends at {:.2}x of it)",
            l,
            total_f / l / 1e6,
            c,
            l / s
        );
    }
    Ok(())
}

/// Seconds and CPU seconds of the writer's encoder compressing `bytes` (records ending at
/// `ends`) in a plain loop, with the dictionary the writer trained for field `data` (the last
/// one, if it trained several).
fn compress_loop(
    dir: &Path,
    codec: Codec,
    bytes: &[u8],
    ends: &[usize],
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    use zrecord::diagnostics::{Dictionary, Encoder};
    let meta: zrecord::diagnostics::Meta =
        zrecord::diagnostics::Meta::decode(&std::fs::read(dir.join("meta.json"))?)
            .map_err(|e| format!("{}: {e:?}", dir.join("meta.json").display()))?;
    let dictionary = match meta.fields.first().and_then(|f| f.dictionaries.last()) {
        Some(d) => Some(
            Dictionary::new(
                d.number,
                std::fs::read(dir.join(format!("data.{}.zdict", d.number)))?,
            )
            .map_err(|e| format!("the trained dictionary: {e}"))?,
        ),
        None => None,
    };
    let mut enc = Encoder::new(zrecord::WriterConfig::default().deflate_level);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let mut start = 0;
    let mut stored = 0usize;
    for &end in ends {
        let rec = bytes.get(start..end).unwrap_or_default();
        stored += enc.encode(codec, 0, dictionary.as_deref(), rec).1.len();
        start = end;
    }
    std::hint::black_box(stored);
    Ok((t.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}

/// The records of one `bench make` run, from fixed seeds: record `i` depends only on the
/// records before it (one random stream), so `--prepared` and the streaming form write the
/// same bytes.
struct Generator {
    content: Content,
    record_bytes: usize,
    rng: Rng,
    text: Option<Text>,
    rec: Vec<u8>,
}

impl Generator {
    fn new(content: Content, record_bytes: usize, seed: u64) -> Generator {
        let text = matches!(content, Content::Text | Content::Json | Content::Captions)
            .then(|| Text::new(&mut Rng(0x7E47_5EED_0000_0001)));
        Generator {
            content,
            record_bytes,
            rng: Rng(0x2545_F491_4F6C_DD1D ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            text,
            rec: vec![0u8; record_bytes],
        }
    }

    /// Record `i` (called for 0, 1, 2, … in turn).
    fn next(&mut self, i: u64) -> &[u8] {
        let (rng, rec, n) = (&mut self.rng, &mut self.rec, self.record_bytes);
        rec.resize(n, 0);
        match (&self.text, self.content) {
            (Some(text), Content::Json) => text.json(rng, i, n, rec),
            (Some(text), Content::Captions) => {
                let len = n * 6 / 10 + (rng.next() as usize) % (n * 8 / 10 + 1);
                rec.resize(len, 0);
                text.fill(rng, rec);
                // Cut at the last space: a caption ends on a whole word.
                if let Some(sp) = rec.iter().rposition(|&b| b == b' ') {
                    rec.truncate(sp.max(1));
                }
            }
            (Some(text), _) => text.fill(rng, rec),
            (None, Content::Nibbles) => {
                for (k, chunk) in rec.chunks_mut(8).enumerate() {
                    let x = rng.next();
                    // Half the words repeat, the others are random nibbles: about 3:1.
                    let bytes = match k % 2 {
                        0 => [0x41; 8],
                        _ => (x & 0x0f0f_0f0f_0f0f_0f0f).to_le_bytes(),
                    };
                    let n = chunk.len();
                    chunk.copy_from_slice(bytes.get(..n).unwrap_or_default());
                }
            }
            (None, _) => {
                for chunk in rec.chunks_mut(8) {
                    let bytes = rng.next().to_le_bytes();
                    let n = chunk.len();
                    chunk.copy_from_slice(bytes.get(..n).unwrap_or_default());
                }
            }
        }
        rec
    }
}

/// Synthetic text: a vocabulary of [`Text::WORDS`] words (2 to 12 letters drawn with English
/// letter frequencies, frequent words shorter), drawn with Zipf frequencies (weight of rank k
/// ∝ 1 / k^1.25, in integers, so every machine makes the same bytes), separated by spaces,
/// commas, full stops (the next word capitalised) and newlines.
struct Text {
    words: Vec<Vec<u8>>,
    /// Cumulative weights, by rank.
    cdf: Vec<u64>,
}

impl Text {
    const WORDS: usize = 4096;

    fn new(rng: &mut Rng) -> Text {
        const LETTERS: &[u8; 26] = b"etaoinshrdlcumwfgypbvkjxqz";
        const FREQ: [u64; 26] = [
            127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 24, 22, 20, 20, 19, 15, 10, 8,
            2, 2, 1, 1,
        ];
        let letter_cdf: Vec<u64> = FREQ
            .iter()
            .scan(0, |acc, &f| {
                *acc += f;
                Some(*acc)
            })
            .collect();
        let letters_total = letter_cdf.last().copied().unwrap_or(1);
        let words = (0..Self::WORDS)
            .map(|rank| {
                let bits = u64::from(usize::BITS - rank.leading_zeros()).min(4);
                let len = 2 + rng.next() % 4 + rng.next() % (3 + bits);
                (0..len)
                    .map(|_| {
                        let x = rng.next() % letters_total;
                        let i = letter_cdf.partition_point(|&c| c <= x);
                        LETTERS.get(i).copied().unwrap_or(b'e')
                    })
                    .collect()
            })
            .collect();
        let cdf = (1..=Self::WORDS as u64)
            .scan(0u64, |acc, k| {
                // k^1.25 = k · (k^0.25), the fourth root in 1/256ths.
                let root = (k << 32).isqrt().isqrt();
                *acc += (1u64 << 56) / (k * root);
                Some(*acc)
            })
            .collect();
        Text { words, cdf }
    }

    /// Fills `rec` with text, the last word cut at the end.
    fn fill(&self, rng: &mut Rng, rec: &mut [u8]) {
        let total = self.cdf.last().copied().unwrap_or(1);
        let mut at = 0;
        let mut capital = true;
        while at < rec.len() {
            let x = rng.next() % total;
            let rank = self.cdf.partition_point(|&c| c <= x);
            let word = self.words.get(rank).map_or(&b"e"[..], Vec::as_slice);
            let start = at;
            at = put(rec, at, word);
            if capital {
                if let Some(c) = rec.get_mut(start) {
                    c.make_ascii_uppercase();
                }
            }
            let sep: &[u8] = match rng.next() % 100 {
                0..6 => b". ",
                6..14 => b", ",
                14 => b"\n",
                _ => b" ",
            };
            capital = sep == b". ";
            at = put(rec, at, sep);
        }
    }
}

impl Text {
    /// Record `i` as a JSON object of about `target` bytes with a fixed key set, into `rec`.
    fn json(&self, rng: &mut Rng, i: u64, target: usize, rec: &mut Vec<u8>) {
        use std::fmt::Write as _;
        let words = |n: usize, rng: &mut Rng| {
            let mut buf = vec![0u8; n];
            self.fill(rng, &mut buf);
            let s: String = buf
                .iter()
                .map(|&b| match b {
                    b'\n' | b'"' | b'\\' => ' ',
                    b => char::from(b),
                })
                .collect();
            s.trim().to_string()
        };
        let licenses = ["cc-by-4.0", "cc-by-sa-4.0", "cc0-1.0", "unknown"];
        let x = rng.next();
        let mut s = String::with_capacity(target + 64);
        let _ = write!(
            s,
            "{{\"id\": {i}, \"url\": \"https://images.example.org/{:016x}/{:08x}.jpg\", \
             \"width\": {}, \"height\": {}, \"license\": \"{}\", \"nsfw\": {}, \
             \"clip_similarity\": 0.{:04}, \"aesthetic\": {}.{:02}, \"caption\": \"",
            x,
            x >> 32,
            256 + (x % 1792),
            256 + ((x >> 11) % 1792),
            licenses
                .get((x >> 23) as usize % licenses.len())
                .copied()
                .unwrap_or("unknown"),
            (x >> 29).is_multiple_of(50),
            (x >> 31) % 10_000,
            3 + (x >> 37) % 5,
            (x >> 41) % 100,
        );
        let room = target.saturating_sub(s.len() + 120);
        let caption = words(room * 2 / 3 + 8, rng);
        s.push_str(&caption);
        s.push_str("\", \"tags\": [");
        let tags = words(room / 3 + 8, rng);
        for (k, t) in tags
            .split([' ', ',', '.'])
            .filter(|t| !t.is_empty())
            .enumerate()
        {
            if k > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "\"{}\"", t.to_ascii_lowercase());
        }
        let _ = write!(s, "], \"source\": \"crawl-{}\"}}", 2020 + (x >> 47) % 6);
        rec.clear();
        rec.extend_from_slice(s.as_bytes());
    }
}

/// Copies what fits of `bytes` into `rec` at `at`; returns where it stopped.
fn put(rec: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let n = bytes.len().min(rec.len().saturating_sub(at));
    if let (Some(dst), Some(src)) = (rec.get_mut(at..at + n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    at + n
}
