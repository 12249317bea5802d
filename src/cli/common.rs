//! Options every stage takes (`CommonArgs`), the pipeline's option groups
//! (`PipelineArgs`), and the parser for named choices.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;

use crate::plan::{self, Plan};
use zcpipe_core::config::{check_instance, run_dir, Choice, DataPath};
use zcpipe_core::dmabuf::HeapChoice;
use zcpipe_core::link::WaitMode;
use zcpipe_core::ring::RingPolicy;

use super::capture::CaptureArgs;
use super::infer::InferArgs;
use super::scale::ScaleArgs;

/// A clap parser for a [`Choice`]: its spellings as possible values, with their help.
pub fn choice<T: Choice + Clone + Send + Sync>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::ALL.iter().map(|(_, n, h)| PossibleValue::new(*n).help(*h)))
        // clap has checked the spelling against the same table.
        .map(|s| T::from_name(&s).unwrap_or(T::ALL[0].0))
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
    #[arg(long, value_parser = choice::<RingPolicy>(), default_value = "drop-oldest")]
    pub ring_policy: RingPolicy,
    /// How consumers wait for frames: sleep on an eventfd, or spin.
    #[arg(long, value_parser = choice::<WaitMode>(), default_value = "eventfd")]
    pub wait: WaitMode,
    /// With --wait eventfd: microseconds a consumer spins on its ring before it sleeps, only while frames have lately come that fast (adaptive). 0 (default): never spin; a spin takes CPU another stage on the same core may need (see docs/src/dev/performance.md "Throughput").
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub spin_us: u32,
    /// Where buffers come from.
    #[arg(long, value_parser = choice::<HeapChoice>(), default_value = "auto")]
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
    /// The checked data-path settings: the instance is a plain name, the stats interval is
    /// 0 (summary only) up to a day, the connect timeout positive up to a day (a longer one
    /// is a typo, and `Duration::from_secs_f64` panics past ~1e19 s).
    pub fn data_path(&self) -> Result<DataPath> {
        check_instance(&self.instance)?;
        const DAY: f64 = 86_400.0;
        if !(0.0..=DAY).contains(&self.stats_interval) {
            anyhow::bail!(
                "--stats-interval {}: use 0 (summary only) or a number of seconds up to 86400",
                self.stats_interval
            );
        }
        if self.spin_us > 0 && self.wait == WaitMode::Spin {
            anyhow::bail!("--spin-us {} is for --wait eventfd (a consumer that sleeps); --wait spin never sleeps: drop one of them", self.spin_us);
        }
        if !(self.connect_timeout > 0.0 && self.connect_timeout <= DAY) {
            anyhow::bail!("--connect-timeout {}: use a positive number of seconds up to 86400", self.connect_timeout);
        }
        Ok(DataPath {
            instance: self.instance.clone(),
            run_dir: run_dir(&self.instance, self.run_dir.as_deref()),
            ring_policy: self.ring_policy,
            wait: self.wait,
            spin: Duration::from_micros(self.spin_us as u64),
            heap: self.heap,
            copy_mode: self.copy_mode,
            connect_timeout: Duration::from_secs_f64(self.connect_timeout.max(0.1)),
            stats_interval: (self.stats_interval > 0.0).then(|| Duration::from_secs_f64(self.stats_interval)),
        })
    }

    /// The options a supervisor passes on to each stage it starts, as `--key=value`
    /// (`=`: a value starting with '-' must not look like a flag), with the run directory
    /// resolved; `--report-fd` is the supervisor's to add.
    pub fn flags(&self, data: &DataPath) -> Vec<String> {
        let mut out = vec![format!("--run-dir={}", data.run_dir.display()), format!("--instance={}", self.instance)];
        out.extend(data.flags());
        out.extend([
            format!("--stats-interval={}", self.stats_interval),
            format!("--connect-timeout={}", self.connect_timeout),
        ]);
        out
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
    /// The cameras of a command line with `--source` (set by [`super::main`] from
    /// [`super::cameras::split`]; empty: the capture options as parsed).
    #[arg(skip)]
    pub cameras: Vec<super::cameras::CameraGroup>,
}

impl PipelineArgs {
    /// Checks every stage's options as its stage would, before anything starts, so a bad
    /// value is one line from the front rather than a failure inside a child.
    pub fn check(&self) -> Result<DataPath> {
        let data = self.common.data_path()?;
        let cams = self.cams()?;
        for (name, c) in &cams {
            c.config().map_err(|e| if cams.len() > 1 { e.context(format!("camera {name}")) } else { e })?;
        }
        let names: Vec<String> = cams.iter().map(|(n, _)| n.clone()).collect();
        let p = self.with_cameras(&names, 1)?;
        p.scale.config()?;
        p.infer.config()?;
        Ok(data)
    }

