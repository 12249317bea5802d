//! `--http`, `--http-allow-remote`, `--view-fps` and `--http-token-file` (`zcpipe run`,
//! `zcpipe stage publish`), and their checked form, [`zcpipe_publish::http::HttpConfig`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;

use zcpipe_core::secret::Secret;
use zcpipe_publish::http::{check_remote, HttpConfig, DEFAULT_MAX_CONNECTIONS, MIN_TOKEN_CHARS};

/// The environment variable that gives the web view's token when `--http-token-file` is
/// not given (systemd's `EnvironmentFile=`; with `LoadCredential=`, name the credential's
/// file in `--http-token-file`). `zcpipe run` hands the token to the publish stage in it,
/// never on a command line.
pub const TOKEN_ENV: &str = "ZCPIPE_HTTP_TOKEN";

/// The longest token taken (it travels in a request head of at most 16 KiB).
const MAX_TOKEN_CHARS: usize = 4096;

/// Web view options.
#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// Serve a live web view of the cameras with their detections drawn, and
    /// /api/detections (server-sent events), /api/stats, /metrics (Prometheus) and
    /// /snapshot/<camera>.jpg, on this address (HOST:PORT, e.g. 127.0.0.1:8080; a bare
    /// PORT means 127.0.0.1:PORT; port 0: any free port, logged). Loopback only unless
    /// --http-allow-remote.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub http: Option<SocketAddr>,
    /// Let --http listen on an address other machines can reach (0.0.0.0:8080, a LAN
    /// address): the view has no login, whoever reaches the port sees the cameras.
    #[arg(long, requires = "http")]
    pub http_allow_remote: bool,
    /// The most pictures (JPEGs) a second the web view encodes per camera, for all its
    /// clients together (0.1 to 30).
    #[arg(long, default_value_t = 5.0, value_parser = view_fps, allow_negative_numbers = true)]
    pub view_fps: f64,
    /// The inference service whose numbers /metrics shows (default: npu.sock in the run
    /// directory; `zcpipe run` passes its --serve-socket).
    #[arg(long, value_name = "PATH", requires = "http")]
    pub service_socket: Option<std::path::PathBuf>,
    /// The most connections the web view holds at once (1..=4096); one more waits in the
    /// kernel's queue until one closes. Keep it under the process's fd limit (LimitNOFILE).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = max_connections)]
    pub http_max_connections: usize,
    /// The recorder's folder (its --record-dir): each clip it closes is announced (a `clip`
    /// line on the detections socket, an MQTT event with its id and URL), and with --http
    /// the page lists and plays them (/api/clips, /clips/ID.mp4 with range requests) and
    /// /metrics counts them. `zcpipe run` sets it from --record-dir.
    #[arg(long, value_name = "DIR", alias = "http-clips")]
    pub clips: Option<std::path::PathBuf>,
    /// A file holding a token (at least 16 printable characters; the file mode 0600) that
    /// lets a client change the run over HTTP: POST /api/control with `Authorization: Bearer
    /// TOKEN` takes the requests of `zcpipe ctl`. The token may instead be in
    /// $ZCPIPE_HTTP_TOKEN; with neither there is no such route. It is never shown.
    #[arg(long, value_name = "PATH", requires = "http")]
    pub http_token_file: Option<PathBuf>,
}

/// How to make a good token file at `path`.
fn make_one(path: &str) -> String {
    format!("(umask 077; head -c 32 /dev/urandom | base64 > {path})")
}

/// A good token, for the variable.
const MAKE_ONE_ENV: &str = "the output of head -c 32 /dev/urandom | base64";

/// The token in `text` (trimmed) of `what`, checked: at least [`MIN_TOKEN_CHARS`] printable
/// ASCII characters without spaces (it is sent in a header). Errors name `what` and `fix`
/// (how to make a good one), never the token.
fn check_token(what: &str, text: &str, fix: &str) -> std::result::Result<Secret, String> {
    let t = text.trim();
    if t.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "{what}: the token is shorter than {MIN_TOKEN_CHARS} characters: use a random one, e.g. {fix}"
        ));
    }
    if t.len() > MAX_TOKEN_CHARS || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(not_printable(what, fix));
    }
    Ok(Secret::new(t))
}

fn not_printable(what: &str, fix: &str) -> String {
    format!("{what}: the token must be at most {MAX_TOKEN_CHARS} printable ASCII characters without spaces (it is sent in an HTTP header): use a random one, e.g. {fix}")
}

