//! The data-path settings every hop of one pipeline shares, and the named choices that
//! settings files and command lines pick from.
//!
//! Every stage process of an instance must agree on these ([`DataPath`]): where the
//! sockets are, what a full ring does, how consumers wait, where buffers come from and
//! whether frames are copied. The command-line front builds a [`DataPath`] once, checked,
//! and hands it to a stage; nothing here parses arguments.

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dmabuf::HeapChoice;
use super::frame::Placement;
use super::link::WaitMode;
use super::ring::RingPolicy;

/// A closed set of named values (`--heap system`, `--ring-policy block`): each value with
/// its spelling and a one-line description, in the order help text lists them.
///
/// A front end (the command line, a config file) builds its parser from [`Choice::ALL`];
/// [`Choice::name`] gives the spelling back, so flags passed on to a child process are
/// written from the same table they are parsed with.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every value, its spelling and its description.
    const ALL: &'static [(Self, &'static str, &'static str)];

    /// The spelling of `self` (`"drop-oldest"`).
    fn name(self) -> &'static str {
        Self::ALL.iter().find(|(v, ..)| *v == self).map(|(_, n, _)| *n).unwrap_or("?")
    }

    /// The value spelt `s`, if any.
    fn from_name(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(_, n, _)| *n == s).map(|(v, ..)| *v)
    }
}

impl Choice for HeapChoice {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (HeapChoice::Auto, "auto", "The first present of system, dma32, cma, udmabuf, drm, memfd"),
        (HeapChoice::System, "system", "`/dev/dma_heap/system` (cached, may sit above 4 GiB)"),
        (HeapChoice::Dma32, "dma32", "A heap below 4 GiB: `/dev/dma_heap/system-dma32` (what RGA2 needs on >4 GiB boards)"),
        (HeapChoice::Cma, "cma", "A contiguous heap: `/dev/dma_heap/linux,cma`, `cma` or `reserved`"),
        (HeapChoice::Udmabuf, "udmabuf", "udmabuf over sealed memfds (`/dev/udmabuf`)"),
        (HeapChoice::Drm, "drm", "DRM dumb buffers exported as dma-bufs (PRIME) from the first `/dev/dri/card*` that makes them (DRM but no dma-buf heap)"),
        (HeapChoice::Memfd, "memfd", "Sealed memfds: not dma-bufs, but shareable the same way (host fallback)"),
    ];
}

impl Choice for WaitMode {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (WaitMode::Eventfd, "eventfd", "Sleep in epoll_wait(2) on an eventfd doorbell (one syscall per wake-up)"),
        (WaitMode::Spin, "spin", "Busy-poll the ring (lowest latency, burns a core)"),
    ];
}

impl Choice for RingPolicy {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (
            RingPolicy::DropOldest,
            "drop-oldest",
            "Video: the producer never waits; the oldest queued frame is dropped and counted",
        ),
        (RingPolicy::Block, "block", "Commands: the producer waits for the consumer"),
    ];
}

impl Choice for Placement {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (Placement::TopLeft, "top-left", "The picture at the top-left, pad right and below (YOLOX)"),
        (Placement::Center, "center", "The picture centred, pad on both sides (Ultralytics, YOLOv5)"),
    ];
}

/// What every stage of one pipeline instance must agree on: the hop settings.
#[derive(Clone, Debug, PartialEq)]
pub struct DataPath {
    /// Instance name (a plain folder name): stages of one instance meet in [`DataPath::run_dir`].
    pub instance: String,
    /// Directory of the stage sockets (`<runtime base>/<instance>` unless given).
    pub run_dir: PathBuf,
    /// What a full ring does.
    pub ring_policy: RingPolicy,
    /// How consumers wait for frames.
    pub wait: WaitMode,
    /// `--spin-us`: how long a sleeping consumer spins on its ring first (adaptive; zero,
    /// the default, never spins: see [`super::channel::Receiver::set_spin`]).
    pub spin: Duration,
    /// Where buffers come from.
    pub heap: HeapChoice,
    /// `--copy-mode`: copy every frame through the CPU at every hop, as a plain pipeline
    /// would, to measure what zero-copy saves.
    pub copy_mode: bool,
    /// How long a stage waits for its neighbours to appear.
    pub connect_timeout: Duration,
    /// Time between stats reports (`None`: only the final report).
    pub stats_interval: Option<Duration>,
}