    /// These options with the cameras written into the scale and infer stages' own: their
    /// names (several cameras), each one's `--detect-fps` and `--weight` (its own after its
    /// `--source`, else the one given for all), and the scale pool sized for `lanes` engines:
    /// one frame running in each, one waiting per camera and one being written; with one
    /// engine, which runs on the infer stage's own thread and takes no frame while it runs,
    /// also one per camera for the frames scaled meanwhile (else the ring, dropping its
    /// oldest, would drop the camera the scaler serves first, again and again).
    pub fn with_cameras(&self, names: &[String], lanes: usize) -> Result<PipelineArgs> {
        let mut p = self.clone();
        if names.len() > 1 {
            p.scale.cameras = names.to_vec();
            p.infer.cameras = names.to_vec();
        }
        let per_camera = |key: &str, all: &[f64], default: f64| -> Result<Vec<f64>> {
            let own = super::cameras::sched_values(&self.cameras, key)?;
            if own.iter().all(Option::is_none) {
                return Ok(all.to_vec());
            }
            if all.len() > 1 {
                anyhow::bail!("{key}: give one value before the first --source (for every camera) and a camera's own after its --source, not a list");
            }
            let fallback = all.first().copied().unwrap_or(default);
            Ok(own.into_iter().map(|v| v.unwrap_or(fallback)).collect())
        };
        p.scale.detect_fps = per_camera("--detect-fps", &self.scale.detect_fps, 0.0)?;
        p.infer.weight = per_camera("--weight", &self.infer.weight, 1.0)?;
        let cams = names.len().max(1);
        let pool = if lanes > 1 || cams == 1 { lanes + cams + 1 } else { 2 * cams + 2 };
        p.scale.scale_buffers = p.scale.scale_buffers.or(Some(pool.clamp(3, 64)));
        Ok(p)
    }
}

impl PipelineArgs {
    /// Each camera's name and capture options ([`super::cameras::camera_args`]): one,
    /// `cam0` with the options as parsed, unless `--source` was given on the command line.
    pub fn cams(&self) -> Result<Vec<(String, CaptureArgs)>> {
        super::cameras::camera_args(&self.capture, &self.cameras)
    }

    /// These options with `capture` as the capture options (one camera of several).
    pub fn for_camera(&self, capture: &CaptureArgs) -> PipelineArgs {
        PipelineArgs { capture: capture.clone(), cameras: vec![], ..self.clone() }
    }

    /// The plan on this machine: each stage's `auto` resolved by the stage's own rule, and
    /// the heap and capture I/O decided from them ([`crate::plan::make`]).
    pub fn plan(&self, publish: PathBuf) -> Result<Plan> {
        let cap = self.capture.config()?;
        // The plan needs the scaler; each camera's rate is checked with the cameras (`check`).
        let scale = ScaleArgs { detect_fps: vec![], ..self.scale.clone() }.config()?;
        plan::make(plan::Inputs {
            source: zcpipe_capture::auto::choose(&cap.source, cap.format, cap.size),
            fps: self.capture.fps.map(zcpipe_capture::spec::fps_name),
            capture_io: cap.capture_io,
            scaler: zcpipe_scale::auto::choose(&scale.scaler, scale.rga_core)?,
            infer: self.infer.choice()?,
            heap: self.common.heap,
            publish,
            copy_mode: self.common.copy_mode,
            decoder: cap.decoder,
            wait_for_camera: cap.wait_for_camera,
        })
    }

    /// These options with the plan's choices written in, so every stage is started with
    /// what the plan printed (no stage decides `auto` again).
    pub fn resolved(&self, plan: &Plan) -> PipelineArgs {
        let r = &plan.resolved;
        let mut p = self.clone();
        p.capture.source = r.source.to_string();
        p.capture.capture_io = r.capture_io;
        if self.cameras.len() <= 1 {
            // One camera: the decoder the plan settled on (several: each camera decides).
            p.capture.decoder = r.decoder.or(p.capture.decoder);
        }
        p.scale.scaler = r.scaler.clone();
        p.scale.rga_core = r.rga_core;
        p.common.heap = r.heap;
        p.infer.infer = r.infer.backend.name().to_string();
        p.infer.model = Some(r.infer.model.clone());
        if r.infer.backend == zcpipe_infer::DetectorKind::Rknn && !r.infer.npu_cores.is_empty() {
            p.infer.npu_cores = r.infer.npu_cores.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        }
        p
    }

    /// The engines the plan runs frames on at once: RKNN's contexts (listed cores times
    /// `--npu-contexts-per-core`), else one.
    pub fn lanes(&self, plan: &Plan) -> usize {
        let r = &plan.resolved.infer;
        if r.backend == zcpipe_infer::DetectorKind::Rknn {
            r.npu_cores.len().max(1) * self.infer.npu_contexts_per_core.max(1) as usize
        } else {
            1
        }
    }
}

/// Checks a pool size (`--buffers`, `--scale-buffers`): 2..=64 buffers; the error names
/// the flag's own default (`good`).
pub fn check_buffers(flag: &str, n: usize, good: usize) -> Result<usize> {
    if !(2..=64).contains(&n) {
        anyhow::bail!("{flag} {n}: use 2..=64 ({good} is a good default)");
    }
    Ok(n)
}

/// Checks a per-camera list (`--detect-fps`, `--weight`): one value for every camera, or
/// one per camera of `cameras` (0: one camera); each finite, in `0..=max` (`positive`: the
/// range the error names starts above 0; the caller says why 0 itself is refused).
pub fn check_per_camera(flag: &str, values: &[f64], cameras: usize, max: f64, positive: bool) -> Result<Vec<f64>> {
    if values.len() > 1 && values.len() != cameras.max(1) {
        anyhow::bail!(
            "{flag} has {} values for {} camera(s): give one for every camera, or one per camera in --cameras order",
            values.len(),
            cameras.max(1)
        );
    }
    for v in values {
        if !v.is_finite() || *v < 0.0 || *v > max {
            let range = if positive { format!("above 0, up to {max}") } else { format!("in 0..={max}") };
            anyhow::bail!("{flag} {v}: use a number {range}");
        }
    }
    Ok(values.to_vec())
}

/// A list of numbers as a flag writes it (`5,10,2.5`).
pub fn join(values: &[f64]) -> String {
    values.iter().map(f64::to_string).collect::<Vec<_>>().join(",")
}
