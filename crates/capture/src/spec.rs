//! Source selection: the `--source` text (`auto`, `image:PATH`, `video:PATH`,
//! `testsrc[:WxH[@FPS]]`, `v4l2[:DEVICE]`, or a network URL such as `rtsp://...`) parsed
//! into a [`SourceSpec`], and [`open_source`], which turns a spec into a boxed
//! [`FrameSource`].
//!
//! Parsing never touches the file system or the network; opening does, and its errors
//! name the path and the fix.
//!
//! A URL may carry credentials (`rtsp://user:password@host/...`). [`SourceSpec`]'s
//! `Display` is the command-line form (it passes `--source=` to the capture stage process,
//! so it keeps them); everything shown to people goes through [`SourceSpec::redacted`] /
//! [`redact_url`] (`rtsp://user:***@host/...`), and text a tool printed about the URL
//! through [`scrub_secrets`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context};

use super::image::ImageSource;
use super::testsrc::TestSource;
use super::video::VideoSource;
use super::FrameSource;

/// The accepted forms, quoted in every parse error.
pub(crate) const ACCEPTED_FORMS: &str =
    "auto, image:PATH, video:PATH, testsrc, testsrc:WxH, testsrc:WxH@FPS, testsrc:WxH@max, v4l2, v4l2:DEVICE, \
     or a stream URL (rtsp://, rtsps://, http://, https://, ... anything ffmpeg opens)";

/// The clip `auto` plays, relative to the data directory (`tests/data/` in the repo).
/// Intel `sample-videos`, CC BY 4.0; see `tests/data/PROVENANCE.md`.
pub const BUNDLED_CLIP: &str = "one-by-one-person-detection.mp4";

/// Default test-pattern width in pixels when `testsrc` gives no size.
pub(crate) const TESTSRC_DEFAULT_WIDTH: u32 = 1280;
/// Default test-pattern height in pixels when `testsrc` gives no size.
pub(crate) const TESTSRC_DEFAULT_HEIGHT: u32 = 720;
/// Default test-pattern rate in frames per second when `testsrc` gives none.
pub(crate) const TESTSRC_DEFAULT_FPS: f64 = 30.0;

/// Largest width or height a spec may ask for, in pixels (the bound
/// [`FrameLayout::validate`](zcpipe_core::frame::FrameLayout::validate) enforces).
pub(crate) const MAX_DIMENSION: u32 = zcpipe_convert::still::MAX_DIMENSION;

/// Which capture backend to open, as given on the command line. `Debug` shows a URL
/// redacted ([`redact_url`]), like every other form shown to people.
#[derive(Clone, PartialEq)]
pub enum SourceSpec {
    /// The best source present: the first V4L2 capture node (resolved by the capture stage),
    /// else the bundled clip ([`BUNDLED_CLIP`]) as `video:`.
    Auto,
    /// One image file, or a directory of `.png`/`.jpg`/`.jpeg` files, looped forever.
    Image(PathBuf),
    /// Any file ffmpeg decodes; ends at the end of the file.
    Video(PathBuf),
    /// A moving synthetic pattern of `width x height` pixels at `fps` frames per second.
    TestSrc {
        /// Frame width in pixels (1..=16384).
        width: u32,
        /// Frame height in pixels (1..=16384).
        height: u32,
        /// Nominal frame rate in frames per second (> 0), or [`FPS_MAX`] (unpaced).
        fps: f64,
    },
    /// A V4L2 capture device; `None` means the first capture node found
    /// ([`zcpipe_sys::v4l2::node::first_capture_node`]). Not a [`FrameSource`]: the capture stage
    /// drives it ([`super::v4l2::V4l2Capture`]).
    V4l2(Option<PathBuf>),
    /// A network stream (`rtsp://`, `rtsps://`, `http(s)://`, `rtmp://`, `srt://`, ...: any
    /// `SCHEME://...` URL, opened by ffmpeg), kept as written, credentials included. A live
    /// source ([`super::network::NetworkSource`]): not paced, reconnected when it drops. Shown
    /// to people only through [`SourceSpec::redacted`].
    Network(String),
}

