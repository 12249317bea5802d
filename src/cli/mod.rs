//! The command-line front: `zcpipe run | stage | watch | doctor`.
//!
//! Parses arguments and calls into the library; holds no pipeline logic. Errors print as
//! one line, `zcpipe <stage>: error: <what> ...: <fix>`, and exit non-zero.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::dmabuf::HeapChoice;
use crate::core::link::WaitMode;
use crate::core::ring::RingPolicy;

mod bench;
mod doctor;

/// zcpipe: camera frames to an NPU without copying them.
#[derive(Parser, Debug)]
#[command(name = "zcpipe", version, about, long_about = None)]
pub struct Cli {
    /// Less output: warnings and errors only (RUST_LOG overrides).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More output: debug logs (RUST_LOG overrides).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub cmd: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the whole pipeline: four stage processes wired by dma-buf fds and rings.
    Run(RunArgs),
    /// Run one stage alone (what `run` starts; for systemd units).
    Stage {
        #[command(subcommand)]
        stage: StageCmd,
    },
    /// Print the detections published on a socket.
    Watch(WatchArgs),
    /// Measure on this machine: `zcpipe bench ipc` times each IPC transport per message size.
    Bench(bench::BenchArgs),
    /// Run the same source in zero-copy mode and in --copy-mode, alternating, and compare.
    Compare(crate::metrics::compare::CompareArgs),
    /// List what this machine offers zcpipe (V4L2 nodes, dma-buf heaps, udmabuf, vendor
    /// libraries) with a fix for each problem found; always exits 0.
    Doctor(doctor::DoctorArgs),
}

/// One stage, for `zcpipe stage <name>`.
#[derive(Subcommand, Debug)]
pub enum StageCmd {
    /// Produce frames into a pool (listens on capture.sock).
    Capture {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: CaptureArgs,
    },
    /// Letterbox capture frames into the model input (connects to capture.sock, listens on scale.sock).
    Scale {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: ScaleArgs,
    },
    /// Run the detector (connects to scale.sock, listens on infer.sock).
    Infer {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: InferArgs,
    },
    /// Publish detections to clients (connects to infer.sock).
    Publish {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: PublishArgs,
    },
}

/// Options every stage takes.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Instance name: stages of one instance meet under <runtime dir>/zcpipe/<instance>/.
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// Directory for the stage sockets (overrides --instance's default location).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// What a full ring does: drop the oldest frame (video) or make the producer wait.
    #[arg(long, value_enum, default_value = "drop-oldest")]
    pub ring_policy: RingPolicy,
    /// How consumers wait for frames: sleep on an eventfd, or spin.
    #[arg(long, value_enum, default_value = "eventfd")]
    pub wait: WaitMode,
    /// Where buffers come from.
    #[arg(long, value_enum, default_value = "auto")]
    pub heap: HeapChoice,
    /// Seconds between stats reports (0 = only at exit).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    pub stats_interval: f64,
    /// Seconds to wait for the neighbouring stages to appear.
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub connect_timeout: f64,
    /// Copy every frame through the CPU at every hop, as a plain pipeline would (bytes over
    /// a Unix stream socket, copied out of and into buffers), to measure what zero-copy saves.
    #[arg(long)]
    pub copy_mode: bool,
    /// File descriptor to write JSON stage reports to (set by `zcpipe run`).
    #[arg(long, hide = true)]
    pub report_fd: Option<RawFd>,
}

impl CommonArgs {
    /// Checks values clap cannot: the instance is a plain name, intervals are not negative.
    pub fn validate(&self) -> anyhow::Result<()> {
        let i = &self.instance;
        if i.is_empty() || i.contains('/') || i == "." || i == ".." || i.contains('\0') {
            anyhow::bail!("--instance {i:?}: use a plain name (letters, digits, - and _), it becomes a folder name");
        }
        // A day at most: any longer is a typo, and Duration::from_secs_f64 panics past ~1e19 s.
        const DAY: f64 = 86_400.0;
        if !(0.0..=DAY).contains(&self.stats_interval) {
            anyhow::bail!("--stats-interval {}: use 0 (summary only) or a number of seconds up to 86400", self.stats_interval);
        }
        if !(self.connect_timeout > 0.0 && self.connect_timeout <= DAY) {
            anyhow::bail!("--connect-timeout {}: use a positive number of seconds up to 86400", self.connect_timeout);
        }
        Ok(())
    }

