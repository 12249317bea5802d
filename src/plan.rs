//! The plan: what `zcpipe run` will use on this machine, decided before the first frame and
//! printed as one line, each choice with its reason.
//!
//! ```text
//! plan: v4l2:/dev/video11 (rkisp_v6) NV12 1920x1080@30 (mmap, EXPBUF) -> rga (rga3-core0) -> rknn models/yolox_nano_416_rk3588.rknn on NPU cores 0,1,2 -> /run/zcpipe/detections.sock; heap system
//! ```
//!
//! Each stage folder owns its own `auto` ([`zcpipe_capture::auto`], [`zcpipe_scale::auto`],
//! [`zcpipe_infer::auto`]), so a stage started alone decides the same way; this module puts
//! their answers together and adds the choices that need more than one stage: the heap (a
//! heap RGA2 can reach, dma32 or CMA, when RGA2 does the work and RAM lies above 4 GiB:
//! [`zcpipe_scale::rga::rga_heap`]) and the capture I/O (`dmabuf`, so the camera writes into
//! that heap, when the camera imports dma-bufs). The resolved values ([`Resolved`]) are what
//! the supervisor passes to every stage, so the plan printed is the plan run.
//!
//! The plan has room for what later work adds: several sources (each with its own
//! decoder), several outputs (MQTT, a web view, a display). `zcpipe run --dry-run` prints it
//! and exits; `zcpipe doctor` ends with it.

use std::path::PathBuf;

use serde::Serialize;

use zcpipe_capture::auto::SourceChoice;
use zcpipe_capture::decoder::{settle, Decoder, DecoderChoice};
use zcpipe_capture::spec::{SourceSpec, BUNDLED_CLIP};
use zcpipe_capture::v4l2::CaptureIo;
use zcpipe_core::config::Choice;
use zcpipe_core::dmabuf::{Allocator, HeapChoice};
use zcpipe_infer::auto::InferChoice;
use zcpipe_infer::DetectorKind;
use zcpipe_scale::auto::ScalerChoice;
use zcpipe_scale::rga::rga_heap;
use zcpipe_scale::ScalerKind;
use zcpipe_sys::board;

/// One choice: what, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Step {
    /// What is used (`rga (rga3-core0)`).
    pub what: String,
    /// Why (`auto: /usr/lib/librga.so loads and /dev/rga opens; ...`).
    pub why: String,
}

/// The values the plan settled on, passed to the stages as flags.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// `--source` (`auto` with no camera stays `auto`: the bundled clip).
    pub source: SourceSpec,
    /// `--capture-io` (`None`: not a camera, or left to capture's default).
    pub capture_io: Option<CaptureIo>,
    /// `--scaler` (never `auto`).
    pub scaler: ScalerKind,
    /// `--rga-core`.
    pub rga_core: zcpipe_scale::rga::RgaCore,
    /// `--heap`.
    pub heap: HeapChoice,
    /// The infer stage's backend, model and NPU cores.
    pub infer: InferChoice,
    /// `--decoder` of a compressed source (`mpp` or `cpu`; `None`: not one).
    pub decoder: Option<DecoderChoice>,
}

/// The plan of one run. Serialised in `zcpipe doctor --json` and the dry run's `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// One per source (one today; several cameras later).
    pub sources: Vec<Step>,
    /// The scaler.
    pub scaler: Step,
    /// The detector.
    pub infer: Step,
    /// Where results go (the detections socket today; MQTT, a web view, a display later).
    pub outputs: Vec<Step>,
    /// Where buffers come from.
    pub heap: Step,
    /// `--copy-mode`: CPU copies at every hop.
    pub copy_mode: bool,
    /// The settled values.
    #[serde(skip)]
    pub resolved: Resolved,
}

