//! File names inside a dataset directory: the on-disk layout (docs/FORMAT.md), paths only, no I/O.

use std::path::{Path, PathBuf};

/// The commit point.
pub const META: &str = "meta.json";
/// The file a commit writes before renaming it over [`META`].
pub const META_TMP: &str = "meta.json.tmp";
/// The writer's exclusive lock.
pub const LOCK: &str = "writer.lock";
/// What names a dataset being created beside its path: `.<name><CREATE_INFIX><pid>-<hex>`, renamed to
/// the path once it holds an empty commit.
pub const CREATE_INFIX: &str = ".zrecord-create-";
/// The directory of chunk files.
pub const CHUNK_DIR: &str = "chunk";

/// `dir/meta.json`.
pub fn meta(dir: &Path) -> PathBuf {
    dir.join(META)
}

/// `dir/chunk`.
pub fn chunk_dir(dir: &Path) -> PathBuf {
    dir.join(CHUNK_DIR)
}

/// `dir/chunk/<id>.zr`, the id zero-padded to five digits.
pub fn chunk(dir: &Path, id: u16) -> PathBuf {
    dir.join(chunk_name(id))
}

/// `chunk/<id>.zr`, the id zero-padded to five digits: a chunk file's name in a dataset.
pub fn chunk_name(id: u16) -> String {
    format!("{CHUNK_DIR}/{id:05}.zr")
}

/// Parses a chunk file name back into its id.
pub fn parse_chunk(name: &str) -> Option<u16> {
    let stem = name.strip_suffix(".zr")?;
    if stem.len() != 5 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// `dir/<field>.<generation>.offsets`.
pub fn table(dir: &Path, field: &str, generation: u64) -> PathBuf {
    dir.join(table_name(field, generation))
}

/// `<field>.<generation>.offsets`: an offset table's name in a dataset.
pub fn table_name(field: &str, generation: u64) -> String {
    format!("{field}.{generation}.offsets")
}

/// `dir/<field>.<generation>.patches`.
pub fn patches(dir: &Path, field: &str, generation: u64) -> PathBuf {
    dir.join(patches_name(field, generation))
}

/// `<field>.<generation>.patches`: a patch log's name in a dataset.
pub fn patches_name(field: &str, generation: u64) -> String {
    format!("{field}.{generation}.patches")
}

/// `dir/<field>.<number>.zdict`: a field's zstd dictionary.
pub fn dictionary(dir: &Path, field: &str, number: u8) -> PathBuf {
    dir.join(dictionary_name(field, number))
}

/// `<field>.<number>.zdict`.
pub fn dictionary_name(field: &str, number: u8) -> String {
    format!("{field}.{number}.zdict")
}

/// True for a name that looks like an offset table or patch log (`*.<digits>.offsets|patches`).
pub fn is_table_file(name: &str) -> bool {
    let Some(rest) = name
        .strip_suffix(".offsets")
        .or_else(|| name.strip_suffix(".patches"))
    else {
        return false;
    };
    match rest.rsplit_once('.') {
        Some((field, gen)) => {
            !field.is_empty() && !gen.is_empty() && gen.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_round_trip() {
        for id in [0u16, 7, 65_534] {
            let p = chunk(Path::new("/d"), id);
            let name = p.file_name().unwrap().to_str().unwrap();
            assert_eq!(parse_chunk(name), Some(id));
        }
        assert_eq!(parse_chunk("1.zr"), None);
        assert_eq!(parse_chunk("00001.zr.tmp"), None);
        assert_eq!(parse_chunk("99999.zr"), None);
    }

    #[test]
    fn table_names_are_recognised() {
        assert!(is_table_file("image.0.offsets"));
        assert!(is_table_file("a.b.12.patches"));
        assert!(!is_table_file("meta.json"));
        assert!(!is_table_file(".3.offsets"));
        assert!(!is_table_file("x.offsets"));
    }
}
