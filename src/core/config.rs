//! The data-path settings every hop of one pipeline shares, and the named choices that
//! settings files and command lines pick from.
//!
//! Every stage process of an instance must agree on these ([`DataPath`]): where the
//! sockets are, what a full ring does, how consumers wait, where buffers come from and
//! whether frames are copied. The command-line front builds a [`DataPath`] once, checked,
//! and hands it to a stage; nothing here parses arguments.

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
        (HeapChoice::Auto, "auto", "The first present of system, dma32, cma, udmabuf, memfd"),
        (HeapChoice::System, "system", "`/dev/dma_heap/system` (cached, may sit above 4 GiB)"),
        (HeapChoice::Dma32, "dma32", "A heap below 4 GiB: `/dev/dma_heap/system-dma32` (what RGA2 needs on >4 GiB boards)"),
        (HeapChoice::Cma, "cma", "A contiguous heap: `/dev/dma_heap/linux,cma`, `cma` or `reserved`"),
        (HeapChoice::Udmabuf, "udmabuf", "udmabuf over sealed memfds (`/dev/udmabuf`)"),
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
        (RingPolicy::DropOldest, "drop-oldest", "Video: the producer never waits; the oldest queued frame is dropped and counted"),
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

    /// The socket of `stage` (`capture`, `scale`, ...) in the run directory.
    pub fn socket(&self, stage: &str) -> PathBuf {
        self.run_dir.join(format!("{stage}.sock"))
    }
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

/// The run directory of an instance: `explicit` if given, else `<runtime base>/<instance>`.
pub fn run_dir(instance: &str, explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(|| runtime_base().join(instance))
}

/// The default detections socket of an instance: `<runtime base>/detections.sock` for
/// `default`, `detections-<instance>.sock` for any other (so two instances never collide).
pub fn default_detections_socket(instance: &str) -> PathBuf {
    let name = if instance == "default" { "detections.sock".to_string() } else { format!("detections-{instance}.sock") };
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
        let d = DataPath { ring_policy: RingPolicy::Block, wait: WaitMode::Spin, heap: HeapChoice::Dma32, copy_mode: true, ..Default::default() };
        assert_eq!(d.flags(), ["--ring-policy=block", "--wait=spin", "--heap=dma32", "--copy-mode"]);
        assert_eq!(DataPath::default().flags(), ["--ring-policy=drop-oldest", "--wait=eventfd", "--heap=auto"]);
    }

    #[test]
    fn instance_names_are_plain() {
        for bad in ["", "a/b", ".", "..", "x\0y"] {
            assert!(check_instance(bad).is_err(), "{bad:?}");
        }
        check_instance("front-door_2").unwrap();
    }
}
