//! The display's options: `zcpipe stage display` ([`DisplayArgs`]) and `zcpipe run
//! --display ...` ([`RunDisplayArgs`]), turned into [`DisplayConfig`].

use std::path::PathBuf;

use clap::Args;

use zcpipe_display::{DisplayConfig, DisplayTarget};

/// The options `zcpipe run` and `zcpipe stage display` share.
#[derive(Args, Debug, Clone)]
pub struct RunDisplayArgs {
    /// Show the camera (the first one) on a display with its boxes and zones: `auto` (the first DRM
    /// card), a card (`/dev/dri/card0`), or `none` (the default). A fifth stage process; a
    /// display that is missing or fails never stops the pipeline.
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
            // A zone naming another camera is that camera's, not drawn here.
            zones: zcpipe_track::zone::per_camera(
                &self
                    .zones
                    .iter()
                    .filter(|z| z.camera.is_none() || z.camera == self.camera)
                    .cloned()
                    .collect::<Vec<_>>(),
                &[self.camera.clone().unwrap_or_else(|| "cam0".into())],
            )?
            .remove(0),
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
}
