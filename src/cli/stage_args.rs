//! A stage's options from its supervisor, out of sight. Every local user can read any
//! process's command line (`/proc/PID/cmdline`, `ps -eo args`), and one argument may be at
//! most 128 KiB (execve(2), `MAX_ARG_STRLEN`), so `zcpipe run` gives each stage only what
//! tells the processes apart on its command line (`--instance`, `--run-dir`, `--camera`,
//! the report pipe) and `--args-fd=4`; the rest, a camera's URL and a zone's ten thousand
//! points alike, is a [`StageArgs`] in a sealed memfd at fd [`ARGS_FD`], which only the
//! stage holds. The stage reads it back ([`expand`]) into the argument list clap parses,
//! so a stage started by hand or by a systemd unit takes the same options on its command
//! line.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use anyhow::{anyhow, Context, Result};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use serde::{Deserialize, Serialize};

/// The fd number a stage finds its options at (the report socket is at 3).
pub const ARGS_FD: i32 = 4;
/// The version of [`StageArgs`] this build writes and reads.
pub const VERSION: u32 = 1;
/// The largest options a stage reads, in bytes (checked before anything is allocated).
const MAX_BYTES: u64 = 16 << 20;
/// The options that stay on a stage's command line: none is secret, and they are what
/// `ps` and the tests tell stage processes apart by.
const VISIBLE: [&str; 4] = ["--instance=", "--run-dir=", "--camera=", "--report-fd="];
/// The seals that make the memfd's contents final: a stage reads what its supervisor wrote.
fn final_seals() -> SealFlag {
    SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// A stage's options as its supervisor hands them over (JSON in the memfd).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageArgs {
    /// [`VERSION`].
    pub version: u32,
    /// The stage's role (`capture`, `scale`, `infer`, `publish`, `display`): a memfd meant
    /// for one stage is refused by another.
    pub stage: String,
    /// The options, each `--key=value` or `--switch`, as on a command line.
    pub args: Vec<String>,
}

/// Splits the options `args` of stage `stage` into those that stay on its command line and
/// the [`StageArgs`] that go through the memfd.
pub fn split(stage: &str, args: &[String]) -> (Vec<String>, StageArgs) {
    let (visible, hidden): (Vec<String>, Vec<String>) =
        args.iter().cloned().partition(|a| VISIBLE.iter().any(|v| a.starts_with(v)));
    (visible, StageArgs { version: VERSION, stage: stage.to_string(), args: hidden })
}

/// `flags` as they may be shown (a log line, compare's table): each `--source=` URL with its
/// password masked.
pub fn shown(flags: &[String]) -> Vec<String> {
    flags
        .iter()
        .map(|f| match f.strip_prefix("--source=") {
            Some(u) => format!("--source={}", zcpipe_capture::spec::redact_url(u)),
            None => f.clone(),
        })
        .collect()
}

/// A memfd holding `a` as JSON, sealed so that nothing can change it (`F_SEAL_WRITE`,
/// `SHRINK`, `GROW`, `SEAL`), close-on-exec (the supervisor's `pre_exec` moves it to
/// [`ARGS_FD`] for the stage alone).
pub fn sealed(a: &StageArgs) -> Result<OwnedFd> {
    let json = serde_json::to_vec(a).context("encoding a stage's options")?;
    let fd = nix::sys::memfd::memfd_create(
        c"zcpipe-stage-args",
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC | nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING,
    )
    .map_err(|e| anyhow!("memfd_create for a stage's options: {e}"))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(&json).context("writing a stage's options to its memfd")?;
    let fd = OwnedFd::from(f);
    fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(final_seals()))
        .map_err(|e| anyhow!("sealing a stage's options: {e}"))?;
    Ok(fd)
}

