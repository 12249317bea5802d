//! The display's options: `zcpipe stage display` ([`DisplayArgs`]) and `zcpipe run
//! --display ...` ([`RunDisplayArgs`]), turned into [`DisplayConfig`].

use std::path::PathBuf;

use clap::Args;

use zcpipe_display::{DisplayConfig, DisplayTarget};
use zcpipe_track::filter::MaskSpec;
use zcpipe_track::LineSpec;

use super::scene::{Given, Read};

/// The options `zcpipe run` and `zcpipe stage display` share.
#[derive(Args, Debug, Clone)]
pub struct RunDisplayArgs {
    /// Show the camera (the first one) on a display with its boxes, zones, lines and masks:
    /// `auto` (the first DRM card), a card (`/dev/dri/card0`), or `none` (the default). A
    /// fifth stage process; a display that is missing or fails never stops the pipeline.
    #[arg(long, default_value = "none", value_parser = clap::value_parser!(DisplayTarget))]
    pub display: DisplayTarget,
    /// Diagnostic: write the composed output of the first frames shown with boxes (read back
    /// through the card's writeback connector) into this folder as wb-NNN.ppm, each with a
    /// wb-NNN.json saying where the picture and the boxes are.
    #[arg(long, value_name = "DIR")]
    pub display_writeback: Option<PathBuf>,
    /// How many frames --display-writeback writes (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub display_writeback_frames: u32,
    /// Compose every frame with the CPU into a dumb buffer even where a plane could scan the
    /// camera's buffer out (for comparison; --copy-mode does it too).
    #[arg(long)]
    pub display_compose: bool,
    /// Drive the display with legacy modesetting (SETCRTC, then PAGE_FLIP with events) even
    /// where the driver offers atomic modesetting: for a driver whose atomic support
    /// misbehaves. One plane then, so each frame is composed with its boxes by the CPU.
    #[arg(long)]
    pub display_legacy: bool,
}

impl RunDisplayArgs {
    /// The flags of `zcpipe stage display` for these options (without `--display`).
    pub fn flags(&self) -> Vec<String> {
        let mut v = vec![];
        v.extend(self.display_writeback.iter().map(|d| format!("--display-writeback={}", d.display())));
        v.push(format!("--display-writeback-frames={}", self.display_writeback_frames));
        if self.display_compose {
            v.push("--display-compose".into());
        }
        if self.display_legacy {
            v.push("--display-legacy".into());
        }
        v
    }
}

/// `zcpipe stage display`.
#[derive(Args, Debug, Clone)]
pub struct DisplayArgs {
    #[command(flatten)]
    pub display: RunDisplayArgs,
    /// The camera shown: its name in `zcpipe run --source NAME=...` (its capture stage is
    /// `capture@NAME`); without it, the single camera's `capture` stage.
    #[arg(long)]
    pub camera: Option<String>,
    /// The detections socket whose boxes are drawn (default: the instance's); `none`: no boxes.
    #[arg(long)]
    pub detections: Option<PathBuf>,
    /// Stop after this many frames shown (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub frames: Option<u64>,
    /// A zone of the camera shown, `NAME=x1,y1,x2,y2,x3,y3,...` in source pixels (as the
    /// publish stage's `--zone`): drawn in amber with the boxes, with its counts from the
    /// detections socket. `zcpipe run` passes the camera's zones itself. Repeat for more zones.
    #[arg(long = "zone", value_name = "[CAMERA:]NAME=x1,y1,...", value_parser = super::track::ParseZone)]
    pub zones: Vec<zcpipe_track::ZoneSpec>,
    /// A line of the camera shown, `NAME=x1,y1,x2,y2,...` in source pixels (as the publish
    /// stage's `--line`): drawn in pale blue with the boxes, with an arrow from the middle of
    /// its longest segment to its `in` side and its crossings from the detections socket.
    /// `zcpipe run` passes the camera's lines itself. Repeat for more lines.
    #[arg(long = "line", value_name = "[CAMERA:]NAME=x1,y1,x2,y2,...", value_parser = Read("--line", LineSpec::parse))]
    pub lines: Vec<Given<LineSpec>>,
    /// A mask of the camera shown, `x1,y1,x2,y2,x3,y3,...` in source pixels (as the publish
    /// stage's `--mask`): outlined and hatched in dark grey under the boxes. `zcpipe run`
    /// passes the camera's masks itself. Repeat for more masks.
    #[arg(long = "mask", value_name = "[CAMERA:]x1,y1,...", value_parser = Read("--mask", MaskSpec::parse))]
    pub masks: Vec<Given<MaskSpec>>,
}

