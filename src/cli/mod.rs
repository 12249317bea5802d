//! The command-line front: `zcpipe run | stage | watch | bench | compare | doctor`.
//!
//! Owns every clap struct (one file per subject: the data path and pipeline groups in
//! [`common`], each stage's options beside its name) and the process's signal handling
//! ([`signals`]). It parses and checks arguments once, turns them into the library's plain
//! configuration types (`CaptureConfig`, `DataPath`, `RunConfig`, ...), and calls the
//! library with them and the stop flag; it holds no pipeline logic. Errors print as one
//! line, `zcpipe <stage>: error: <what> ...: <fix>`, and exit non-zero.

pub mod cameras;
pub mod capture;
pub mod common;
pub mod compare;
pub mod config;
pub mod detect;
pub mod display;
pub mod fleet;
pub mod http;
pub mod infer;
pub mod mqtt;
pub mod publish;
pub mod record;
pub mod reference;
pub mod run;
pub mod scale;
pub mod scene;
pub mod signals;
pub mod snapshot;
pub(crate) mod stage_args;
pub mod track;

use std::sync::atomic::Ordering;

use clap::{Parser, Subcommand};

use zcpipe_core::frame::Stage;
use zcpipe_core::id::{Role, StageId};
use zcpipe_core::metrics::Reporter;
use zcpipe_core::stage::{StageCtx, EXIT_PEER_GONE};

use capture::CaptureArgs;
use common::CommonArgs;
use infer::InferArgs;
use publish::PublishArgs;
use scale::ScaleArgs;
use signals::STOP;

mod watch;
pub use watch::WatchArgs;

mod bench;
mod ctl;
mod doctor;
mod eval;
mod live;

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
    /// Run the whole pipeline: four stage processes wired by dma-buf fds and rings (five with --display).
    Run(Box<run::RunArgs>),
    /// Run one stage alone (what `run` starts; for systemd units).
    Stage {
        #[command(subcommand)]
        stage: Box<StageCmd>,
    },
    /// Print the detections published on a socket.
    Watch(WatchArgs),
    /// Change a running `zcpipe run`: add, remove or restart cameras, set zones, lines and
    /// loitering times, change settings, read its configuration file again.
    Ctl(ctl::CtlArgs),
    /// Detect objects in one picture with a running pipeline's model (its inference
    /// service) and print the frame line `zcpipe run --json` would.
    Detect(detect::DetectArgs),
    /// Measure on this machine: `zcpipe bench ipc` times each IPC transport per message size,
    /// `zcpipe bench service` a running pipeline's inference service.
    Bench(bench::BenchArgs),
    /// Run the same source in zero-copy mode and in --copy-mode, alternating, and compare.
    Compare(Box<compare::CompareArgs>),
    /// List what this machine offers zcpipe (V4L2 nodes, dma-buf heaps, udmabuf, DRM cards,
    /// vendor libraries) with a fix for each problem found; always exits 0.
    Doctor(doctor::DoctorArgs),
    /// Evaluate offline: `zcpipe eval track` tracks a recorded detections stream and writes
    /// MOTChallenge results.
    Eval(eval::EvalArgs),
    /// The configuration file of `zcpipe run`: `zcpipe config check FILE` validates one,
    /// `zcpipe config print [RUN FLAGS]` prints the effective configuration with each value's origin.
    Config(config::ConfigArgs),
    /// One view of many boards from the broker they all reach: a web page of every board,
    /// its cameras and latest events, /api/fleet and a fleet-wide /metrics.
    Fleet(fleet::FleetArgs),
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
        /// Send the camera's encoded stream (its H.264 or H.265 packets, untouched) to the
        /// run's recorder too (`zcpipe stage record`, at record.sock in the run directory).
        #[arg(long)]
        record: bool,
        /// The camera's name for the recorder (its clips' folder, the tracker's events it
        /// matches): `zcpipe run` passes the name of a camera given as `--source NAME=...`.
        /// Default: --camera, else cam0.
        #[arg(long, value_name = "NAME", requires = "record", value_parser = record_camera)]
        record_camera: Option<String>,
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
        args: Box<PublishArgs>,
    },
    /// Show the camera on a KMS display with its boxes (a tap of capture.sock and a client of
    /// the detections socket; optional).
    Display {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: display::DisplayArgs,
    },
    /// Record event clips of the cameras' own packets (listens on record.sock for the
    /// capture stages' streams, a client of the detections socket; optional).
    Record {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        args: record::RecordStageArgs,
    },
}

/// Writes `text` to stdout; a reader that went away (`zcpipe run --dry-run | head -1`) is
/// not an error: what it did not want is not written (println! would panic).
pub(crate) fn print_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
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