/// Why a `--source` text was rejected: one line naming the bad text and listing
/// [`ACCEPTED_FORMS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseSourceSpecError {
    /// The text that was given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseSourceSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad source \"{}\": {}; accepted forms: {}", self.text, self.reason, ACCEPTED_FORMS)
    }
}

impl std::error::Error for ParseSourceSpecError {}

impl FromStr for SourceSpec {
    type Err = ParseSourceSpecError;

    /// Parses the `--source` text; a parse error quotes it redacted ([`redact_url`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| ParseSourceSpecError { text: redact_url(s), reason: reason.to_string() };
        // `image://x` is ours: the path `//x`, not a URL.
        if url_scheme(s).is_some_and(|k| !["auto", "image", "video", "testsrc", "v4l2"].contains(&k)) {
            if url_host(s).is_none_or(str::is_empty) {
                return Err(err("the URL has no host"));
            }
            if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(err("the URL has a space or control character (percent-encode it)"));
            }
            return Ok(SourceSpec::Network(s.to_string()));
        }
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind, arg) {
            ("auto", None) => Ok(SourceSpec::Auto),
            ("image", Some(p)) if !p.is_empty() => Ok(SourceSpec::Image(PathBuf::from(p))),
            ("video", Some(p)) if !p.is_empty() => Ok(SourceSpec::Video(PathBuf::from(p))),
            ("image" | "video", _) => Err(err("missing PATH")),
            ("testsrc", None) => Ok(SourceSpec::TestSrc {
                width: TESTSRC_DEFAULT_WIDTH,
                height: TESTSRC_DEFAULT_HEIGHT,
                fps: TESTSRC_DEFAULT_FPS,
            }),
            ("testsrc", Some(a)) => parse_testsrc(a).map_err(|r| err(&r)),
            ("v4l2", None) => Ok(SourceSpec::V4l2(None)),
            ("v4l2", Some(d)) if !d.is_empty() => Ok(SourceSpec::V4l2(Some(PathBuf::from(d)))),
            ("v4l2", Some(_)) => Err(err("missing DEVICE")),
            _ => Err(err("unknown source kind")),
        }
    }
}

/// Parses the `WxH[@FPS]` tail of `testsrc:`.
fn parse_testsrc(a: &str) -> Result<SourceSpec, String> {
    let (size, fps) = match a.split_once('@') {
        Some((size, fps)) => {
            let fps = parse_fps(fps)?;
            if fps != FPS_MAX && !FPS_RANGE.contains(&fps) {
                return Err(format!("fps {fps} out of range 0.01..=1000 (or max)"));
            }
            (size, fps)
        }
        None => (a, TESTSRC_DEFAULT_FPS),
    };
    let (w, h) = size.split_once('x').ok_or_else(|| format!("size \"{size}\" is not WxH"))?;
    let dim = |v: &str| -> Result<u32, String> {
        let n: u32 = v.parse().map_err(|_| format!("size \"{size}\" is not WxH"))?;
        if n == 0 || n > MAX_DIMENSION {
            return Err(format!("size {size} out of range 1..={MAX_DIMENSION}"));
        }
        Ok(n)
    };
    Ok(SourceSpec::TestSrc { width: dim(w)?, height: dim(h)?, fps })
}

impl fmt::Display for SourceSpec {
    /// The command-line form, which parses back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceSpec::Auto => write!(f, "auto"),
            SourceSpec::Image(p) => write!(f, "image:{}", p.display()),
            SourceSpec::Video(p) => write!(f, "video:{}", p.display()),
            SourceSpec::TestSrc { width, height, fps } => write!(f, "testsrc:{width}x{height}@{}", fps_name(*fps)),
            SourceSpec::V4l2(None) => write!(f, "v4l2"),
            SourceSpec::V4l2(Some(d)) => write!(f, "v4l2:{}", d.display()),
            SourceSpec::Network(url) => write!(f, "{url}"),
        }
    }
}

