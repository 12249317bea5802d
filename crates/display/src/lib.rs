//! Stage 5 (optional): the display sink. A consumer of a capture pool through its tap
//! ([`zcpipe_core::tap::TapClient`], holding up to 2 frames: the one on screen and the one
//! queued to replace it) and a client of the publish stage's detections socket, as
//! `zcpipe watch` is. It scans each frame out on a KMS plane (`kms.rs`: the camera's
//! dma-buf imported once per buffer with PRIME, a framebuffer per pool buffer) and draws the
//! boxes, with the camera's masks, zones and lines under them (`shapes.rs`), on a second,
//! ARGB8888 plane (drawn by `core::draw`, as the web view draws), redrawn only when the
//! detections or the counts change;
//! where no plane takes the camera's format or size, where the driver has no overlay plane
//! or no atomic modesetting, and in copy mode, it composes each frame into a DRM dumb buffer
//! with the CPU instead (`compose.rs`), reading the frame through the read guard and
//! writing the dumb buffer through the write guard of its PRIME export (every dumb buffer
//! the CPU draws into is mapped once, as a dma-buf, and touched only between
//! `DMA_BUF_IOCTL_SYNC` START and END).
//!
//! It never slows capture: its tap is drop-oldest and holds at most 2 buffers, it takes the
//! newest frame, and the frames it could not show are counted (`skipped`: gaps in the
//! capture sequence it saw). Why a process of its own: it needs DRM master, and a display
//! that crashes (a driver error, a disconnected monitor) must not stop detections; it is a
//! pure consumer (ARCHITECTURE.md "The display").

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

pub mod compose;
pub mod detections;
pub mod kms;
pub mod report;
mod shapes;
pub mod stage;

/// `--display`: where the frames go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisplayTarget {
    /// The first DRM card (`/dev/dri/card*`, in name order) with a connected connector.
    Auto,
    /// This DRM card (`/dev/dri/cardN`).
    Card(PathBuf),
    /// No display (the default): no display stage.
    None,
}

impl std::str::FromStr for DisplayTarget {
    type Err = String;
    /// `auto`, `none`, or a path to a DRM card node (`/dev/dri/card0`).
    fn from_str(s: &str) -> std::result::Result<DisplayTarget, String> {
        match s {
            "auto" => Ok(DisplayTarget::Auto),
            "none" => Ok(DisplayTarget::None),
            p if p.starts_with('/') => Ok(DisplayTarget::Card(PathBuf::from(p))),
            other => Err(format!("`{other}`: use auto, none, or a DRM card node such as /dev/dri/card0")),
        }
    }
}

impl std::fmt::Display for DisplayTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DisplayTarget::Auto => f.write_str("auto"),
            DisplayTarget::Card(p) => write!(f, "{}", p.display()),
            DisplayTarget::None => f.write_str("none"),
        }
    }
}

/// The display stage's configuration (`zcpipe stage display`, `zcpipe run --display`).
#[derive(Clone, Debug)]
pub struct DisplayConfig {
    /// The card to use.
    pub target: DisplayTarget,
    /// The capture stage whose pool is shown (`capture`, `capture@NAME`): its socket is
    /// `<run dir>/<stage>.sock`.
    pub upstream: zcpipe_core::id::StageId,
    /// The camera's name in the detections lines (`""` for a single unnamed camera: every
    /// frame line is taken).
    pub camera: String,
    /// The publish stage's detections socket; `None`: no boxes.
    pub detections: Option<PathBuf>,
    /// `--display-writeback DIR`: write the composed output of some frames (read back
    /// through the card's writeback connector) as PPM files with a JSON sidecar.
    pub writeback: Option<PathBuf>,
    /// How many frames `writeback` writes (the first ones shown with detections, or without
    /// a detections socket the first ones shown).
    pub writeback_frames: u32,
    /// `--display-compose`: compose with the CPU even where a plane could scan the frame out
    /// (a diagnostic, and what `--copy-mode` does).
    pub force_compose: bool,
    /// Legacy modesetting (SETCRTC, PAGE_FLIP) even where the driver offers atomic
    /// (`--display-legacy`).
    pub legacy: bool,
    /// Stop after this many frames shown (tests).
    pub frames: Option<u64>,
    /// The camera's zones (source pixels), drawn with the boxes and their counts.
    pub zones: Vec<zcpipe_track::Zone>,
    /// The camera's lines (source pixels), drawn with the boxes, their direction and their
    /// crossings.
    pub lines: Vec<zcpipe_track::Line>,
    /// The camera's masks' polygons (source pixels), drawn outlined and hatched.
    pub masks: Vec<Vec<(f32, f32)>>,
}

/// The DRM card `--display auto` uses: the first `/dev/dri/card*` (under the system root,
/// [`zcpipe_sys::board::path`]) in name order; `None` when there is none (a machine
/// without KMS, a container without /dev/dri). Whether it has a connected connector is
/// checked when it is opened.
pub(crate) fn first_card() -> Option<PathBuf> {
    let dir = zcpipe_sys::board::path("/dev/dri");
    let mut cards: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("card")))
        .collect();
    cards.sort();
    cards.into_iter().next()
}

