//! `image:PATH` source: still images looped forever.
//!
//! PATH is one `.png`/`.jpg`/`.jpeg` file or a directory of them (taken in sorted file-name
//! order). Every image is decoded and converted to NV12 once, at open (BT.601 limited range,
//! [`FrameLayout::nv12`] with 16-byte bytesperline); [`FrameSource::fill`] then only copies
//! the cached NV12 of the next image into the pool buffer.

use std::path::{Path, PathBuf};

use super::{FrameSource, SourceInfo};
use anyhow::{bail, Context};
use zcpipe_core::frame::FrameLayout;

/// Frame rate an image source reports when `--fps` does not set one, in frames per second
/// (images carry none).
pub(crate) const DEFAULT_IMAGE_FPS: f64 = 30.0;

/// bytesperline alignment of the NV12 frames host sources write, in bytes.
pub(crate) const STRIDE_ALIGN: u32 = zcpipe_convert::still::STRIDE_ALIGN;

/// File extensions (lower case) a directory source picks up.
pub(crate) const IMAGE_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// One decoded image, already NV12.
struct CachedFrame {
    layout: FrameLayout,
    /// `layout.bytes_needed()` bytes: Y plane then CbCr plane.
    nv12: Vec<u8>,
}

/// Still images (one file or a directory) as an endless NV12 stream.
pub struct ImageSource {
    info: SourceInfo,
    frames: Vec<CachedFrame>,
    /// The files, in the order they are played (same order as `frames`).
    files: Vec<PathBuf>,
    next: usize,
}

impl ImageSource {
    /// Decodes every image under `path` (a file, or a directory's `.png`/`.jpg`/`.jpeg`
    /// files in sorted name order) and converts each to NV12. `fps` overrides
    /// [`DEFAULT_IMAGE_FPS`]. Errors name the file: `cannot read image PATH: CAUSE`; an empty
    /// directory is an error too.
    pub fn open(path: &Path, fps: Option<f64>) -> anyhow::Result<ImageSource> {
        let meta = std::fs::metadata(path).with_context(|| format!("cannot read image {}", path.display()))?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            let entries =
                std::fs::read_dir(path).with_context(|| format!("cannot list directory {}", path.display()))?;
            for entry in entries {
                let entry = entry.with_context(|| format!("cannot list directory {}", path.display()))?;
                let p = entry.path();
                let is_image = p
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
                if is_image && p.is_file() {
                    files.push(p);
                }
            }
            files.sort();
            if files.is_empty() {
                bail!("image directory {} has no .png, .jpg or .jpeg files", path.display());
            }
            files
        } else {
            vec![path.to_path_buf()]
        };

        let mut frames = Vec::with_capacity(files.len());
        for f in &files {
            let rgb = decode_rgb8(f)?;
            let (layout, nv12) = rgb8_to_nv12(rgb.as_raw(), rgb.width(), rgb.height())
                .with_context(|| format!("cannot convert image {} to NV12", f.display()))?;
            frames.push(CachedFrame { layout, nv12 });
        }

        let max_width = frames.iter().map(|f| f.layout.width).max().unwrap_or(0);
        let max_height = frames.iter().map(|f| f.layout.height).max().unwrap_or(0);
        let max_frame_bytes = frames.iter().map(|f| f.layout.bytes_needed()).max().unwrap_or(0);
        let fps = fps.unwrap_or(DEFAULT_IMAGE_FPS);
        let description = if files.len() == 1 {
            format!("image:{} {}x{} NV12 @{}fps", path.display(), max_width, max_height, super::spec::fps_name(fps))
        } else {
            format!(
                "image:{} ({} images, up to {}x{}) NV12 @{}fps",
                path.display(),
                files.len(),
                max_width,
                max_height,
                super::spec::fps_name(fps)
            )
        };
        Ok(ImageSource {
            info: SourceInfo { description, max_width, max_height, fps, max_frame_bytes },
            frames,
            files,
            next: 0,
        })
    }

    /// The image files in play order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

impl FrameSource for ImageSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// Copies the next cached NV12 image into `dst`; never ends (`Ok(None)` is not returned).
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>> {
        let Some(frame) = self.frames.get(self.next) else {
            bail!("image source {} has no frames", self.info.description);
        };
        let n = frame.nv12.len();
        let Some(out) = dst.get_mut(..n) else {
            bail!(
                "image source: buffer of {} bytes is too small for {} ({} bytes)",
                dst.len(),
                self.files[self.next].display(),
                n
            );
        };
        out.copy_from_slice(&frame.nv12);
        let layout = frame.layout;
        self.next = (self.next + 1) % self.frames.len();
        Ok(Some(layout))
    }
}

pub use zcpipe_convert::still::{decode_rgb8, rgb8_to_nv12};

#[cfg(test)]
mod tests {
    use super::*;

    fn data(rel: &str) -> PathBuf {
        zcpipe_core::data::source_root().join("tests/data").join(rel)
    }