/// A `zcpipe stage ROLE ... --args-fd=N ...` (or `zcpipe run ... --args-fd=N ...`) command
/// line with the options of fd N put in place of `--args-fd=N` (after the role or `run`,
/// before the visible options); any other command line as it is. Errors are one line: the
/// fd is missing or not a sealed memfd, its options are too big, of another version or for
/// another stage.
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(at) = argv.iter().position(|a| a.to_str().is_some_and(|s| s.starts_with("--args-fd="))) else {
        return Ok(argv);
    };
    // `zcpipe stage ROLE ...` (as `zcpipe run` starts it) or `zcpipe run ...` (as `zcpipe
    // compare` does): the options go after the role, or after `run`.
    let (role, head) = match argv.get(1).and_then(|a| a.to_str()) {
        Some("stage") => (argv.get(2).and_then(|r| r.to_str()).unwrap_or_default().to_string(), 3),
        Some("run") => ("run".to_string(), 2),
        _ => (String::new(), usize::MAX),
    };
    if at < head {
        return Err("--args-fd is for `zcpipe stage ROLE` and `zcpipe run`, as zcpipe starts them".into());
    }
    let n: i32 = argv[at]
        .to_str()
        .and_then(|s| s["--args-fd=".len()..].parse().ok())
        .filter(|&n| n > 2)
        .ok_or("--args-fd: give the number of an inherited fd above 2 (as `zcpipe run` does)")?;
    let a = read(n).map_err(|e| format!("--args-fd={n}: {e:#}"))?;
    if a.stage != role {
        return Err(format!(
            "--args-fd={n}: these options are for the {} stage, not {role}; start stages with `zcpipe run`",
            a.stage
        ));
    }
    let mut out: Vec<OsString> = argv[..head].to_vec();
    out.extend(a.args.into_iter().map(OsString::from));
    out.extend(argv[head..].iter().enumerate().filter(|(i, _)| i + head != at).map(|(_, a)| a.clone()));
    Ok(out)
}

/// The variable a capture stage started without `--source` takes its source from: how a
/// systemd unit gives it an IP camera's URL from a 0600 `EnvironmentFile=` without the URL
/// in the command line (a process's environment is readable by its own user alone,
/// proc(5)).
pub const SOURCE_ENV: &str = "ZCPIPE_SOURCE";

/// `argv` of `zcpipe stage capture` or `zcpipe compare` without `--source`, with
/// `--source=` the value of `source` (the [`SOURCE_ENV`] variable) added, in memory only;
/// any other `argv` as it is.
pub fn source_from_env(mut argv: Vec<OsString>, source: Option<OsString>) -> Vec<OsString> {
    // `zcpipe compare` too: it has no configuration file, and its command line is as public.
    let takes_env = argv.get(1).is_some_and(|a| a == "stage") && argv.get(2).is_some_and(|a| a == "capture")
        || argv.get(1).is_some_and(|a| a == "compare");
    let given = argv.iter().any(|a| a == "--source" || a.to_str().is_some_and(|s| s.starts_with("--source=")));
    if let (true, false, Some(v)) = (takes_env, given, source.filter(|v| !v.is_empty())) {
        let mut flag = OsString::from("--source=");
        flag.push(v);
        argv.push(flag);
    }
    argv
}