/// The card `target` names, or the one line that says why there is none.
pub fn resolve_card(target: &DisplayTarget) -> Result<PathBuf> {
    match target {
        DisplayTarget::Card(p) if Path::new(p).exists() => Ok(p.clone()),
        DisplayTarget::Card(p) => bail!("display: {} does not exist; pass --display auto, or the card `ls /dev/dri` shows", p.display()),
        DisplayTarget::Auto => first_card().ok_or_else(|| anyhow::anyhow!("display: no DRM card (nothing in {}); nothing to show frames on: run without --display, or load the display's driver", zcpipe_sys::board::path("/dev/dri").display())),
        DisplayTarget::None => bail!("display: --display none"),
    }
}

/// A rectangle on the screen or in a frame, pixels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rect {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

/// Where a `src_w x src_h` frame goes on a `mode_w x mode_h` screen: scaled to fit (aspect
/// kept, centred, the rest black) when `scale` (a plane that scales, or the CPU), else at
/// its own size, centred; `None` without scaling when it is larger than the screen.
pub fn letterbox(src: (u32, u32), mode: (u32, u32), scale: bool) -> Option<Rect> {
    let ((sw, sh), (mw, mh)) = (src, mode);
    if sw == 0 || sh == 0 || mw == 0 || mh == 0 {
        return None;
    }
    let (w, h) = if scale {
        // The side that fills the screen is exact; the other rounds down, never past it.
        if sw as u64 * mh as u64 >= sh as u64 * mw as u64 {
            (mw, ((sh as u64 * mw as u64) / sw as u64).max(1) as u32)
        } else {
            (((sw as u64 * mh as u64) / sh as u64).max(1) as u32, mh)
        }
    } else if sw <= mw && sh <= mh {
        (sw, sh)
    } else {
        return None;
    };
    Some(Rect { x: (mw - w) / 2, y: (mh - h) / 2, w, h })
}

/// Maps a box `[x1, y1, x2, y2]` in source-frame pixels of a `frame` (w, h) shown at
/// `picture` to screen pixels.
pub fn box_on_screen(b: [f32; 4], frame: (u32, u32), picture: Rect) -> [f32; 4] {
    let sx = picture.w as f32 / frame.0.max(1) as f32;
    let sy = picture.h as f32 / frame.1.max(1) as f32;
    [
        picture.x as f32 + b[0] * sx,
        picture.y as f32 + b[1] * sy,
        picture.x as f32 + b[2] * sx,
        picture.y as f32 + b[3] * sy,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letterbox_centres_at_its_size_or_scales_to_fit() {
        // vivid's 640x480 on vkms's 1024x768 without plane scaling: centred at (192, 144).
        assert_eq!(letterbox((640, 480), (1024, 768), false), Some(Rect { x: 192, y: 144, w: 640, h: 480 }));
        // Scaled: 4:3 fills 4:3 exactly; 16:9 on 4:3 gets bars above and below; 4:3 on 16:9 at the sides.
        assert_eq!(letterbox((640, 480), (1024, 768), true), Some(Rect { x: 0, y: 0, w: 1024, h: 768 }));
        assert_eq!(letterbox((1280, 720), (1024, 768), true), Some(Rect { x: 0, y: 96, w: 1024, h: 576 }));
        assert_eq!(letterbox((640, 480), (1920, 1080), true), Some(Rect { x: 240, y: 0, w: 1440, h: 1080 }));
        // Larger than the screen without scaling: no place (a CPU composition then).
        assert_eq!(letterbox((1920, 1080), (1024, 768), false), None);
        assert_eq!(letterbox((0, 480), (1024, 768), true), None);
    }

    #[test]
    fn boxes_map_from_frame_pixels_to_the_picture_on_screen() {
        let pic = Rect { x: 192, y: 144, w: 640, h: 480 };
        assert_eq!(box_on_screen([100.0, 50.0, 300.0, 250.0], (640, 480), pic), [292.0, 194.0, 492.0, 394.0]);
        let pic = Rect { x: 0, y: 96, w: 1024, h: 576 };
        assert_eq!(box_on_screen([0.0, 0.0, 1280.0, 720.0], (1280, 720), pic), [0.0, 96.0, 1024.0, 672.0]);
    }

    #[test]
    fn display_targets_parse_and_a_missing_card_is_one_line() {
        assert_eq!("auto".parse::<DisplayTarget>(), Ok(DisplayTarget::Auto));
        assert_eq!("none".parse::<DisplayTarget>(), Ok(DisplayTarget::None));
        assert_eq!("/dev/dri/card1".parse::<DisplayTarget>(), Ok(DisplayTarget::Card("/dev/dri/card1".into())));
        assert!("hdmi".parse::<DisplayTarget>().unwrap_err().contains("use auto, none"));
        let e = resolve_card(&DisplayTarget::Card("/nonexistent/card9".into())).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/card9 does not exist") && !e.contains('\n'), "{e}");
    }
}