impl Command {
    /// The web view's options of a command that starts one (`run`, `stage publish`).
    /// The places of sockets the command line names, with their flags: each directory must
    /// be one no other user can change ([`zcpipe_core::config::trusted_dir`]).
    fn socket_places(&self) -> Vec<(&std::path::Path, &'static str)> {
        let mut v = vec![];
        if let Command::Run(a) = self {
            v.extend(a.pipeline.common.run_dir.as_deref().map(|p| (p, "--run-dir")));
            v.extend(a.publish.as_deref().map(|p| (p, "--publish")));
            v.extend(a.pipeline.infer.serve_socket.as_deref().map(|p| (p, "--serve-socket")));
        }
        if let Command::Stage { stage } = self {
            if let StageCmd::Publish { args, .. } = &**stage {
                v.extend(args.publish.as_deref().map(|p| (p, "--publish")));
            }
        }
        v
    }

    fn http(&self) -> Option<&http::HttpArgs> {
        match self {
            Command::Run(a) => Some(&a.http),
            Command::Stage { stage } => match &**stage {
                StageCmd::Publish { args, .. } => Some(&args.http),
                _ => None,
            },
            _ => None,
        }
    }
}

impl StageCmd {
    /// The process's identity in its log lines, reports and socket: the stage's, or
    /// `capture@NAME` for one camera of several.
    fn id(&self) -> StageId {
        match self {
            StageCmd::Capture { args, .. } => StageId::capture(args.camera.as_deref()),
            StageCmd::Scale { .. } => Stage::Scale.into(),
            StageCmd::Infer { .. } => Stage::Infer.into(),
            StageCmd::Publish { .. } => Stage::Publish.into(),
            StageCmd::Display { .. } => Role::Display.into(),
            StageCmd::Record { .. } => Role::Record.into(),
        }
    }

