//! `--http`, `--http-allow-remote` and `--view-fps` (`zcpipe run`, `zcpipe stage publish`),
//! and their checked form, [`zcpipe_publish::http::HttpConfig`].

use std::net::SocketAddr;

use anyhow::Result;
use clap::Args;

use zcpipe_publish::http::{check_remote, HttpConfig, DEFAULT_MAX_CONNECTIONS};

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
        };
        zcpipe_publish::http::bind(&cfg).map(drop)
    }

    /// For the plan: `web view http://127.0.0.1:8080/ (pictures at most 5 a second per camera)`;
    /// `None` without `--http`.
    pub fn describe(&self) -> Option<String> {
        let a = self.http?;
        let reach = if a.ip().is_loopback() { "" } else { ", reachable from other machines" };
        Some(format!("web view http://{a}/ (pictures at most {} a second per camera{reach})", self.view_fps))
    }

    /// The same options as flags, for a stage's command line.
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
}