/// The token of `--http-token-file PATH`: the file must exist, be a regular file no other
/// user may read or write (mode & 0o077 == 0) and hold a token [`check_token`] takes.
fn read_token_file(path: &Path) -> std::result::Result<Secret, String> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let p = path.display().to_string();
    let what = format!("--http-token-file {p}");
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{what}: no such file: make one, e.g. {}", make_one(&p)),
        _ => format!("{what}: cannot read it: {e}"),
    })?;
    if !meta.is_file() {
        return Err(format!("{what}: not a regular file: name the file that holds the token"));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!("{what}: other users may read or change it (mode {mode:04o}): chmod 600 {p}"));
    }
    let mut bytes = vec![];
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_CHARS as u64 + 64).read_to_end(&mut bytes))
        .map_err(|e| format!("{what}: cannot read it: {e}"))?;
    check_token(&what, &String::from_utf8_lossy(&bytes), &make_one(&p))
}

fn max_connections(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if (1..=4096).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected a number of connections from 1 to 4096")),
    }
}

/// `HOST:PORT` with an IP address (`127.0.0.1:8080`, `[::1]:8080`), `localhost:PORT`, or a
/// bare `PORT` (loopback).
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Some(port) = s.strip_prefix("localhost:").and_then(|p| p.parse::<u16>().ok()) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!("{s}: expected HOST:PORT with an IP address, such as 127.0.0.1:8080 (0.0.0.0:8080 with --http-allow-remote for every interface), or a port"))
}

fn view_fps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=30.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: expected pictures a second from 0.1 to 30")),
    }
}

impl HttpArgs {
    /// The checked configuration (`None` without `--http`). Errors: a non-loopback address
    /// without `--http-allow-remote` ([`check_remote`], an
    /// [`zcpipe_publish::http::AddrError`]: exit code 2).
    pub fn config(&self) -> Result<Option<HttpConfig>> {
        let Some(addr) = self.http else { return Ok(None) };
        let service = self.service_socket.clone();
        let cfg = HttpConfig {
            addr,
            allow_remote: self.http_allow_remote,
            view_fps: self.view_fps,
            service,
            max_connections: self.http_max_connections,
            clips: self.clips.clone(),
            token: self.token().map_err(anyhow::Error::msg)?,
        };
        check_remote(&cfg)?;
        Ok(Some(cfg))
    }

    /// Whether the web view's address can be used here now: not another machine's without
    /// `--http-allow-remote`, and free to bind. Checked before anything starts, as its own
    /// type, so a bad address is a bad argument (exit 2) as clap's are; the stage binds it
    /// again.
    pub fn check_usable(&self) -> std::result::Result<(), zcpipe_publish::http::AddrError> {
        let Some(addr) = self.http else { return Ok(()) };
        let cfg = HttpConfig {
            addr,
            allow_remote: self.http_allow_remote,
            view_fps: self.view_fps,
            service: None,
            max_connections: self.http_max_connections,
            clips: None,
            token: None,
        };
        zcpipe_publish::http::bind(&cfg).map(drop)
    }

    /// The token of `POST /api/control` (`None` without `--http`, or without a token):
    /// `--http-token-file`'s, else [`TOKEN_ENV`]'s (empty: none). Checked before anything
    /// starts, as the address is: an error is a bad argument (exit 2), one line naming the
    /// file or the variable and the fix, never the token.
    pub fn token(&self) -> std::result::Result<Option<Secret>, String> {
        if self.http.is_none() {
            return Ok(None);
        }
        if let Some(p) = &self.http_token_file {
            return read_token_file(p).map(Some);
        }
        let what = format!("${TOKEN_ENV}");
        match std::env::var(TOKEN_ENV) {
            Ok(t) if t.trim().is_empty() => Ok(None),
            Ok(t) => check_token(&what, &t, MAKE_ONE_ENV).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(not_printable(&what, MAKE_ONE_ENV)),
        }
    }

    /// The token as [`TOKEN_ENV`] for the stages' environment (the publish stage's command
    /// line never has it, nor the file's path: [`HttpArgs::flags`]); none without one.
    pub fn secret_env(&self) -> Vec<(String, String)> {
        let t = self.token().ok().flatten();
        t.map(|t| (TOKEN_ENV.to_string(), t.expose().to_string())).into_iter().collect()
    }

    /// For the plan: `web view http://127.0.0.1:8080/ (pictures at most 5 a second per camera)`;
    /// `None` without `--http`.
    pub fn describe(&self) -> Option<String> {
        let a = self.http?;
        let reach = if a.ip().is_loopback() { "" } else { ", reachable from other machines" };
        let control = match (&self.http_token_file, std::env::var_os(TOKEN_ENV).is_some_and(|t| !t.is_empty())) {
            (Some(p), _) => format!("; POST /api/control with the token of {}", p.display()),
            (None, true) => format!("; POST /api/control with the token of ${TOKEN_ENV}"),
            (None, false) => String::new(),
        };
        Some(format!("web view http://{a}/ (pictures at most {} a second per camera{reach}{control})", self.view_fps))
    }