    /// Checks the stage's options and runs it with the stop flag and its report socket.
    fn run(self) -> zcpipe_core::Result<i32> {
        let (StageCmd::Capture { common, .. }
        | StageCmd::Scale { common, .. }
        | StageCmd::Infer { common, .. }
        | StageCmd::Publish { common, .. }
        | StageCmd::Display { common, .. }
        | StageCmd::Record { common, .. }) = &self;
        let data = common.data_path()?;
        let instance = data.instance.clone();
        let ctx = StageCtx { id: self.id(), stop: &STOP, reporter: Reporter::new(common.report_fd), data };
        match self {
            StageCmd::Capture { args, record, record_camera, .. } => zcpipe_capture::stage::run(
                zcpipe_capture::CaptureConfig { record, record_camera, ..args.config()? },
                ctx,
            ),
            StageCmd::Scale { args, .. } => zcpipe_scale::stage::run(args.config()?, ctx),
            StageCmd::Infer { args, .. } => {
                let mut cfg = args.config()?;
                if let Some(s) = cfg.service.as_mut().filter(|s| s.socket.as_os_str().is_empty()) {
                    s.socket = zcpipe_core::service::socket_path(&ctx.data.run_dir);
                }
                zcpipe_infer::stage::run(cfg, ctx)
            }
            StageCmd::Publish { args, .. } => {
                let mut cfg = args.config(&instance)?;
                if let Some(h) = cfg.http.as_mut().filter(|h| h.service.is_none()) {
                    h.service = Some(zcpipe_core::service::socket_path(&ctx.data.run_dir));
                }
                zcpipe_publish::stage::run(cfg, ctx)
            }
            StageCmd::Display { args, .. } => zcpipe_display::stage::run(args.config(&instance)?, ctx),
            StageCmd::Record { args, .. } => zcpipe_record::stage::run(args.config(&instance)?, ctx),
        }
    }
}

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> i32 {
    // `zcpipe run`: the configuration file and the ZCPIPE_* variables are laid under the
    // command line as flags (precedence flag > environment > file > default).
    let env = config::process_env();
    // A stage started by `zcpipe run` has its options in a memfd, not in its command line.
    let argv = match stage_args::expand(std::env::args_os().collect()) {
        Ok(a) => stage_args::source_from_env(a, std::env::var_os(stage_args::SOURCE_ENV)),
        Err(e) => {
            error_line("zcpipe stage", &e);
            return 2;
        }
    };
    let layered = match config::layer(argv, &env, std::path::Path::new(config::DEFAULT_PATH)) {
        Ok(l) => l,
        Err(e) => {
            error_line("zcpipe", &e);
            return 2;
        }
    };
    // Where the file and the environment set each flag, for an error about its value.
    let origins = config::Layered { args: vec![], ..layered.clone() };
    // Several `--source`s (each with its own options) are split off before clap reads the rest.
    let (args, cameras) = match cameras::split(layered.args) {
        Ok(v) => v,
        Err(e) => {
            error_line("zcpipe", &format!("{e:#}"));
            return 2;
        }
    };
    let mut cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        // --help, --version and a missing subcommand print the help and end as clap does.
        Err(e) if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        // A bad flag or value is one line, as every other error: `zcpipe: error: ...`.
        Err(e) => {
            let line = config::clap_line(&e);
            use clap::error::ErrorKind as K;
            let lost = matches!(e.kind(), K::UnknownArgument | K::InvalidSubcommand | K::MissingRequiredArgument);
            let hint = if lost && !line.contains("tip:") { " (`--help` lists the flags)" } else { "" };
            error_line("zcpipe", &format!("{line}{hint}"));
            return 2;
        }
    };
    match &mut cli.cmd {
        Command::Run(a) => a.pipeline.cameras = cameras,
        Command::Compare(a) => a.pipeline.cameras = cameras,
        _ => {}
    }
    let tag = match &cli.cmd {
        Command::Run(_) => "zcpipe".to_string(),
        Command::Watch(_) => "zcpipe watch".to_string(),
        Command::Ctl(_) => "zcpipe ctl".to_string(),
        Command::Detect(_) => "zcpipe detect".to_string(),
        Command::Bench(_) => "zcpipe bench".to_string(),
        Command::Compare(_) => "zcpipe compare".to_string(),
        Command::Doctor(_) => "zcpipe doctor".to_string(),
        Command::Eval(_) => "zcpipe eval".to_string(),
        Command::Config(_) => "zcpipe config".to_string(),
        Command::Fleet(_) => "zcpipe fleet".to_string(),
        Command::Stage { stage } => format!("zcpipe {}", stage.id()),
    };
    init_logging(&cli, &tag);
    // An address the web view cannot use is a bad argument, as clap's are: exit 2.
    if let Some(Err(e)) = cli.cmd.http().map(http::HttpArgs::check_usable) {
        error_line(&tag, &e.to_string());
        return 2;
    }
    // So is a token file that is missing, open to other users, or holds a short token.
    if let Some(Err(e)) = cli.cmd.http().map(http::HttpArgs::token) {
        error_line(&tag, &e);
        return 2;
    }
    // A socket where another user could replace it is a bad argument too.
    for (path, flag) in cli.cmd.socket_places() {
        let what = format!("{flag} {}", path.display());
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        // A socket's directory must be there (zcpipe makes only its own runtime directory);
        // a run directory is made, and must be ours if it is there.
        let place = if flag == "--run-dir" { path } else { parent };
        if flag != "--run-dir" && !parent.is_dir() && !parent.starts_with(zcpipe_core::config::runtime_base()) {
            error_line(
                &tag,
                &format!(
                    "{what}: directory {} does not exist: make it (mode 0700) or pick another path",
                    parent.display()
                ),
            );
            return 2;
        }
        if let Err(e) = zcpipe_core::config::trusted_dir(place, &what) {
            error_line(&tag, &e.to_string());
            return 2;
        }
    }
    // `zcpipe detect` waits on one answer: a signal ends it at once (the default action),
    // where the handlers would only set the stop flag for a loop it does not have.
    if !matches!(cli.cmd, Command::Detect(_)) {
        // `zcpipe run` reads its configuration file again on SIGHUP, as daemons do.
        signals::HUP_RELOADS.store(matches!(cli.cmd, Command::Run(_)), std::sync::atomic::Ordering::SeqCst);
        signals::install_signal_handlers();
    }
    let result = match cli.cmd {
        Command::Run(a) => run::run(&a, &STOP).map_err(|e| anyhow::anyhow!(origins.locate(&format!("{e:#}")))),
        Command::Watch(a) => zcpipe_publish::watch::watch(a.into(), &STOP).map(|_| 0),
        Command::Ctl(a) => a.run(),
        Command::Detect(a) => a.run(),
        Command::Bench(a) => a.config().and_then(crate::bench::run),
        Command::Compare(a) => a.config().and_then(|c| crate::compare::compare(c, &STOP)),
        Command::Doctor(a) => crate::doctor::run(a.into(), doctor::default_plan),
        Command::Eval(a) => a.run(),
        Command::Config(a) => a.run(&env),
        Command::Fleet(a) => a.run(&STOP),
        Command::Stage { stage } => match stage.run() {
            // A neighbour went away (it refused us, or died during set-up): its own error
            // line says why; this stage stops quietly with its own exit code.
            Err(zcpipe_core::Error::PeerGone { what }) => {
                log::info!("{what}; stopping");
                return EXIT_PEER_GONE;
            }
            r => r.map_err(zcpipe_core::Error::into_anyhow),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if STOP.load(Ordering::Relaxed) {
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

/// `--record-camera`: a camera name zcpipe accepts (it becomes a folder).
fn record_camera(s: &str) -> Result<String, String> {
    zcpipe_core::config::check_camera_name(s).map(|_| s.to_string()).map_err(|e| format!("{e:#}"))
}