impl Default for DataPath {
    /// The command line's defaults: instance `default`, drop-oldest, eventfd, heap auto,
    /// zero-copy, 30 s connect timeout, stats every 2 s.
    fn default() -> DataPath {
        DataPath {
            instance: "default".into(),
            run_dir: run_dir("default", None),
            ring_policy: RingPolicy::DropOldest,
            wait: WaitMode::Eventfd,
            spin: Duration::ZERO,
            heap: HeapChoice::Auto,
            copy_mode: false,
            connect_timeout: Duration::from_secs(30),
            stats_interval: Some(Duration::from_secs(2)),
        }
    }
}

impl DataPath {
    /// The settings every stage of a pipeline must agree on, as `--key=value` flags for
    /// a child `zcpipe stage ...`: `--ring-policy`, `--wait`, `--heap` (and `--spin-us`
    /// and `--copy-mode` when set), spelt from the [`Choice`] tables.
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--ring-policy={}", self.ring_policy.name()),
            format!("--wait={}", self.wait.name()),
            format!("--heap={}", self.heap.name()),
        ];
        if !self.spin.is_zero() {
            v.push(format!("--spin-us={}", self.spin.as_micros()));
        }
        if self.copy_mode {
            v.push("--copy-mode".into());
        }
        v
    }

    /// The socket stage process `id` listens on in the run directory (`capture.sock`,
    /// `capture@front.sock`, `scale.sock`, ...).
    pub fn socket(&self, id: &crate::id::StageId) -> PathBuf {
        self.run_dir.join(format!("{id}.sock"))
    }
}

/// Checks a camera name (`--source NAME=...`, `--camera`): 1 to 32 of `a-z`, `0-9`, `_`
/// and `-`. Names become file names (`capture@NAME.sock`), systemd instance names
/// (`zcpipe-capture@NAME.service`) and, later, MQTT topic levels, so `/`, `+`, `#`, spaces
/// and capitals are refused. The error names the text and the rule.
pub fn check_camera_name(name: &str) -> anyhow::Result<()> {
    let ok = (1..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !ok {
        anyhow::bail!("camera name \"{name}\": use 1 to 32 of a-z, 0-9, _ and - (it becomes a socket name and an MQTT topic level: no /, +, #, spaces or capitals)");
    }
    Ok(())
}

/// Checks a list of camera names (`flag` names the option in the error): each name is
/// valid ([`check_camera_name`]), none repeats, and there are at most
/// [`crate::frame::MAX_CAMERAS`]. Returns the names.
pub fn check_camera_list(flag: &str, names: &[String]) -> anyhow::Result<Vec<String>> {
    if names.len() > crate::frame::MAX_CAMERAS {
        anyhow::bail!(
            "{flag}: {} cameras; one pipeline serves at most {}: run a second instance (--instance) for more",
            names.len(),
            crate::frame::MAX_CAMERAS
        );
    }
    for (i, n) in names.iter().enumerate() {
        check_camera_name(n).map_err(|e| anyhow::anyhow!("{flag}: {e:#}"))?;
        if names[..i].contains(n) {
            anyhow::bail!("{flag}: camera name \"{n}\" is given twice; give each camera its own name");
        }
    }
    Ok(names.to_vec())
}

/// Checks an instance name: a plain name (it becomes a folder name).
pub fn check_instance(i: &str) -> anyhow::Result<()> {
    if i.is_empty() || i.contains('/') || i == "." || i == ".." || i.contains('\0') {
        anyhow::bail!("--instance {i:?}: use a plain name (letters, digits, - and _), it becomes a folder name");
    }
    Ok(())
}

/// Base directory for zcpipe's sockets: `$XDG_RUNTIME_DIR/zcpipe`, or `/run/zcpipe` for
/// root, or `/tmp/zcpipe-<uid>`.
pub fn runtime_base() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("zcpipe");
    }
    let uid = nix::unistd::Uid::effective();
    if uid.is_root() {
        PathBuf::from("/run/zcpipe")
    } else {
        PathBuf::from(format!("/tmp/zcpipe-{uid}"))
    }
}