impl fmt::Debug for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceSpec::Auto => write!(f, "Auto"),
            SourceSpec::Image(p) => f.debug_tuple("Image").field(p).finish(),
            SourceSpec::Video(p) => f.debug_tuple("Video").field(p).finish(),
            SourceSpec::TestSrc { width, height, fps } => {
                f.debug_struct("TestSrc").field("width", width).field("height", height).field("fps", fps).finish()
            }
            SourceSpec::V4l2(d) => f.debug_tuple("V4l2").field(d).finish(),
            SourceSpec::Network(url) => f.debug_tuple("Network").field(&redact_url(url)).finish(),
        }
    }
}

impl SourceSpec {
    /// The form to show people (logs, errors, the plan, reports): [`Display`](fmt::Display)
    /// with a URL's credentials masked ([`redact_url`]).
    pub fn redacted(&self) -> String {
        match self {
            SourceSpec::Network(url) => redact_url(url),
            other => other.to_string(),
        }
    }

    /// Whether this is a live source that sends frames at its own pace and may drop and
    /// come back (a network stream).
    pub fn is_network(&self) -> bool {
        matches!(self, SourceSpec::Network(_))
    }
}

/// The scheme of `SCHEME://...` (`[A-Za-z][A-Za-z0-9+.-]*`, RFC 3986 3.1), lower-cased
/// checks left to the caller; `None` if `s` is not of that shape.
fn url_scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let mut c = scheme.chars();
    (c.next()?.is_ascii_alphabetic() && c.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))).then_some(scheme)
}

/// Where a URL's credentials end, as ffmpeg reads them (`av_url_split`: the last `@` of the
/// authority). The authority ends at the first `/`, `?` or `#`; a password with an
/// unencoded `/` would end it early, so an `@` after that (before `?`/`#`) still counts when
/// the text before it has a `:`. Returns (start of the user info, index of its `@`).
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let before_query = rest.find(['?', '#']).unwrap_or(rest.len());
    let authority_end = rest[..before_query].find('/').unwrap_or(before_query);
    if let Some(at) = rest[..authority_end].rfind('@') {
        return Some((start, start + at));
    }
    // A password with a '/' in it: the last '@' before any '?' or '#'.
    if let Some(at) = rest[..before_query].rfind('@').filter(|&at| rest[..at].contains(':')) {
        return Some((start, start + at));
    }
    // A password with a raw '#' or '?' in it: the last '@' before the first '/'.
    let slash = rest.find('/').unwrap_or(rest.len());
    let at = rest[..slash].rfind('@')?;
    rest[..at].contains(':').then_some((start, start + at))
}

/// The host (and port) of a URL, after any credentials; `None` if `s` is no `SCHEME://`.
fn url_host(url: &str) -> Option<&str> {
    let start = userinfo_span(url).map_or(url.find("://")? + 3, |(_, at)| at + 1);
    let rest = &url[start..];
    Some(&rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())])
}

/// Query parameters whose values are secrets (some cameras take `?user=..&password=..`).
const SECRET_QUERY_KEYS: [&str; 9] =
    ["password", "passwd", "pwd", "pass", "token", "access_token", "key", "secret", "auth"];