    /// The run directory for this instance.
    pub fn run_dir(&self) -> PathBuf {
        crate::supervise::run_dir(&self.instance, self.run_dir.as_ref())
    }
    /// The stats interval as a duration (`None` for 0).
    pub fn stats_interval(&self) -> Option<Duration> {
        (self.stats_interval > 0.0).then(|| Duration::from_secs_f64(self.stats_interval))
    }
    /// Connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout.max(0.1))
    }
    /// The data-path flags every stage of one pipeline must agree on, as `--key=value`:
    /// `--ring-policy`, `--wait`, `--heap` (and `--copy-mode` when set).
    pub fn data_path_flags(&self) -> Vec<String> {
        let lower = |x: &dyn std::fmt::Debug| format!("{x:?}").to_lowercase();
        let policy = if self.ring_policy == RingPolicy::Block { "block" } else { "drop-oldest" };
        let mut v = vec![format!("--ring-policy={policy}"), format!("--wait={}", lower(&self.wait)), format!("--heap={}", lower(&self.heap))];
        if self.copy_mode {
            v.push("--copy-mode".into());
        }
        v
    }
}

/// What one pipeline is made of: the options of every stage but publish's. `zcpipe run`
/// and `zcpipe compare` both take these, and pass them on with the `flags()` methods, so
/// the two cannot drift apart.
#[derive(Args, Debug, Clone)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub capture: CaptureArgs,
    #[command(flatten)]
    pub scale: ScaleArgs,
    #[command(flatten)]
    pub infer: InferArgs,
}

/// Capture options.
#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// auto (the first V4L2 capture node, else the bundled clip), v4l2[:DEVICE], image:PATH (file or directory, looped), video:PATH (via ffmpeg), testsrc[:WxH[@FPS]].
    #[arg(long, default_value = "auto")]
    pub source: String,
    /// Frames per second: a host source is paced at it; a V4L2 camera is asked for it (VIDIOC_S_PARM). Default: the source's own rate.
    #[arg(long, allow_negative_numbers = true)]
    pub fps: Option<f64>,
    /// Stop after this many frames (at least 1).
    #[arg(long, value_parser = parse_frames, allow_negative_numbers = true)]
    pub frames: Option<u64>,
    /// Buffers in the capture pool.
    #[arg(long, default_value_t = 4)]
    pub buffers: usize,
    /// V4L2 pixel format: NV12, NV16, NV12M, YUYV, RGB24 or BGR24 (default: the first of those the camera offers).
    #[arg(long)]
    pub format: Option<String>,
    /// V4L2 frame size, WxH (default: the camera's current size).
    #[arg(long)]
    pub size: Option<String>,
    /// V4L2 buffers: mmap (the driver's, exported with VIDIOC_EXPBUF) or dmabuf (from --heap, imported). Default mmap.
    #[arg(long, value_enum)]
    pub capture_io: Option<crate::capture::v4l2::CaptureIo>,
}

/// Scaler backends (`--scaler`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScalerKind {
    /// `auto`: the best present (cpu on hosts).
    Auto,
    /// `cpu`: NV12/NV16/YUYV/RGB -> BGR letterbox on the CPU (fast_image_resize + yuv).
    Cpu,
    /// `none`: touch no pixels (pass-through geometry): with `--infer none`, measures
    /// transport alone.
    None,
    /// `rga`: Rockchip RGA through librga's im2d API (loaded at run time).
    Rga,
    /// `v4l2m2m:/dev/videoN`: a V4L2 mem2mem device (mainline rockchip-rga, vim2m): its
    /// OUTPUT queue imports the capture dma-bufs, its CAPTURE queue writes into the scaler's
    /// pool.
    V4l2M2m(PathBuf),
}

impl std::str::FromStr for ScalerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ScalerKind::Auto),
            "cpu" => Ok(ScalerKind::Cpu),
            "none" => Ok(ScalerKind::None),
            "rga" => Ok(ScalerKind::Rga),
            "v4l2m2m" | "v4l2m2m:" => Err("v4l2m2m needs its node: --scaler v4l2m2m:/dev/videoN (`zcpipe doctor` lists mem2mem nodes)".into()),
            _ => match s.strip_prefix("v4l2m2m:") {
                Some(p) if !p.is_empty() => Ok(ScalerKind::V4l2M2m(PathBuf::from(p))),
                _ => Err(format!("\"{s}\" is not a scaler; use auto, cpu, none, rga or v4l2m2m:/dev/videoN")),
            },
        }
    }
}

impl std::fmt::Display for ScalerKind {
    /// The `--scaler` spelling, which [`std::str::FromStr`] parses back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScalerKind::Auto => f.write_str("auto"),
            ScalerKind::Cpu => f.write_str("cpu"),
            ScalerKind::None => f.write_str("none"),
            ScalerKind::Rga => f.write_str("rga"),
            ScalerKind::V4l2M2m(p) => write!(f, "v4l2m2m:{}", p.display()),
        }
    }
}