/// Makes `dir` a directory only this user can change, or checks that it is one (the run
/// directory and the runtime base, where the stage and detections sockets live: whoever can
/// write there can replace a socket and impersonate a stage).
///
/// Missing: created mode 0700 (under the runtime base, the base first, also 0700; other
/// missing parents as `mkdir -p` makes them). Existing: it must be a directory (a symlink
/// is refused: lstat(2)), owned by this effective uid, and writable by nobody else (no group
/// or other write bit, so neither `/tmp` itself nor a `/tmp/zcpipe-<uid>` made beforehand
/// by another user with mode 1777). Errors name the directory, what is wrong (owner uid,
/// mode) and the fix.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    private_place(
        dir,
        "run directory",
        "remove it, or pass --run-dir (and --publish) to a directory of your own with mode 0700",
    )
}

/// [`private_dir`] for a directory the user named with another flag: errors say `what` it is
/// (`--serve-socket directory`) and end with `fix`.
pub fn private_place(dir: &Path, what: &str, fix: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = runtime_base();
    if dir != base && dir.starts_with(&base) {
        private_dir(&base)?;
    }
    let me = nix::unistd::Uid::effective().as_raw();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                // Made meanwhile by another process: checked below like any existing one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                r => r.with_context(|| format!("creating {what} {}", dir.display()))?,
            }
            private_place(dir, what, fix)
        }
        Err(e) => Err(anyhow::anyhow!("{what} {}: {e}", dir.display())),
        Ok(m) => {
            if m.file_type().is_symlink() {
                anyhow::bail!(
                    "{what} {} is a symbolic link: zcpipe does not follow links for its sockets; {fix}",
                    dir.display()
                );
            }
            if !m.is_dir() {
                anyhow::bail!("{what} {} is not a directory; {fix}", dir.display());
            }
            if m.uid() != me {
                anyhow::bail!(
                    "{what} {} belongs to uid {}, not to you (uid {me}): its owner could replace zcpipe's sockets; {fix}",
                    dir.display(),
                    m.uid()
                );
            }
            if m.mode() & 0o022 != 0 {
                anyhow::bail!(
                    "{what} {} has mode {:o}: other users can write in it and replace zcpipe's sockets; chmod 700 {}, or {fix}",
                    dir.display(),
                    m.mode() & 0o7777,
                    dir.display()
                );
            }
            // Nor may anyone else rename it away and put theirs in its place.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                trusted_dir(parent, &format!("{what} {}", dir.display()))?;
            }
            Ok(())
        }
    }
}

/// A place for a socket that another local user could take over: one line naming the
/// directory, what is wrong and the fix (`zcpipe` exits 2, as for a bad argument).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlaceError(pub String);