/// `url` as it may be shown: a password replaced by `***` (`rtsp://user:***@host/...`; the
/// user name stays), and the values of secret query parameters (`password=`, `token=`,
/// ...) too. Text that is not a `SCHEME://` URL comes back unchanged. Percent-encoded
/// passwords, and passwords with `@`, `:` or `/` in them, are masked whole (the user info
/// ends at the last `@`, as ffmpeg reads it).
pub fn redact_url(url: &str) -> String {
    if url_scheme(url).is_none() {
        return url.to_string();
    }
    let mut out = match userinfo_span(url) {
        Some((start, at)) => match url[start..at].find(':') {
            Some(colon) => format!("{}:***{}", &url[..start + colon], &url[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    };
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let (query, frag) = query.split_at(query.find('#').unwrap_or(query.len()));
        let masked: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !v.is_empty() && SECRET_QUERY_KEYS.contains(&k.to_ascii_lowercase().as_str()) => {
                    format!("{k}=***")
                }
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}{frag}", masked.join("&"));
    }
    out
}

/// The secrets in a URL, as written and percent-decoded: its password and the values of
/// its secret query parameters ([`redact_url`] masks the same).
fn url_secrets(url: &str) -> Vec<String> {
    let mut v = Vec::new();
    if url_scheme(url).is_none() {
        return v;
    }
    if let Some((start, at)) = userinfo_span(url) {
        if let Some((_, pw)) = url[start..at].split_once(':') {
            v.push(pw.to_string());
        }
    }
    if let Some(q) = url.find('?') {
        let query = &url[q + 1..];
        let query = &query[..query.find('#').unwrap_or(query.len())];
        for kv in query.split('&') {
            if let Some((k, val)) = kv.split_once('=') {
                if SECRET_QUERY_KEYS.contains(&k.to_ascii_lowercase().as_str()) {
                    v.push(val.to_string());
                }
            }
        }
    }
    let decoded: Vec<String> = v.iter().map(|s| percent_decode(s)).collect();
    v.extend(decoded);
    v.retain(|s| !s.is_empty());
    // Longest first, so a secret that contains another is masked whole.
    v.sort_by_key(|s| std::cmp::Reverse(s.len()));
    v.dedup();
    v
}

/// `%XX` decoded (invalid escapes kept as written; bytes that are not UTF-8 replaced).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` (a tool's stderr, an error chain) with `url` shown redacted and each of its
/// secrets (the password and secret query values, as written and percent-decoded) replaced
/// by `***` wherever they appear, so a message about the URL can be quoted safely.
pub(crate) fn scrub_secrets(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact_url(url));
    for secret in url_secrets(url) {
        out = out.replace(&secret, "***");
    }
    out
}

/// Opens the source a spec names.
///
/// `fps_override` (from `--fps`, frames per second) replaces the source's nominal rate in
/// its [`SourceInfo`](super::SourceInfo). `Auto` opens the bundled clip found by
/// [`find_data_file`](zcpipe_core::data::find_data_file). `V4l2` is an error here: a camera fills its own buffers, so the
/// capture stage drives it with [`super::v4l2::V4l2Capture`] instead of a [`FrameSource`].
///
/// `record`: the camera's link to the recorder; a compressed file's packets go to it.
pub(crate) fn open_source(
    spec: &SourceSpec,
    fps_override: Option<f64>,
    record: Option<&super::record::Recording>,
) -> anyhow::Result<Box<dyn FrameSource>> {
    if let Some(fps) = fps_override {
        check_fps(fps)?;
    }
    Ok(match spec {
        SourceSpec::Auto => {
            let clip = zcpipe_core::data::find_data_file(BUNDLED_CLIP).with_context(|| {
                format!(
                    "source auto: bundled clip {BUNDLED_CLIP} not found (looked in the current directory, \
                     $ZCPIPE_DATA_DIR, the executable's directory and its ancestors, {}, and {}/tests/data); \
                     set ZCPIPE_DATA_DIR or pass --source video:PATH or testsrc",
                    zcpipe_core::data::INSTALLED_DATA_DIR,
                    zcpipe_core::data::source_root().display()
                )
            })?;
            Box::new(VideoSource::open(&clip, fps_override, record)?)
        }
        SourceSpec::Image(p) => Box::new(ImageSource::open(p, fps_override)?),
        SourceSpec::Video(p) => Box::new(VideoSource::open(p, fps_override, record)?),
        SourceSpec::TestSrc { width, height, fps } => {
            Box::new(TestSource::new(*width, *height, fps_override.unwrap_or(*fps))?)
        }
        SourceSpec::V4l2(dev) => bail!(
            "source {}: a V4L2 camera is not a host frame source; the capture stage opens it with capture::v4l2::V4l2Capture",
            SourceSpec::V4l2(dev.clone())
        ),
        SourceSpec::Network(url) => bail!(
            "source {}: a network stream is live; the capture stage opens it with capture::network::NetworkSource",
            redact_url(url)
        ),
    })
}