/// What the plan is made from: each stage's own choice, and the options that need more than
/// one stage.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The capture stage's choice ([`zcpipe_capture::auto::choose`]).
    pub source: SourceChoice,
    /// `--fps` as written (`None`: the source's own rate).
    pub fps: Option<String>,
    /// `--capture-io` (`None`: not given).
    pub capture_io: Option<CaptureIo>,
    /// The scale stage's choice ([`zcpipe_scale::auto::choose`]).
    pub scaler: ScalerChoice,
    /// The infer stage's choice ([`zcpipe_infer::auto::choose`]).
    pub infer: InferChoice,
    /// `--heap`.
    pub heap: HeapChoice,
    /// The detections socket.
    pub publish: PathBuf,
    /// `--copy-mode`.
    pub copy_mode: bool,
    /// `--decoder` (`None`: auto).
    pub decoder: Option<DecoderChoice>,
    /// `--wait-for-camera`.
    pub wait_for_camera: bool,
}

/// Puts the stages' choices together and decides the heap and capture I/O. What cannot be
/// used is in the reasons; the one error is a heap that cannot be opened (`--heap dma32`
/// where there is none), which every stage would meet.
pub fn make(i: Inputs) -> anyhow::Result<Plan> {
    let heap_dir = board::path("/dev/dma_heap");
    let camera = i.source.camera.as_ref();
    // The heap: RGA2 reaches only the first 4 GiB (PITFALLS 1).
    let rga = i.scaler.rga2 || i.scaler.kind == ScalerKind::Rga;
    let (heap, heap_why) = if rga && !i.copy_mode {
        let h = rga_heap(i.heap, &heap_dir, !i.scaler.rga2);
        (h.choice, h.reason)
    } else if i.heap == HeapChoice::Auto {
        (HeapChoice::Auto, "auto: the first present of system, dma32, cma, udmabuf, drm, memfd".to_string())
    } else {
        (i.heap, format!("--heap {}", i.heap.name()))
    };
    let low_heap = matches!(heap, HeapChoice::Dma32 | HeapChoice::Cma);
    let (capture_io, io_why) = match (i.capture_io, camera) {
        (Some(io), Some(_)) => (Some(io), format!("--capture-io {}", io.name())),
        (None, Some(c)) if i.scaler.rga2 && low_heap && c.can_import => {
            (Some(CaptureIo::Dmabuf), format!("RGA2 reads the camera's buffers, so they come from the {} heap (the camera imports dma-bufs)", heap.name()))
        }
        (None, Some(_)) if i.scaler.rga2 && low_heap => (
            Some(CaptureIo::Mmap),
            "the camera cannot import dma-bufs: its own buffers, which RGA2 can reach only if the driver allocates them below 4 GiB".into(),
        ),
        (io, Some(_)) => (io.or(Some(CaptureIo::Mmap)), "the driver's buffers, exported with VIDIOC_EXPBUF".into()),
        (io, None) => (io, String::new()),
    };
    let alloc = crate::doctor::quietly(|| {
        Allocator::open(heap, &heap_dir, &board::path("/dev/udmabuf"), &board::path("/dev/dri"))
    })?;
    let heap_what = alloc.describe();
    let heap_why = if rga && matches!(alloc, Allocator::Memfd) {
        format!("{heap_why}; no dma-buf heap or udmabuf here, so pools are memfds, which a real RGA cannot import (only the test fakes can): enable CONFIG_DMABUF_HEAPS_SYSTEM, or --scaler cpu")
    } else {
        heap_why
    };
    let source_what = match (&i.source.spec, camera) {
        (SourceSpec::Auto, _) => format!("bundled clip {BUNDLED_CLIP}"),
        (spec, Some(c)) => {
            let fps = i.fps.as_deref().map(|f| format!("@{f}")).unwrap_or_default();
            let io = match capture_io {
                Some(CaptureIo::Dmabuf) => "dmabuf, imported",
                _ => "mmap, EXPBUF",
            };
            format!("{} ({}) {}{fps} ({io})", spec.redacted(), c.node.driver, c.format_text())
        }
        // `--fps` paces a host source (a test pattern's own `@FPS` included).
        (spec, None) => match i.fps.as_deref() {
            Some(f) if !spec.is_network() => format!("{} paced at {f} fps (--fps)", spec.redacted()),
            _ => spec.redacted(),
        },
    };
    // Who decodes a compressed source: the capture stage's own rule (`capture::decoder::settle`).
    let (decoder, decoder_why) = settle(i.decoder.unwrap_or_default(), &i.source.spec, i.wait_for_camera, None)?;
    let compressed = matches!(i.source.spec, SourceSpec::Video(_) | SourceSpec::Network(_));
    let source_what = match (&decoder, compressed) {
        (Decoder::Mpp(_), _) => format!("{source_what} decoded by MPP into the pool"),
        (Decoder::Cpu, true) => format!("{source_what} decoded by ffmpeg on the CPU"),
        (Decoder::Cpu, false) => source_what,
    };
    let source_why = [i.source.reason.as_str(), io_why.as_str(), decoder_why.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ");
    let scaler_what = match &i.scaler.kind {
        ScalerKind::Rga => format!("rga ({})", i.scaler.rga_core.name()),
        k => k.to_string(),
    };
    let infer_what = match i.infer.backend {
        DetectorKind::Rknn => format!("rknn {} {}", i.infer.model.display(), i.infer.cores_text),
        DetectorKind::Onnx => format!("onnx {} (tract, CPU)", i.infer.model.display()),
        DetectorKind::None => "none (no inference)".into(),
        DetectorKind::Replay => format!("replay {} (detections read from the file)", i.infer.model.display()),
        DetectorKind::Auto => format!("auto {}", i.infer.model.display()),
    };
    let infer_why = if i.infer.cores_reason.is_empty() {
        i.infer.reason.clone()
    } else {
        format!("{}; cores: {}", i.infer.reason, i.infer.cores_reason)
    };
    Ok(Plan {
        sources: vec![Step { what: source_what, why: source_why }],
        scaler: Step { what: scaler_what, why: i.scaler.reason.clone() },
        infer: Step { what: infer_what, why: infer_why },
        outputs: vec![Step {
            what: i.publish.display().to_string(),
            why: "the detections socket (JSON lines, any number of local clients)".into(),
        }],
        heap: Step { what: heap_what, why: heap_why },
        copy_mode: i.copy_mode,
        resolved: Resolved {
            source: i.source.spec,
            capture_io,
            scaler: i.scaler.kind,
            rga_core: i.scaler.rga_core,
            heap,
            infer: i.infer,
            decoder: compressed.then(|| if decoder.name() == "mpp" { DecoderChoice::Mpp } else { DecoderChoice::Cpu }),
        },
    })
}

impl Plan {
    /// The one line: `plan: SOURCE -> SCALER -> INFER -> OUTPUT; heap HEAP`.
    pub fn line(&self) -> String {
        let sources: Vec<&str> = self.sources.iter().map(|s| s.what.as_str()).collect();
        let outputs: Vec<&str> = self.outputs.iter().map(|s| s.what.as_str()).collect();
        let copy = if self.copy_mode { "; copy mode (CPU copies at every hop)" } else { "" };
        format!(
            "plan: {} -> {} -> {} -> {}; heap {}{copy}",
            sources.join(" + "),
            self.scaler.what,
            self.infer.what,
            outputs.join(" + "),
            self.heap.what
        )
    }

    /// The line, then one `  why: ...` line per choice.
    pub fn text(&self) -> String {
        let mut s = self.line() + "\n";
        for (name, step) in self.sources.iter().map(|st| ("source", st)).chain([
            ("scaler", &self.scaler),
            ("infer", &self.infer),
            ("heap", &self.heap),
        ]) {
            if !step.why.is_empty() {
                s += &format!("  {name}: {}\n", step.why);
            }
        }
        s
    }
}
