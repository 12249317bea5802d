//! Helpers shared by the unit tests of several modules (built for tests only: feature `testing`).

use std::path::PathBuf;

/// A fresh temporary directory holding one file, `name`, with `bytes` in it (a junk model,
/// a broken image, an empty label file). The directory and the file are removed when the
/// returned guard drops, so keep it alive while the path is used.
pub fn file_with(name: &str, bytes: impl AsRef<[u8]>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("writing the test file");
    (dir, path)
}