/// Frame rates zcpipe paces or asks for, in frames per second: 0.01 to 1000, or [`FPS_MAX`].
pub(crate) const FPS_RANGE: std::ops::RangeInclusive<f64> = 0.01..=1000.0;

/// `--fps max` / `testsrc:WxH@max`: unpaced, as fast as the pipeline takes frames (a host
/// source only; a test pattern renders each pool buffer once and then reuses it, so the
/// source costs nothing). Kept as infinity; offered downstream as 0 (no nominal rate).
pub const FPS_MAX: f64 = f64::INFINITY;

/// Parses a frame rate as `--fps` and `testsrc:...@FPS` spell it: a number of frames per
/// second, or `max` ([`FPS_MAX`]); [`check_fps`] checks the range.
pub fn parse_fps(s: &str) -> Result<f64, String> {
    if s == "max" {
        return Ok(FPS_MAX);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err(format!("fps \"{s}\" is not a number (or max)")),
    }
}

/// Spells a frame rate as [`parse_fps`] reads it (`max` for [`FPS_MAX`]).
pub fn fps_name(fps: f64) -> String {
    if fps == FPS_MAX {
        "max".into()
    } else {
        fps.to_string()
    }
}

/// Checks a frame rate given with `--fps` (or in `testsrc:...@FPS`): within [`FPS_RANGE`],
/// or [`FPS_MAX`].
pub fn check_fps(fps: f64) -> anyhow::Result<()> {
    if fps != FPS_MAX && !FPS_RANGE.contains(&fps) {
        bail!("--fps {fps}: use a frame rate from 0.01 to 1000 frames per second, or max (unpaced, host sources)");
    }
    Ok(())
}