/// Reads and closes fd `n`: a memfd sealed by [`sealed`], within [`MAX_BYTES`], of
/// [`VERSION`].
fn read(n: i32) -> Result<StageArgs> {
    // Only an open fd is taken over; a number that names none is an error, not a close of
    // whatever gets that number later.
    fcntl(n, FcntlArg::F_GETFD).map_err(|e| anyhow!("no such open fd ({e}); start stages with `zcpipe run`"))?;
    // SAFETY: `n` is open (checked just above), above stdin/out/err, and nothing else in
    // this process owns it: the supervisor made it for this process alone before exec,
    // and this runs once, before any other code opens files.
    let fd = unsafe { OwnedFd::from_raw_fd(n) };
    let seals = fcntl(fd.as_raw_fd(), FcntlArg::F_GET_SEALS).map_err(|e| anyhow!("not a memfd ({e})"))?;
    if !SealFlag::from_bits_truncate(seals).contains(final_seals()) {
        anyhow::bail!("the memfd is not sealed against change; start stages with `zcpipe run`");
    }
    let f = std::fs::File::from(fd);
    let size = f.metadata().context("fstat")?.len();
    if size > MAX_BYTES {
        anyhow::bail!("{size} bytes of options, over the {MAX_BYTES}-byte limit");
    }
    let mut buf = vec![0u8; size as usize];
    f.read_exact_at(&mut buf, 0).context("reading the options")?;
    // The parser's category and place only: its message would quote the text, which may
    // be huge or hold a password.
    let a: StageArgs = serde_json::from_slice(&buf).map_err(|e| {
        anyhow!("the options are not a stage's ({:?} at line {} column {})", e.classify(), e.line(), e.column())
    })?;
    if a.version != VERSION {
        anyhow::bail!(
            "options of version {}, this zcpipe reads version {VERSION}: the supervisor and the stage are different builds",
            a.version
        );
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_options_go_through_the_memfd_and_come_back_in_place() {
        let args: Vec<String> =
            ["--run-dir=/r", "--source=rtsp://u:secret@h/x", "--instance=i", "--zone=a=1,2,3,4,5,6", "--report-fd=3"]
                .map(String::from)
                .to_vec();
        let (visible, hidden) = split("capture", &args);
        assert_eq!(visible, ["--run-dir=/r", "--instance=i", "--report-fd=3"]);
        assert_eq!(hidden.args, ["--source=rtsp://u:secret@h/x", "--zone=a=1,2,3,4,5,6"]);
        let fd = sealed(&hidden).unwrap();
        // A sealed memfd cannot be written any more.
        assert!(nix::unistd::write(&fd, b"x").is_err());
        let n = nix::unistd::dup(fd.as_raw_fd()).unwrap();
        let argv = os(&["zcpipe", "stage", "capture", "--run-dir=/r", &format!("--args-fd={n}"), "--report-fd=3"]);
        assert_eq!(
            expand(argv).unwrap(),
            os(&[
                "zcpipe",
                "stage",
                "capture",
                "--source=rtsp://u:secret@h/x",
                "--zone=a=1,2,3,4,5,6",
                "--run-dir=/r",
                "--report-fd=3"
            ])
        );
    }

    #[test]
    fn a_wrong_fd_stage_or_unsealed_file_is_one_line() {
        let other = split("publish", &["--print=json".to_string()]).1;
        let n = nix::unistd::dup(sealed(&other).unwrap().as_raw_fd()).unwrap();
        let e = expand(os(&["zcpipe", "stage", "capture", &format!("--args-fd={n}")])).unwrap_err();
        assert!(e.contains("for the publish stage, not capture"), "{e}");
        let e = expand(os(&["zcpipe", "stage", "capture", "--args-fd=999"])).unwrap_err();
        assert!(e.contains("no such open fd"), "{e}");
        let e = expand(os(&["zcpipe", "stage", "capture", "--args-fd=1"])).unwrap_err();
        assert!(e.contains("above 2"), "{e}");
        let e = expand(os(&["zcpipe", "watch", "--args-fd=5"])).unwrap_err();
        assert!(e.contains("is for `zcpipe stage ROLE` and `zcpipe run`"), "{e}");
        let run = split("run", &["--source=rtsp://u:p@h/x".to_string()]).1;
        let n = nix::unistd::dup(sealed(&run).unwrap().as_raw_fd()).unwrap();
        let got = expand(os(&["zcpipe", "run", &format!("--args-fd={n}"), "--quiet"])).unwrap();
        assert_eq!(got, os(&["zcpipe", "run", "--source=rtsp://u:p@h/x", "--quiet"]));
        let plain = std::fs::File::open("/proc/self/status").unwrap();
        let n = nix::unistd::dup(plain.as_raw_fd()).unwrap();
        let e = expand(os(&["zcpipe", "stage", "capture", &format!("--args-fd={n}")])).unwrap_err();
        assert!(e.contains("not a memfd") || e.contains("not sealed"), "{e}");
        assert_eq!(expand(os(&["zcpipe", "run", "--frames", "2"])).unwrap(), os(&["zcpipe", "run", "--frames", "2"]));
    }

    #[test]
    fn flags_are_shown_with_the_password_masked() {
        let flags = ["--source=rtsp://u:secret@h/x", "--frames=5"].map(String::from);
        assert_eq!(shown(&flags), ["--source=rtsp://u:***@h/x", "--frames=5"]);
    }

    #[test]
    fn a_capture_stage_without_source_takes_the_environments() {
        let url = Some(OsString::from("rtsp://u:p@h/x"));
        let got = source_from_env(os(&["zcpipe", "stage", "capture", "--camera=a"]), url.clone());
        assert_eq!(got, os(&["zcpipe", "stage", "capture", "--camera=a", "--source=rtsp://u:p@h/x"]));
        let given = os(&["zcpipe", "stage", "capture", "--source", "testsrc"]);
        assert_eq!(source_from_env(given.clone(), url.clone()), given);
        let compare = source_from_env(os(&["zcpipe", "compare", "--frames", "40"]), url.clone());
        assert_eq!(compare, os(&["zcpipe", "compare", "--frames", "40", "--source=rtsp://u:p@h/x"]));
        let publish = os(&["zcpipe", "stage", "publish"]);
        assert_eq!(source_from_env(publish.clone(), url), publish);
        let none = os(&["zcpipe", "stage", "capture"]);
        assert_eq!(source_from_env(none.clone(), Some(OsString::new())), none);
    }
}