impl DisplayArgs {
    /// The checked configuration: `--display none` is refused here (the stage has nothing to do).
    pub fn config(&self, instance: &str) -> anyhow::Result<DisplayConfig> {
        if self.display.display == DisplayTarget::None {
            anyhow::bail!("--display none: the display stage has nothing to do; pass --display auto or a card such as /dev/dri/card0");
        }
        if let Some(c) = &self.camera {
            zcpipe_core::config::check_camera_name(c)?;
        }
        let detections = match &self.detections {
            Some(p) if p.as_os_str() == "none" => None,
            Some(p) => Some(p.clone()),
            None => Some(zcpipe_core::config::default_detections_socket(instance)),
        };
        // A zone, line or mask naming another camera is that camera's, not drawn here.
        let ours = |c: &Option<String>| c.is_none() || *c == self.camera;
        let cameras = [self.camera.clone().unwrap_or_else(|| "cam0".into())];
        let lines: Vec<LineSpec> = self.lines.iter().map(|g| g.spec.clone()).filter(|l| ours(&l.camera)).collect();
        let masks: Vec<MaskSpec> = self.masks.iter().map(|g| g.spec.clone()).filter(|m| ours(&m.camera)).collect();
        Ok(DisplayConfig {
            target: self.display.display.clone(),
            upstream: zcpipe_core::id::StageId::capture(self.camera.as_deref()),
            camera: self.camera.clone().unwrap_or_default(),
            detections,
            writeback: self.display.display_writeback.clone(),
            writeback_frames: self.display.display_writeback_frames,
            force_compose: self.display.display_compose,
            legacy: self.display.display_legacy,
            frames: self.frames,
            zones: zcpipe_track::zone::per_camera(
                &self.zones.iter().filter(|z| ours(&z.camera)).cloned().collect::<Vec<_>>(),
                &cameras,
            )?
            .remove(0),
            lines: zcpipe_track::line::per_camera(&lines, &cameras)?.remove(0),
            masks: zcpipe_track::filter::per_camera(&masks, &[], &cameras)?.remove(0).masks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        t: super::super::track::TrackArgs,
    }

    #[derive(Parser)]
    struct D {
        #[command(flatten)]
        d: DisplayArgs,
    }

    /// The display stage of camera `front` gets its zones and those of every camera, never
    /// another camera's, and draws them at the same points.
    #[test]
    fn the_display_gets_the_zones_of_the_camera_it_shows() {
        let run = T::parse_from([
            "t",
            "--zone",
            "front:door=1,2,30,4,5,60.5",
            "--zone",
            "back:gate=1,1,9,1,9,9",
            "--zone",
            "all=0,0,10,0,10,10",
        ])
        .t;
        let flags = run.zone_flags_of("front");
        assert_eq!(flags, ["--zone=door=1,2,30,4,5,60.5", "--zone=all=0,0,10,0,10,10"]);
        let args = ["d", "--display", "/dev/dri/card0", "--camera", "front"].map(String::from);
        let d = D::parse_from(args.into_iter().chain(flags)).d;
        let cfg = d.config("default").unwrap();
        let names: Vec<&str> = cfg.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, ["door", "all"]);
        assert_eq!(cfg.zones[0].points, [(1.0, 2.0), (30.0, 4.0), (5.0, 60.5)]);
        // A zone given by hand for another camera is not this display's.
        let d =
            D::parse_from(["d", "--display", "/dev/dri/card0", "--camera", "front", "--zone", "back:gate=1,1,9,1,9,9"])
                .d;
        assert!(d.config("default").unwrap().zones.is_empty());
        // A bad zone is the zone's one line.
        let Err(e) = D::try_parse_from(["d", "--display", "auto", "--zone", "door=1,2,3,4"]) else { panic!() };
        assert!(e.to_string().contains("--zone door=1,2,3,4: 2 point(s)"), "{e}");
    }

    /// The display stage of camera `front` gets its lines and masks and those of every
    /// camera, never another camera's, as the run was given them (a line's `point=` and
    /// `band=` too), and reads them back as the same shapes.
    #[test]
    fn the_display_gets_the_lines_and_masks_of_the_camera_it_shows() {
        let run = T::parse_from([
            "t",
            "--zone",
            "front:door=1,2,30,4,5,60.5",
            "--line",
            "front:walk=10,20,300.5,20,300.5,200,point=center,band=4",
            "--line",
            "back:gate=1,1,9,9",
            "--line",
            "all=0,100,640,100",
            "--mask",
            "front:0,0,50,0,50,40",
            "--mask",
            "back:1,1,9,1,9,9",
            "--mask",
            "600,400,640,400,640,480",
        ])
        .t;
        let flags = run.display_flags_of("front");
        assert_eq!(
            flags,
            [
                "--zone=door=1,2,30,4,5,60.5",
                "--line=walk=10,20,300.5,20,300.5,200,point=center,band=4",
                "--line=all=0,100,640,100",
                "--mask=0,0,50,0,50,40",
                "--mask=600,400,640,400,640,480",
            ]
        );
        let args = ["d", "--display", "/dev/dri/card0", "--camera", "front"].map(String::from);
        let cfg = D::parse_from(args.into_iter().chain(flags)).d.config("default").unwrap();
        let names: Vec<&str> = cfg.lines.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["walk", "all"]);
        let walk = &run.scene.lines[0].spec.line;
        assert_eq!(&cfg.lines[0], walk, "the same line, its point and band too");
        assert_eq!(cfg.lines[0].points, [(10.0, 20.0), (300.5, 20.0), (300.5, 200.0)]);
        assert_eq!(
            cfg.masks,
            [vec![(0.0, 0.0), (50.0, 0.0), (50.0, 40.0)], vec![(600.0, 400.0), (640.0, 400.0), (640.0, 480.0)]]
        );
        // The other camera's own; the single camera of a run without names gets the unnamed ones.
        assert_eq!(
            run.display_flags_of("back"),
            ["--line=gate=1,1,9,9", "--line=all=0,100,640,100", "--mask=1,1,9,1,9,9", "--mask=600,400,640,400,640,480"]
        );
        // Given by hand for another camera: not this display's.
        let d = D::parse_from([
            "d",
            "--display",
            "/dev/dri/card0",
            "--camera",
            "front",
            "--line",
            "back:gate=1,1,9,9",
            "--mask",
            "back:1,1,9,1,9,9",
        ])
        .d;
        let cfg = d.config("default").unwrap();
        assert!(cfg.lines.is_empty() && cfg.masks.is_empty());
        // A bad line or mask is its one line.
        let Err(e) = D::try_parse_from(["d", "--display", "auto", "--line", "door=5,5"]) else { panic!() };
        assert!(e.to_string().contains("--line door=5,5: 1 point(s); a line needs at least two"), "{e}");
        let Err(e) = D::try_parse_from(["d", "--display", "auto", "--mask", "0,0,1,1"]) else { panic!() };
        assert!(e.to_string().contains("--mask 0,0,1,1: 2 point(s); a mask needs at least three"), "{e}");
    }
}