/// The V4L2-only flags (`--format`, `--size`, `--capture-io`) are refused for a host
/// source (`image:`, `video:`, `testsrc`), which sets its own format and size. A network
/// stream takes `--size` (the largest frame its pool holds) but not the other two.
pub fn check_v4l2_only_flags(spec: &SourceSpec, format: bool, size: bool, capture_io: bool) -> anyhow::Result<()> {
    if matches!(spec, SourceSpec::V4l2(_) | SourceSpec::Auto) {
        return Ok(());
    }
    if spec.is_network() {
        for (flag, given) in [("--format", format), ("--capture-io", capture_io)] {
            if given {
                bail!(
                    "{flag} applies to V4L2 cameras only; the network stream {} is decoded by ffmpeg to NV12",
                    spec.redacted()
                );
            }
        }
        return Ok(());
    }
    let own = match spec {
        SourceSpec::TestSrc { .. } => "its own format and size (NV12; testsrc:WxH@FPS for another size)",
        _ => "its own format and size (NV12 at the file's size)",
    };
    for (flag, given) in [("--format", format), ("--size", size), ("--capture-io", capture_io)] {
        if given {
            bail!(
                "{flag} applies to V4L2 cameras only (--source v4l2[:DEVICE]); source {} sets {own}",
                spec.redacted()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> SourceSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn spec_parses_every_accepted_form() {
        assert_eq!(parse("auto"), SourceSpec::Auto);
        assert_eq!(parse("image:tests/data/dog.jpg"), SourceSpec::Image("tests/data/dog.jpg".into()));
        assert_eq!(parse("image:/a:b/c.png"), SourceSpec::Image("/a:b/c.png".into()));
        assert_eq!(parse("video:clip.mp4"), SourceSpec::Video("clip.mp4".into()));
        assert_eq!(parse("testsrc"), SourceSpec::TestSrc { width: 1280, height: 720, fps: 30.0 });
        assert_eq!(parse("testsrc:1920x1080"), SourceSpec::TestSrc { width: 1920, height: 1080, fps: 30.0 });
        assert_eq!(parse("testsrc:451x301@12.5"), SourceSpec::TestSrc { width: 451, height: 301, fps: 12.5 });
        assert_eq!(parse("testsrc:64x48@max"), SourceSpec::TestSrc { width: 64, height: 48, fps: FPS_MAX });
        assert_eq!(parse("v4l2"), SourceSpec::V4l2(None));
        assert_eq!(parse("v4l2:/dev/video0"), SourceSpec::V4l2(Some("/dev/video0".into())));
    }

    #[test]
    fn spec_display_round_trips() {
        for s in [
            "auto",
            "image:x.png",
            "video:a/b.mp4",
            "testsrc:640x480@15",
            "testsrc:64x48@max",
            "v4l2",
            "v4l2:/dev/video3",
        ] {
            assert_eq!(parse(s).to_string(), s);
            assert_eq!(parse(&parse(s).to_string()), parse(s));
        }
    }

    #[test]
    fn spec_rejects_bad_text_naming_it() {
        for bad in [
            "",
            "camera",
            "auto:x",
            "image",
            "image:",
            "video:",
            "testsrc:1920",
            "testsrc:0x10",
            "testsrc:20000x10",
            "testsrc:axb",
            "testsrc:64x48@0",
            "testsrc:64x48@fast",
            "testsrc:64x48@-5",
            "testsrc:64x48@inf",
            "testsrc:64x48@NaN",
            "testsrc:64x48@MAX",
            "v4l2:",
            "TESTSRC",
        ] {
            let e = bad.parse::<SourceSpec>().expect_err(bad);
            let msg = e.to_string();
            println!("{msg}");
            assert!(msg.contains(&format!("\"{bad}\"")), "{msg}");
            assert!(msg.contains(ACCEPTED_FORMS), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn network_urls_parse_as_network_sources() {
        for u in [
            "rtsp://127.0.0.1:8554/cam",
            "rtsps://user:pw@cam.local/stream1",
            "http://10.0.0.2/mjpeg",
            "https://example.org/live/index.m3u8?token=abc",
            "rtmp://host/app/key",
            "srt://host:9000",
        ] {
            assert_eq!(parse(u), SourceSpec::Network(u.to_string()));
            // Display keeps the URL whole (it is what the capture stage process is given).
            assert_eq!(parse(u).to_string(), u);
            assert!(parse(u).is_network());
        }
        assert!(!parse("image:/a//b.png").is_network());
        assert_eq!(parse("image://x"), SourceSpec::Image("//x".into()));
        for bad in ["rtsp://", "rtsp:///path", "rtsp://user:pw@/x", "rtsp://host/a b"] {
            let e = bad.parse::<SourceSpec>().expect_err(bad).to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(!e.contains("pw@"), "{e}");
        }
        let e = "rtsp://u:topsecret@/x".parse::<SourceSpec>().unwrap_err().to_string();
        assert!(e.contains("rtsp://u:***@/x") && !e.contains("topsecret"), "{e}");
        let d = format!("{:?}", parse("rtsp://u:topsecret@cam/x"));
        assert_eq!(d, "Network(\"rtsp://u:***@cam/x\")");
    }

    #[test]
    fn a_password_with_a_raw_hash_or_question_mark_is_masked_whole() {
        assert_eq!(redact_url("rtsp://viewer:S3c#retPw@h:554/cam"), "rtsp://viewer:***@h:554/cam");
        assert_eq!(redact_url("rtsp://viewer:S3c?retPw@h/cam"), "rtsp://viewer:***@h/cam");
        let text = "cannot open rtsp://viewer:S3c#retPw@h:554/cam: S3c#retPw";
        assert_eq!(
            scrub_secrets(text, "rtsp://viewer:S3c#retPw@h:554/cam"),
            "cannot open rtsp://viewer:***@h:554/cam: ***"
        );
    }

    #[test]
    fn redact_url_masks_passwords_only() {
        let cases = [
            // user:pass
            ("rtsp://admin:hunter2@192.168.1.10:554/stream1", "rtsp://admin:***@192.168.1.10:554/stream1"),
            // user only: nothing secret
            ("rtsp://admin@cam/stream", "rtsp://admin@cam/stream"),
            // no credentials
            ("rtsp://127.0.0.1:8554/cam", "rtsp://127.0.0.1:8554/cam"),
            ("http://host/path@v2", "http://host/path@v2"),
            // a password with '@' and ':' (ffmpeg splits at the last '@' of the authority)
            ("rtsp://admin:p@ss:w@rd@cam:554/s", "rtsp://admin:***@cam:554/s"),
            // an empty password
            ("rtsp://admin:@cam/s", "rtsp://admin:***@cam/s"),
            // percent-encoded
            ("rtsp://ad%40min:p%40ss%3Aw@cam/s", "rtsp://ad%40min:***@cam/s"),
            // a password with an unencoded '/': still masked whole
            ("rtsp://admin:pa/ss@cam/s", "rtsp://admin:***@cam/s"),
            // secret query parameters
            (
                "rtsp://cam/cam/realmonitor?channel=1&user=admin&password=hunter2",
                "rtsp://cam/cam/realmonitor?channel=1&user=admin&password=***",
            ),
            ("https://h/live.m3u8?Token=abc#t", "https://h/live.m3u8?Token=***#t"),
            // not a URL
            ("video:clip.mp4", "video:clip.mp4"),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
            assert_eq!(url.parse::<SourceSpec>().map(|s| s.redacted()).unwrap_or_else(|_| redact_url(url)), want);
        }
    }

    #[test]
    fn scrub_secrets_removes_the_password_in_any_spelling() {
        let url = "rtsp://admin:p%40ss%3Aword@cam:554/s";
        let text = format!("[rtsp @ 0x5] {url}: 401 Unauthorized | user admin pass p@ss:word | raw p%40ss%3Aword");
        let s = scrub_secrets(&text, url);
        assert_eq!(s, "[rtsp @ 0x5] rtsp://admin:***@cam:554/s: 401 Unauthorized | user admin pass *** | raw ***");
        assert_eq!(scrub_secrets("no secret here", "rtsp://cam/s"), "no secret here");
        let q = "rtsp://cam/s?password=abc123&channel=1";
        assert_eq!(
            scrub_secrets("opening rtsp://cam/s?password=abc123&channel=1 with abc123", q),
            "opening rtsp://cam/s?password=***&channel=1 with ***"
        );
    }

    #[test]
    fn open_source_leaves_v4l2_to_the_capture_stage() {
        let e = open_source(&SourceSpec::V4l2(None), None, None).err().expect("error");
        assert!(e.to_string().contains("V4l2Capture"), "{e}");
    }

    #[test]
    fn open_source_testsrc_honours_fps_override() {
        let s = open_source(&parse("testsrc:64x48@5"), Some(12.0), None).unwrap();
        assert_eq!((s.info().max_width, s.info().max_height, s.info().fps), (64, 48, 12.0));
        assert!(open_source(&parse("testsrc"), Some(0.0), None).is_err());
        let s = open_source(&parse("testsrc:64x48"), Some(FPS_MAX), None).unwrap();
        assert!(s.reusable() && s.info().description.ends_with("@maxfps"), "{}", s.info().description);
    }

    #[test]
    fn fps_spellings() {
        assert_eq!(parse_fps("max"), Ok(FPS_MAX));
        assert_eq!(parse_fps("12.5"), Ok(12.5));
        for bad in ["inf", "NaN", "fast", ""] {
            assert!(parse_fps(bad).unwrap_err().contains("or max"), "{bad}");
        }
        assert_eq!((fps_name(FPS_MAX), fps_name(30.0)), ("max".to_string(), "30".to_string()));
        assert!(check_fps(FPS_MAX).is_ok() && check_fps(1000.0).is_ok());
        assert!(check_fps(1000.5).unwrap_err().to_string().contains("or max"));
    }

    #[test]
    fn open_source_auto_opens_bundled_clip() {
        let s = open_source(&SourceSpec::Auto, None, None).unwrap();
        assert_eq!((s.info().max_width, s.info().max_height), (768, 432));
        assert_eq!(s.info().fps, 10.0);
    }
}