    /// The same options as flags, for a stage's command line; the token goes in the stage's
    /// environment ([`HttpArgs::secret_env`]).
    pub fn flags(&self) -> Vec<String> {
        let Some(a) = self.http else { return vec![] };
        let mut v = vec![
            format!("--http={a}"),
            format!("--view-fps={}", self.view_fps),
            format!("--http-max-connections={}", self.http_max_connections),
        ];
        if self.http_allow_remote {
            v.push("--http-allow-remote".into());
        }
        v.extend(self.service_socket.as_ref().map(|p| format!("--service-socket={}", p.display())));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        h: HttpArgs,
    }

    #[test]
    fn addresses_flags_and_bad_values() {
        let a = T::parse_from(["t"]).h;
        assert_eq!((a.config().unwrap(), a.flags(), a.describe()), (None, vec![], None));
        let a = T::parse_from(["t", "--http", "8080"]).h;
        assert_eq!(a.http, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(T::parse_from(["t", "--http", "localhost:90"]).h.http, Some("127.0.0.1:90".parse().unwrap()));
        let a = T::parse_from(["t", "--http", "0.0.0.0:8081", "--http-allow-remote", "--view-fps", "2.5"]).h;
        let back = T::parse_from(std::iter::once("t".to_string()).chain(a.flags())).h;
        assert_eq!(back.config().unwrap(), a.config().unwrap(), "flags read back the same: {:?}", a.flags());
        assert_eq!(
            a.describe().unwrap(),
            "web view http://0.0.0.0:8081/ (pictures at most 2.5 a second per camera, reachable from other machines)"
        );
        let e = format!("{:#}", T::parse_from(["t", "--http", "0.0.0.0:8081"]).h.config().unwrap_err());
        assert!(e.contains("not a loopback address") && e.contains("--http-allow-remote"), "{e}");
        for bad in [
            &["--http", "example.com:80"][..],
            &["--http", "127.0.0.1:99999"],
            &["--view-fps", "0"],
            &["--view-fps", "-1"],
            &["--http-allow-remote"],
        ] {
            assert!(T::try_parse_from(std::iter::once(&"t").chain(bad)).is_err(), "{bad:?}");
        }
        let e = T::try_parse_from(["t", "--http", "example.com:80"]).err().unwrap().to_string();
        assert!(e.contains("expected HOST:PORT with an IP address"), "{e}");
    }

    #[test]
    fn a_token_file_is_checked_and_its_token_stays_out_of_sight() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        let p = f.display().to_string();
        let with = |f: &Path| T::parse_from(["t", "--http", "8080", "--http-token-file", f.to_str().unwrap()]).h;
        let chmod = |m: u32| std::fs::set_permissions(&f, std::fs::Permissions::from_mode(m)).unwrap();
        assert_eq!(
            with(&f).token().unwrap_err(),
            format!("--http-token-file {p}: no such file: make one, e.g. (umask 077; head -c 32 /dev/urandom | base64 > {p})")
        );
        std::fs::write(&f, "s3cret-s3cret-s3cret-42\n").unwrap();
        chmod(0o644);
        assert_eq!(
            with(&f).token().unwrap_err(),
            format!("--http-token-file {p}: other users may read or change it (mode 0644): chmod 600 {p}")
        );
        chmod(0o600);
        let a = with(&f);
        assert_eq!(a.token().unwrap().unwrap().expose(), "s3cret-s3cret-s3cret-42", "trimmed");
        assert_eq!(a.secret_env(), [(TOKEN_ENV.to_string(), "s3cret-s3cret-s3cret-42".to_string())]);
        let flags = a.flags().concat();
        assert!(!flags.contains("s3cret") && !flags.contains("token"), "neither the token nor its file: {flags}");
        assert!(!format!("{:?}", a.config().unwrap()).contains("s3cret"), "the config's Debug hides it");
        assert!(a.describe().unwrap().ends_with(&format!("; POST /api/control with the token of {p})")));
        std::fs::write(&f, "short-token\n").unwrap();
        let e = with(&f).token().unwrap_err();
        assert!(e.starts_with(&format!("--http-token-file {p}: the token is shorter than 16 characters")), "{e}");
        assert!(!e.contains("short-token"), "{e}");
        std::fs::write(&f, "a token with spaces in it").unwrap();
        assert!(with(&f).token().unwrap_err().contains("printable ASCII characters without spaces"));
        assert!(with(dir.path())
            .token()
            .unwrap_err()
            .ends_with("not a regular file: name the file that holds the token"));
        assert!(T::try_parse_from(["t", "--http-token-file", "/x"]).is_err(), "needs --http");
        let e = check_token("$ZCPIPE_HTTP_TOKEN", "0123456789abcde", MAKE_ONE_ENV).unwrap_err();
        assert_eq!(e, "$ZCPIPE_HTTP_TOKEN: the token is shorter than 16 characters: use a random one, e.g. the output of head -c 32 /dev/urandom | base64");
    }
}
