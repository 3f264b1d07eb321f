//! A damaged dataset directory. A small valid dataset (several chunks, patches, a swap-remove, a
//! compacted table generation; see `zrecord_fuzz::base`) is built once on the simulated file
//! system; the input mutates its files (which file, where, what: see `zrecord_fuzz::Mutation`),
//! the result is written to a scratch directory on `/dev/shm`, and then:
//!
//! - `Dataset::open`, a full gather with checksums verified, up to four random gathers whose
//!   indices come from the rest of the input, and `Snapshot::scan` of every field;
//! - `Writer::open` (recovery), and the same full gather again.
//!
//! Any error is fine. A panic, a hang, or a read that succeeds with bytes other than the
//! committed records' is a bug — unless the fuzzer forged a checksum (`zrecord_fuzz::forged`),
//! which no format without a cryptographic hash can detect.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use zrecord::{Dataset, Writer, WriterConfig};
use zrecord_fuzz::{base, forged, materialise, Base, Input, Mutation};

struct Oracle<'a> {
    base: &'a Base,
    files: &'a BTreeMap<PathBuf, Option<Vec<u8>>>,
    forged: Option<bool>,
}

impl Oracle<'_> {
    /// Panics with `what` unless the input forged a checksum.
    fn wrong(&mut self, what: String) {
        let forged = *self
            .forged
            .get_or_insert_with(|| forged(self.base, self.files));
        assert!(forged, "{what}");
    }
}

fn gather_and_check(ds: &Dataset, indices: &[u64], o: &mut Oracle<'_>, when: &str) {
    let Ok(batch) = ds.gather_blocking(indices) else {
        return;
    };
    assert_eq!(batch.len(), indices.len(), "{when}: batch length");
    for (r, &i) in indices.iter().enumerate() {
        let Some(rec) = o.base.model.get(i as usize) else {
            o.wrong(format!(
                "{when}: record {i} read, past the {} committed",
                o.base.model.len()
            ));
            return;
        };
        for (f, want) in rec.iter().enumerate() {
            if batch.get(r, f) != Some(&want[..]) {
                o.wrong(format!(
                    "{when}: record {i} field {f} read as {:?}, committed {want:?}",
                    batch.get(r, f)
                ));
                return;
            }
        }
    }
}

fn read_checks(dir: &Path, random: &[u8], o: &mut Oracle<'_>, when: &str) {
    let Ok(ds) = Dataset::open(dir) else {
        return;
    };
    let n = ds.len();
    if n != o.base.model.len() as u64 {
        o.wrong(format!(
            "{when}: opened with {n} records, {} committed",
            o.base.model.len()
        ));
        return;
    }
    let all: Vec<u64> = (0..n).collect();
    gather_and_check(&ds, &all, o, when);
    for group in random.chunks(4).take(4) {
        // Indices up to two past the end: those must be refused.
        let idx: Vec<u64> = group.iter().map(|&b| u64::from(b) % (n + 2)).collect();
        gather_and_check(&ds, &idx, o, when);
    }
    let snap = ds.snapshot();
    for f in 0..snap.meta().fields.len() {
        let Ok(scan) = snap.scan(f) else { continue };
        let mut count = 0u64;
        for (i, e) in scan.enumerate() {
            count += 1;
            assert!(
                count <= n + 1,
                "{when}: scan of field {f} yields more than {n} items"
            );
            let Ok(e) = e else { continue };
            let want = o.base.model.get(i).and_then(|r| r.get(f)).map(Vec::len);
            if want != Some(e.logical_len as usize) {
                o.wrong(format!(
                    "{when}: scan of field {f} says record {i} is {} bytes, committed {want:?}",
                    e.logical_len
                ));
                break;
            }
        }
    }
}

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let b = tempfile::Builder::new()
        .prefix("zrecord-fuzz-")
        .tempdir_in(shm);
    match b {
        Ok(t) => t,
        Err(_) => tempfile::tempdir().unwrap_or_else(|e| panic!("no scratch directory: {e}")),
    }
}

fuzz_target!(|data: &[u8]| {
    let base = base();
    let mut input = Input::new(data);
    let mutations = Mutation::parse(&mut input);
    let random = input.rest();
    let mut files = base.files.clone();
    for m in &mutations {
        m.apply(&mut files, &base.names);
    }
    let tmp = scratch();
    let dir = tmp.path().join("ds");
    if materialise(&files, &dir).is_err() {
        return;
    }
    let mut oracle = Oracle {
        base,
        files: &files,
        forged: None,
    };
    read_checks(&dir, random, &mut oracle, "before recovery");
    let Ok(w) = Writer::open(&dir, WriterConfig::default().num_writers(1)) else {
        return;
    };
    drop(w);
    read_checks(&dir, &[], &mut oracle, "after recovery");
});
