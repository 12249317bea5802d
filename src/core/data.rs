//! Finding the data files zcpipe ships (the bundled clip, models, label files) from
//! wherever it is run: the source tree, an installed binary, or a test.

use std::path::{Path, PathBuf};

/// Finds a bundled data file (`rel` is relative to the data directory, e.g. `one-by-one-person-detection.mp4`).
///
/// Tries, in order, each base below with `rel` and with `tests/data/rel` appended: the
/// current directory, `$ZCPIPE_DATA_DIR`, the executable's directory and each of its
/// ancestors (so `target/release/zcpipe` finds the repo's `tests/data/`), and last the
/// crate root this binary was built from (`CARGO_MANIFEST_DIR`). Returns the first path
/// that is a file.
pub fn find_data_file(rel: &str) -> Option<PathBuf> {
    let mut bases: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        bases.push(cwd);
    }
    if let Some(dir) = std::env::var_os("ZCPIPE_DATA_DIR") {
        if !dir.is_empty() {
            bases.push(PathBuf::from(dir));
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        bases.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    bases.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    bases
        .iter()
        .flat_map(|b| [b.join(rel), b.join("tests").join("data").join(rel)])
        .find(|p| p.is_file())
}

/// Resolves a data path given by a user: as given if it exists (or is absolute), else the
/// bundled file of that relative name ([`find_data_file`]), else as given (so the error
/// that follows names what the user typed).
pub fn resolve_data_path(p: &Path) -> PathBuf {
    if p.exists() || p.is_absolute() {
        return p.to_path_buf();
    }
    p.to_str().and_then(find_data_file).unwrap_or_else(|| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_data_file_finds_bundled_clip() {
        let p = find_data_file("one-by-one-person-detection.mp4").expect("bundled clip");
        assert!(p.ends_with("one-by-one-person-detection.mp4"), "{}", p.display());
        assert!(find_data_file("no-such-file.bin").is_none());
    }

    #[test]
    fn user_paths_win_over_bundled_ones() {
        assert_eq!(resolve_data_path(Path::new("/no/such/model.onnx")), PathBuf::from("/no/such/model.onnx"));
        assert!(resolve_data_path(Path::new("models/coco80.txt")).is_file());
        assert_eq!(resolve_data_path(Path::new("nowhere/x.bin")), PathBuf::from("nowhere/x.bin"));
    }
}