    #[test]
    fn image_source_chelsea_is_nv12_with_padded_stride() {
        let mut s = ImageSource::open(&data("chelsea.png"), None).unwrap();
        let info = s.info().clone();
        println!("{}", info.description);
        assert_eq!((info.max_width, info.max_height, info.fps), (451, 300, 30.0));
        assert_eq!(info.max_frame_bytes, 464 * 300 * 3 / 2);
        let mut buf = vec![0u8; info.max_frame_bytes as usize];
        let l = s.fill(&mut buf).unwrap().unwrap();
        assert_eq!((l.width, l.height, l.fourcc), (451, 300, zcpipe_sys::fourcc::Fourcc::NV12));
        assert_eq!(l.planes[0].bytesperline, 464);
        assert_eq!(l.planes[1].offset, 464 * 300);
        l.validate(&[buf.len() as u64]).unwrap();
        // Column 451 (the even-padding column) replicates column 450 in luma.
        for y in 0..300 {
            assert_eq!(buf[y * 464 + 451], buf[y * 464 + 450], "row {y}");
        }
        // Luma stays in BT.601 limited range and is not flat.
        let luma = &buf[..464 * 300];
        let (lo, hi) = (0..300)
            .flat_map(|y| &luma[y * 464..y * 464 + 451])
            .fold((255u8, 0u8), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        println!("chelsea luma range {lo}..={hi}");
        assert!(lo >= 16 && hi <= 235 && hi - lo > 100, "{lo}..{hi}");
        // Looping: the same frame again.
        let mut buf2 = vec![0u8; buf.len()];
        assert_eq!(s.fill(&mut buf2).unwrap().unwrap(), l);
        assert_eq!(buf, buf2);
    }

    #[test]
    fn image_source_solid_red_has_bt601_limited_values() {
        let rgb: Vec<u8> = [255u8, 0, 0].repeat(6 * 4);
        let (l, nv12) = rgb8_to_nv12(&rgb, 6, 4).unwrap();
        assert_eq!(l.planes[0].bytesperline, 16);
        // BT.601 limited red: Y 81, Cb 90, Cr 240 (Rec. 601 table).
        for y in 0..4 {
            for x in 0..6 {
                assert!((nv12[y * 16 + x] as i32 - 81).abs() <= 1, "Y {}", nv12[y * 16 + x]);
            }
        }
        let uv = &nv12[l.planes[1].offset as usize..];
        for y in 0..2 {
            for x in 0..3 {
                let (cb, cr) = (uv[y * 16 + 2 * x] as i32, uv[y * 16 + 2 * x + 1] as i32);
                assert!((cb - 90).abs() <= 1 && (cr - 240).abs() <= 1, "CbCr {cb} {cr}");
            }
        }
    }

    #[test]
    fn image_source_directory_loops_in_sorted_order() {
        let dir = tempfile::tempdir().unwrap();
        // Copied under names whose sorted order differs from creation order.
        std::fs::copy(data("rocket.jpg"), dir.path().join("b.jpg")).unwrap();
        std::fs::copy(data("chelsea.png"), dir.path().join("a.png")).unwrap();
        std::fs::copy(data("dog.jpg"), dir.path().join("c.JPEG")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not an image").unwrap();
        let mut s = ImageSource::open(dir.path(), Some(2.0)).unwrap();
        println!("{}", s.info().description);
        let names: Vec<_> = s.files().iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["a.png", "b.jpg", "c.JPEG"]);
        assert_eq!((s.info().max_width, s.info().max_height, s.info().fps), (768, 576, 2.0));
        assert_eq!(s.info().max_frame_bytes, FrameLayout::nv12(768, 576, 16).bytes_needed());
        let mut buf = vec![0u8; s.info().max_frame_bytes as usize];
        let sizes: Vec<_> = (0..7)
            .map(|_| {
                let l = s.fill(&mut buf).unwrap().unwrap();
                (l.width, l.height)
            })
            .collect();
        assert_eq!(sizes, [(451, 300), (640, 427), (768, 576), (451, 300), (640, 427), (768, 576), (451, 300)]);
    }

    #[test]
    fn image_source_errors_name_the_file() {
        let missing = Path::new("tests/no-such.png");
        let e = ImageSource::open(missing, None).err().unwrap();
        println!("{e:#}");
        assert!(format!("{e:#}").starts_with("cannot read image tests/no-such.png: "), "{e:#}");

        let (_dir, bogus) = zcpipe_core::testing::file_with("x.png", b"this is not a png");
        let e = ImageSource::open(&bogus, None).err().unwrap();
        println!("{e:#}");
        assert!(format!("{e:#}").contains(&format!("cannot read image {}: ", bogus.display())), "{e:#}");

        let empty = tempfile::tempdir().unwrap();
        let e = ImageSource::open(empty.path(), None).err().unwrap();
        println!("{e:#}");
        assert!(e.to_string().contains("has no .png, .jpg or .jpeg files"), "{e}");
    }

    #[test]
    fn rgb8_to_nv12_rejects_bad_sizes() {
        assert!(rgb8_to_nv12(&[], 0, 1).is_err());
        assert!(rgb8_to_nv12(&[0; 3], 20000, 1).is_err());
        assert!(rgb8_to_nv12(&[0; 5], 2, 1).is_err());
        let (l, b) = rgb8_to_nv12(&[0; 3], 1, 1).unwrap();
        assert_eq!((l.width, l.height, b.len()), (1, 1, 16 * 2 * 3 / 2));
    }

    #[test]
    fn image_source_rejects_small_buffer() {
        let mut s = ImageSource::open(&data("chelsea.png"), None).unwrap();
        let mut small = vec![0u8; 1000];
        let e = s.fill(&mut small).unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
    }
}