/// `--frames`: a whole number of at least 1.
fn parse_frames(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("use a whole number of at least 1 (leave --frames out to run until the source ends or Ctrl-C)".into()),
    }
}

impl CaptureArgs {
    /// These options as `--key=value` flags for `zcpipe stage capture` or `zcpipe run`
    /// (`=`: a value starting with '-' must not look like a flag); unset ones are left out.
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![format!("--source={}", self.source)];
        v.extend(self.fps.map(|f| format!("--fps={f}")));
        v.extend(self.frames.map(|n| format!("--frames={n}")));
        v.push(format!("--buffers={}", self.buffers));
        v.extend(self.format.as_ref().map(|f| format!("--format={f}")));
        v.extend(self.size.as_ref().map(|s| format!("--size={s}")));
        v.extend(self.capture_io.map(|io| format!("--capture-io={}", io.name())));
        v
    }
}

/// Scale options.
#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Scaler backend: auto, cpu, none (pass-through), rga, or v4l2m2m:/dev/videoN.
    #[arg(long, default_value = "auto")]
    pub scaler: ScalerKind,
    /// Buffers in the scaler's output pool.
    #[arg(long, default_value_t = 3)]
    pub scale_buffers: usize,
    /// With --scaler rga: pin jobs to one RGA core (auto lets the driver pick; jobs hopping
    /// between cores jitter by 2-4 px, and RGA2 reaches only the first 4 GiB).
    #[arg(long, value_enum, default_value = "auto")]
    pub rga_core: crate::scale::rga::RgaCore,
}

impl ScaleArgs {
    /// These options as `--key=value` flags (see [`CaptureArgs::flags`]).
    pub fn flags(&self) -> Vec<String> {
        vec![
            format!("--scaler={}", self.scaler),
            format!("--scale-buffers={}", self.scale_buffers),
            format!("--rga-core={}", self.rga_core.flag()),
        ]
    }
}

/// Infer options.
#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// Detector backend: auto, onnx (tract on the CPU), none (no inference: measure transport).
    #[arg(long, default_value = "auto")]
    pub infer: String,
    /// Model file.
    #[arg(long, default_value = "models/yolox_nano.onnx")]
    pub model: PathBuf,
    /// Class labels, one per line.
    #[arg(long, default_value = "models/coco80.txt")]
    pub labels: PathBuf,
    /// Keep detections scoring above this.
    #[arg(long, default_value_t = 0.3, allow_negative_numbers = true)]
    pub score_threshold: f32,
    /// Per-class NMS IoU threshold.
    #[arg(long, default_value_t = 0.45, allow_negative_numbers = true)]
    pub nms_iou: f32,
    /// rknn: NPU cores to run on, one context each, frames round-robin (e.g. 0,1,2 on
    /// RK3588). Default: one context, the runtime's choice.
    #[arg(long, value_parser = crate::infer::rknn::check_npu_cores)]
    pub npu_cores: Option<String>,
}

impl InferArgs {
    /// These options as `--key=value` flags (see [`CaptureArgs::flags`]).
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![
            format!("--infer={}", self.infer),
            format!("--model={}", self.model.display()),
            format!("--labels={}", self.labels.display()),
            format!("--score-threshold={}", self.score_threshold),
            format!("--nms-iou={}", self.nms_iou),
        ];
        v.extend(self.npu_cores.as_ref().map(|c| format!("--npu-cores={c}")));
        v
    }
}

/// How publish prints frames on its stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrintMode {
    /// Nothing on stdout.
    None,
    /// One readable line per frame.
    Human,
    /// The JSON lines clients get.
    Json,
}

/// Publish options.
#[derive(Args, Debug, Clone)]
pub struct PublishArgs {
    /// Detections socket (default $XDG_RUNTIME_DIR/zcpipe/detections.sock, /run/zcpipe/... for root; detections-<instance>.sock for an --instance other than default).
    #[arg(long)]
    pub publish: Option<PathBuf>,
    /// What to print on stdout per frame.
    #[arg(long, value_enum, default_value = "none")]
    pub print: PrintMode,
}

/// `zcpipe run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Detections socket (default $XDG_RUNTIME_DIR/zcpipe/detections.sock, /run/zcpipe/... for root; detections-<instance>.sock for an --instance other than default).
    #[arg(long)]
    pub publish: Option<PathBuf>,
    /// Print the JSON lines on stdout instead of readable lines (logs, stats, summary stay on stderr).
    #[arg(long)]
    pub json: bool,
    /// Print nothing per frame (stats and summary only).
    #[arg(long, conflicts_with = "json")]
    pub no_print: bool,
    /// Also write the run summary as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
}

