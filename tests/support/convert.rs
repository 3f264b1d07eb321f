//! Inputs of the image and WebDataset converters' tests: a folder of class folders, tar
//! shards, and a dataset read back whole.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;

use super::images::{jpeg, pixels, png};
use zrecord::Dataset;

/// Class folders under `root`: `classes[c]` holds `per_class` images, JPEGs and PNGs of a few
/// sizes (the odd ones PNG), named `img<i>.<ext>`; also a README and a file directly in
/// `root`, which the converter ignores. Returns every image's bytes and label, in the order
/// the converter stores them (class, then path).
pub fn class_folders(root: &Path, classes: &[&str], per_class: u64) -> Vec<(Vec<u8>, i64)> {
    let mut out = Vec::new();
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("stray.jpg"), jpeg(8, 8, 1)).unwrap();
    for (label, class) in classes.iter().enumerate() {
        let dir = root.join(class);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("README.txt"), b"not an image").unwrap();
        let mut files = Vec::new();
        for i in 0..per_class {
            let seed = label as u64 * 1000 + i;
            let (w, h) = (16 + (i % 5) as u16, 12 + (i % 3) as u16);
            let (name, bytes) = if i % 2 == 1 {
                let p = pixels(w, h, seed);
                (format!("img{i:03}.png"), png(&p, w.into(), h.into(), 3))
            } else {
                (format!("img{i:03}.jpg"), jpeg(w, h, seed))
            };
            std::fs::write(dir.join(&name), &bytes).unwrap();
            files.push((name, bytes));
        }
        files.sort();
        out.extend(files.into_iter().map(|(_, b)| (b, label as i64)));
    }
    out
}

/// Every record of the dataset at `dir`, all fields, in index order.
pub fn records(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    let ds = Dataset::open(dir).unwrap();
    let n = ds.len();
    let fields = ds.schema().fields.len();
    let idx: Vec<u64> = (0..n).collect();
    let batch = ds.gather_blocking(&idx).unwrap();
    (0..n as usize)
        .map(|r| {
            (0..fields)
                .map(|f| batch.get(r, f).unwrap().to_vec())
                .collect()
        })
        .collect()
}

/// A tar shard at `path` of `members` (name, bytes), in order.
pub fn shard(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, &bytes[..]).unwrap();
    }
    b.finish().unwrap();
}
