//! Finding the data files zcpipe ships (the bundled clip, models, label files) from
//! wherever it is run: the source tree, an installed binary (the `.deb` of `make deb`), or a test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the package (`scripts/deb.sh`) installs the data files: `models/` (the ONNX and
/// `.rknn` models and `coco80.txt`) and the bundled clip, so that `zcpipe run` works with
/// no source tree.
pub const INSTALLED_DATA_DIR: &str = "/usr/share/zcpipe";

/// The directories a data file is looked up under, first first: the current directory,
/// `$ZCPIPE_DATA_DIR` (when set and not empty), the executable's directory and each of its
/// ancestors (so `target/release/zcpipe` finds the repo's files), [`INSTALLED_DATA_DIR`],
/// and last the crate root the binary was built from (`CARGO_MANIFEST_DIR`).
///
/// The installed directory comes before the crate root so that an installed `/usr/bin/zcpipe`
/// uses the files installed with it, even on the machine whose checkout built it.
fn search_bases(
    cwd: Option<PathBuf>,
    data_dir: Option<OsString>,
    exe: Option<PathBuf>,
    installed: &Path,
    manifest: &Path,
) -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = cwd.into_iter().collect();
    bases.extend(data_dir.filter(|d| !d.is_empty()).map(PathBuf::from));
    if let Some(exe) = exe {
        bases.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    bases.push(installed.to_path_buf());
    bases.push(manifest.to_path_buf());
    bases
}

/// The first of `base/rel` and `base/tests/data/rel`, over `bases` in order, that is a file.
fn find_under(bases: &[PathBuf], rel: &str) -> Option<PathBuf> {
    bases.iter().flat_map(|b| [b.join(rel), b.join("tests").join("data").join(rel)]).find(|p| p.is_file())
}

/// Finds a bundled data file (`rel` is relative to the data directory, e.g.
/// `one-by-one-person-detection.mp4` or `models/yolox_nano.onnx`).
///
/// Tries each base of the search order (the current directory, `$ZCPIPE_DATA_DIR`, the
/// executable's directory and its ancestors, `/usr/share/zcpipe`, the crate root this binary
/// was built from) with `rel` and with `tests/data/rel` appended. Returns the first path
/// that is a file.
pub fn find_data_file(rel: &str) -> Option<PathBuf> {
    let bases = search_bases(
        std::env::current_dir().ok(),
        std::env::var_os("ZCPIPE_DATA_DIR"),
        std::env::current_exe().ok(),
        Path::new(INSTALLED_DATA_DIR),
        source_root(),
    );
    find_under(&bases, rel)
}

/// The workspace the binary was built from, where `models/` and `tests/data/` are: the last
/// place [`find_data_file`] looks, and the root the unit tests read their data from.
pub fn source_root() -> &'static Path {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.parent().and_then(Path::parent).unwrap_or(crate_dir)
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

    /// An installed binary (`/usr/bin/zcpipe`, run from a directory of its own) finds the
    /// package's files, not the checkout it was built from; a repo build (`target/release/`)
    /// still finds the repo's, and `$ZCPIPE_DATA_DIR` comes before both.
    #[test]
    fn installed_data_dir_comes_after_the_repo_and_before_the_build_tree() {
        let d = tempfile::tempdir().unwrap();
        let (repo, installed, env_dir, elsewhere) =
            (d.path().join("repo"), d.path().join("usr/share/zcpipe"), d.path().join("env"), d.path().join("cwd"));
        for f in [
            repo.join("models/m.onnx"),
            repo.join("tests/data/clip.mp4"),
            installed.join("models/m.onnx"),
            installed.join("clip.mp4"),
            env_dir.join("models/m.onnx"),
        ] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, b"x").unwrap();
        }
        std::fs::create_dir_all(&elsewhere).unwrap();
        let installed_exe = Some(d.path().join("usr/bin/zcpipe"));
        let repo_exe = Some(repo.join("target/release/zcpipe"));

        // Installed: the package's files win over the build tree (the manifest dir).
        let bases = search_bases(Some(elsewhere.clone()), None, installed_exe.clone(), &installed, &repo);
        assert_eq!(find_under(&bases, "models/m.onnx"), Some(installed.join("models/m.onnx")));
        assert_eq!(find_under(&bases, "clip.mp4"), Some(installed.join("clip.mp4")));
        // ... and $ZCPIPE_DATA_DIR wins over the package's (an empty one counts as unset).
        let bases = search_bases(
            Some(elsewhere.clone()),
            Some(env_dir.clone().into()),
            installed_exe.clone(),
            &installed,
            &repo,
        );
        assert_eq!(find_under(&bases, "models/m.onnx"), Some(env_dir.join("models/m.onnx")));
        let bases = search_bases(Some(elsewhere.clone()), Some(OsString::new()), installed_exe, &installed, &repo);
        assert_eq!(find_under(&bases, "models/m.onnx"), Some(installed.join("models/m.onnx")));
        // A repo build finds the repo's files through its own path, before the package's.
        let bases = search_bases(Some(elsewhere.clone()), None, repo_exe, &installed, &repo);
        assert_eq!(find_under(&bases, "models/m.onnx"), Some(repo.join("models/m.onnx")));
        assert_eq!(find_under(&bases, "clip.mp4"), Some(repo.join("tests/data/clip.mp4")));
        // Nothing installed: the build tree is the last resort.
        let bases = search_bases(Some(elsewhere), None, None, &d.path().join("none"), &repo);
        assert_eq!(find_under(&bases, "clip.mp4"), Some(repo.join("tests/data/clip.mp4")));
        assert_eq!(find_under(&bases, "nothing.bin"), None);
    }
}