/// `zcpipe watch`.
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Detections socket (default: the one `zcpipe run --instance <--instance>` uses).
    pub path: Option<PathBuf>,
    /// Watch this instance's default socket (`detections-<instance>.sock`; `default`:
    /// `detections.sock`).
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// Print raw JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Exit after this many frames (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

fn init_logging(cli: &Cli, tag: &str) {
    let level = if cli.verbose {
        "debug"
    } else if cli.quiet {
        "warn"
    } else {
        "info"
    };
    let tag = tag.to_string();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(format!("zcpipe={level},warn")))
        .format(move |buf, rec| {
            use std::io::Write;
            match rec.level() {
                log::Level::Info => writeln!(buf, "{tag}: {}", rec.args()),
                l => writeln!(buf, "{tag}: {}: {}", l.as_str().to_lowercase(), rec.args()),
            }
        })
        .init();
}

/// Exit code of a stage that stopped because a neighbour went away (not its own fault).
pub const EXIT_PEER_GONE: i32 = 3;

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let tag = match &cli.cmd {
        Command::Run(_) => "zcpipe".to_string(),
        Command::Watch(_) => "zcpipe watch".to_string(),
        Command::Bench(_) => "zcpipe bench".to_string(),
        Command::Compare(_) => "zcpipe compare".to_string(),
        Command::Doctor(_) => "zcpipe doctor".to_string(),
        Command::Stage { stage } => format!(
            "zcpipe {}",
            match stage {
                StageCmd::Capture { .. } => "capture",
                StageCmd::Scale { .. } => "scale",
                StageCmd::Infer { .. } => "infer",
                StageCmd::Publish { .. } => "publish",
            }
        ),
    };
    init_logging(&cli, &tag);
    crate::supervise::install_signal_handlers();
    let common = match &cli.cmd {
        Command::Run(a) => Some(&a.pipeline.common),
        Command::Compare(a) => Some(&a.pipeline.common),
        Command::Stage { stage: StageCmd::Capture { common, .. } | StageCmd::Scale { common, .. } | StageCmd::Infer { common, .. } | StageCmd::Publish { common, .. } } => Some(common),
        _ => None,
    };
    if let Some(Err(e)) = common.map(|c| c.validate()) {
        error_line(&tag, &e.to_string());
        return 1;
    }
    let result = match cli.cmd {
        Command::Run(a) => crate::supervise::run::run(a),
        Command::Watch(a) => crate::publish::watch::watch(a).map(|_| 0),
        Command::Bench(a) => a.config().and_then(crate::bench::run),
        Command::Compare(a) => crate::metrics::compare::compare(a),
        Command::Doctor(a) => crate::doctor::run(a.into()),
        Command::Stage { stage } => match stage {
            StageCmd::Capture { common, args } => crate::capture::stage::run(common, args),
            StageCmd::Scale { common, args } => crate::scale::stage::run(common, args),
            StageCmd::Infer { common, args } => crate::infer::stage::run(common, args),
            StageCmd::Publish { common, args } => crate::publish::stage::run(common, args),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if let Some(gone) = e.downcast_ref::<PeerGone>() {
                log::info!("{gone}; stopping");
                return EXIT_PEER_GONE;
            }
            if crate::supervise::STOP.load(std::sync::atomic::Ordering::Relaxed) {
                // Asked to stop (by the supervisor, systemd or a user) before set-up was
                // done: not an error of ours.
                log::debug!("stopped: {e:#}");
                return 0;
            }
            // One line: the context chain joined, outermost first.
            let msg: Vec<String> = e.chain().map(|c| c.to_string().trim_end().to_string()).collect();
            error_line(&tag, &msg.join(": "));
            1
        }
    }
}

/// Writes `"{tag}: error: {msg}\n"` to stderr with one `write(2)`.
///
/// The four stages share one stderr; `eprintln!` issues a `write` per format piece, so two
/// stages failing together could interleave mid-line. One `write` of at most `PIPE_BUF`
/// (4096 bytes, pipe(7)) bytes to a pipe is atomic; longer lines are still one call.
fn error_line(tag: &str, msg: &str) {
    use std::io::Write;
    let line = format!("{tag}: error: {msg}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A neighbouring stage went away (its socket hung up): a secondary failure, reported
/// quietly with [`EXIT_PEER_GONE`] since the neighbour reports its own cause.
#[derive(Debug)]
pub struct PeerGone(pub String);

impl std::fmt::Display for PeerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl std::error::Error for PeerGone {}
