//! `zrecord bench make`: a synthetic dataset (random bytes or text, raw or deflate).

use super::Rng;
use crate::args::{parse_size, parse_size_usize, CodecArg};
use crate::Res;
use clap::Args;
use std::path::PathBuf;
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
    /// What the records hold, from fixed seeds (the same bytes on every machine). Default:
    /// random with `--codec raw`, nibbles with `--codec deflate`.
    #[arg(long, value_enum)]
    content: Option<Content>,
    /// Chunk size (e.g. 268435456, 256M, 1GiB).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "256MiB")]
    chunk_bytes: u64,
    /// Append tasks of the writer (deflate, checksums and writes, each into its own chunk).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=16))]
    writers: u8,
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
}

pub(super) fn make(a: &MakeArgs) -> Res {
    let codec = Codec::from(a.codec);
    let content = a.content.unwrap_or(match codec {
        Codec::Raw => Content::Random,
        _ => Content::Nibbles,
    });
    let schema = Schema::new()
        .field(Field::new("data", DType::U8).codec(codec))
        .chunk_size_bytes(a.chunk_bytes);
    let t = Instant::now();
    let config = WriterConfig::default().num_writers(usize::from(a.writers));
    let mut w = Writer::create(&a.dir, &schema, config)?;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let text = (content == Content::Text).then(|| Text::new(&mut Rng(0x7E47_5EED_0000_0001)));
    let mut rec = vec![0u8; a.record_bytes];
    for _ in 0..a.records {
        match (&text, content) {
            (Some(text), _) => text.fill(&mut rng, &mut rec),
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
        w.append(&[&rec])?;
    }
    w.commit()?;
    let s = t.elapsed().as_secs_f64();
    let total = a.records as f64 * a.record_bytes as f64;
    println!(
        "made {} records of {} bytes ({}, {:?} content, {} append tasks) in {:.2} s: {:.1} MB/s",
        a.records,
        a.record_bytes,
        codec,
        content,
        a.writers,
        s,
        total / s / 1e6
    );
    Ok(())
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

/// Copies what fits of `bytes` into `rec` at `at`; returns where it stopped.
fn put(rec: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let n = bytes.len().min(rec.len().saturating_sub(at));
    if let (Some(dst), Some(src)) = (rec.get_mut(at..at + n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    at + n
}