/// Checks that no other user can rename, remove or replace what is in `dir`: every
/// directory from `dir` up to `/` (symbolic links resolved) must belong to this user or to
/// root, and must not be writable by group or others unless it is sticky (as `/tmp` is:
/// there only a file's owner may rename or remove it). `what` names the flag for the
/// message (`--publish /x/y.sock`). A missing `dir` is checked from its nearest existing
/// ancestor.
pub fn trusted_dir(dir: &Path, what: &str) -> Result<(), PlaceError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::Uid::effective().as_raw();
    // A symbolic link on the way is as good as its owner: one of another user (in a sticky
    // directory such as /tmp, where they may replace their own link) could point the path
    // elsewhere at any time. Each link's target is then checked below, resolved.
    let abs = std::path::absolute(dir).map_err(|e| PlaceError(format!("{what}: {}: {e}", dir.display())))?;
    for a in abs.ancestors() {
        if let Ok(m) = std::fs::symlink_metadata(a) {
            if m.file_type().is_symlink() && m.uid() != me && m.uid() != 0 {
                return Err(PlaceError(format!(
                    "{what}: {} is a symbolic link of uid {}, who could point it elsewhere; use a directory of your own that only you can write (mode 0700)",
                    a.display(),
                    m.uid()
                )));
            }
        }
    }
    let existing = dir.ancestors().find(|d| d.exists()).unwrap_or(Path::new("/"));
    let canon = std::fs::canonicalize(existing)
        .map_err(|e| PlaceError(format!("{what}: cannot resolve {}: {e}", existing.display())))?;
    let fix = "use a directory of your own that only you can write (mode 0700), or leave the flag out for zcpipe's runtime directory";
    for d in canon.ancestors() {
        let m = std::fs::metadata(d).map_err(|e| PlaceError(format!("{what}: {}: {e}", d.display())))?;
        if m.uid() != me && m.uid() != 0 {
            return Err(PlaceError(format!(
                "{what}: directory {} belongs to uid {}, who could replace zcpipe's socket there; {fix}",
                d.display(),
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(PlaceError(format!(
                "{what}: directory {} has mode {:o}: other users can rename or replace what is in it, zcpipe's socket too; {fix}",
                d.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Camera `i`'s value of a per-camera setting given as a list (`--detect-fps`, `--weight`):
/// none is every camera's `default`, one is every camera's, more are each camera's (a camera
/// past the list gets `default`).
pub fn per_camera(values: &[f64], i: usize, default: f64) -> f64 {
    match values {
        [] => default,
        [one] => *one,
        all => all.get(i).copied().unwrap_or(default),
    }
}

/// The run directory of an instance: `explicit` if given, else `<runtime base>/<instance>`.
pub fn run_dir(instance: &str, explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(|| runtime_base().join(instance))
}

/// The default detections socket of an instance: `<runtime base>/detections.sock` for
/// `default`, `detections-<instance>.sock` for any other (so two instances never collide).
pub fn default_detections_socket(instance: &str) -> PathBuf {
    let name =
        if instance == "default" { "detections.sock".to_string() } else { format!("detections-{instance}.sock") };
    runtime_base().join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_spell_back_what_they_parse() {
        fn all<T: Choice + std::fmt::Debug>() {
            for (v, n, _) in T::ALL {
                assert_eq!(v.name(), *n);
                assert_eq!(T::from_name(n), Some(*v));
            }
            assert_eq!(T::from_name("nonsense"), None);
        }
        all::<HeapChoice>();
        all::<WaitMode>();
        all::<RingPolicy>();
    }

    #[test]
    fn data_path_flags_are_the_command_line_spellings() {
        let d = DataPath {
            ring_policy: RingPolicy::Block,
            wait: WaitMode::Spin,
            heap: HeapChoice::Dma32,
            copy_mode: true,
            ..Default::default()
        };
        assert_eq!(d.flags(), ["--ring-policy=block", "--wait=spin", "--heap=dma32", "--copy-mode"]);
        assert_eq!(DataPath::default().flags(), ["--ring-policy=drop-oldest", "--wait=eventfd", "--heap=auto"]);
    }

    #[test]
    fn a_directory_others_can_write_is_not_trusted_unless_sticky() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = trusted_dir(&open.join("sub"), "--publish x").unwrap_err().to_string();
        assert!(e.contains("has mode 777: other users can rename or replace"), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        trusted_dir(&open.join("sub"), "--publish x").unwrap();
        // A link of another user's in a sticky directory, to a directory of ours: refused.
        if nix::unistd::geteuid().is_root() {
            let ours = t.path().join("ours");
            std::fs::create_dir(&ours).unwrap();
            let link = open.join("link");
            std::os::unix::fs::symlink(&ours, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
            let e = trusted_dir(&link, "--publish x").unwrap_err().to_string();
            assert!(e.contains("is a symbolic link of uid 65534"), "{e}");
            std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
            trusted_dir(&link, "--publish x").unwrap();
        }
        // A run directory of ours, 0700, inside a directory anyone can write: refused.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&open.join("run")).unwrap_err().to_string();
        assert!(e.contains("run directory") && e.contains("has mode 777"), "{e}");
    }

    #[test]
    fn private_dirs_are_made_0700_and_loose_or_foreign_ones_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = tempfile::tempdir().unwrap();
        let run = t.path().join("a/run");
        private_dir(&run).unwrap();
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        private_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = private_dir(&run).unwrap_err().to_string();
        assert!(e.contains("has mode 1777") && e.contains("chmod 700") && e.contains("--run-dir"), "{e}");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o750)).unwrap();
        private_dir(&run).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&run, &link).unwrap();
        assert!(private_dir(&link).unwrap_err().to_string().contains("symbolic link"));
        let file = t.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(private_dir(&file).unwrap_err().to_string().contains("not a directory"));
        if nix::unistd::Uid::effective().is_root() {
            // Another user's directory (root can make one).
            let theirs = t.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
            let e = private_dir(&theirs).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 4242") && e.contains("not to you (uid 0)"), "{e}");
        }
    }

    #[test]
    fn instance_names_are_plain() {
        for bad in ["", "a/b", ".", "..", "x\0y"] {
            assert!(check_instance(bad).is_err(), "{bad:?}");
        }
        check_instance("front-door_2").unwrap();
    }
}
