//! Shared by the integration tests that load the ABI fakes of the vendor libraries
//! (`fakes/librga`, `fakes/librknnrt`): each is built once per test process, in the same
//! profile as the zcpipe binary under test, and found next to it.

#![allow(dead_code)] // each test file uses part of this

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The package's folder (where `models/` and `tests/data/` are).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cargo build --locked <args>` in this test build's profile and returns `file` from
/// the folder of the zcpipe binary under test (`target/<profile>/`).
fn build(args: &[&str], file: &str) -> PathBuf {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root()).args(["build", "--locked"]).args(args);
    if !cfg!(debug_assertions) {
        c.arg("--release");
    }
    let st = c.status().unwrap_or_else(|e| panic!("running cargo build {args:?}: {e}"));
    assert!(st.success(), "cargo build {args:?} failed: {st}");
    let lib = Path::new(env!("CARGO_BIN_EXE_zcpipe")).parent().unwrap().join(file);
    assert!(lib.exists(), "{} missing after the build", lib.display());
    lib
}

/// `target/<profile>/librga.so`, the fake librga. Built alone: it depends on libc only, so
/// a source change elsewhere never makes a test rebuild zcpipe.
pub fn fake_librga() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build(&["-p", "zcpipe-fake-librga"], "librga.so"))
}

/// `target/<profile>/librknnrt.so`, the fake librknnrt (a no-op cargo call when `make test`
/// has just built it). Built with zcpipe's library (`--lib`, which leaves the binary under
/// test alone), so its dependencies get zcpipe's features and tract is compiled once for
/// both.
pub fn fake_librknnrt() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build(&["--lib", "-p", "zcpipe", "-p", "zcpipe-fake-librknnrt"], "librknnrt.so"))
}
