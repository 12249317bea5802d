//! `zcpipe fleet`: one view of many boards, from the broker they all reach.
//!
//! It subscribes (QoS 1) under the boards' topic root `R` (`--root`, default `zcpipe`) to
//! `R/+/status` and `R/status` (each board's retained [`BoardStatus`]), `R/+/available` and
//! `R/available` (`online`/`offline`, the last will), `R/+/bridge` (a mosquitto bridge's
//! notification, `1`/`0`, where the bridge is set to send it there) and `R/+/+/events`,
//! `R/+/events` (each event, taken once by its id). What it keeps ([`state::Fleet`]) is
//! what the retained messages rebuild, plus a bounded list of recent events and the ids
//! already seen; every bound is checked before anything is kept. A message it does not take
//! is one line in the log, and nothing stops.
//!
//! It serves ([`page`]) one HTML page of every board, `/api/fleet` (JSON) and a fleet-wide
//! `/metrics` (Prometheus text), and writes a Prometheus scrape configuration of the boards'
//! own web views ([`page::scrape_config`]).

pub mod page;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use rumqttc::{Client, ConnectReturnCode, ConnectionError, Event, Packet, QoS};

use crate::mqtt::BrokerUrl;
use state::{Fleet, Limits, Notice};

/// What `zcpipe fleet` is asked to do.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// The broker the boards' messages reach.
    pub broker: BrokerUrl,
    /// A PEM file of CA certificates for `mqtts://`.
    pub ca_file: Option<PathBuf>,
    /// Its MQTT client id.
    pub client_id: String,
    /// The boards' topic root (`R`).
    pub root: String,
    /// Where to serve the page (`None`: no page, as for `--prometheus-config`).
    pub http: Option<SocketAddr>,
    /// The bounds of its state.
    pub limits: Limits,
}

/// The fleet's state as the page and the MQTT thread share it.
pub(crate) type Shared = Arc<Mutex<Fleet>>;

pub(crate) fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Fleet> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the fleet view until `stop`: the page on `cfg.http` (already bound: `listener`),
/// the broker's messages into the state. Errors: TLS that cannot be set up, a runtime or
/// thread that cannot start. A broker that is away or refuses is said and retried.
pub fn run(cfg: FleetConfig, listener: Option<std::net::TcpListener>, stop: &AtomicBool) -> Result<()> {
    let shared: Shared = Arc::new(Mutex::new(Fleet::new(cfg.limits)));
    let _rt = match listener {
        Some(l) => {
            log::info!("the page on http://{}/ (/api/fleet, /metrics)", l.local_addr()?);
            Some(page::serve(shared.clone(), l)?)
        }
        None => None,
    };
    subscribe(&cfg, &shared, stop, None)
}

/// Reads the retained messages for `wait` and returns the fleet they make (for
/// `--prometheus-config`).
pub fn snapshot(cfg: &FleetConfig, wait: Duration) -> Result<Fleet> {
    let shared: Shared = Arc::new(Mutex::new(Fleet::new(cfg.limits)));
    let stop = AtomicBool::new(false);
    subscribe(cfg, &shared, &stop, Some(Instant::now() + wait))?;
    let fleet = std::mem::replace(&mut *lock(&shared), Fleet::new(cfg.limits));
    Ok(fleet)
}

/// The topics of root `r`.
fn topics(r: &str) -> Vec<String> {
    ["+/status", "status", "+/available", "available", "+/bridge", "+/+/events", "+/events"]
        .iter()
        .map(|t| format!("{r}/{t}"))
        .collect()
}

/// What a topic under the root is, with the board level of its topic when it has one.
#[derive(Debug, PartialEq, Eq)]
enum Topic<'a> {
    Status(Option<&'a str>),
    Available(Option<&'a str>),
    Bridge(&'a str),
    Events(Option<&'a str>),
    Other,
}

fn classify<'a>(root: &str, topic: &'a str) -> Topic<'a> {
    let Some(rest) = topic.strip_prefix(root).and_then(|r| r.strip_prefix('/')) else { return Topic::Other };
    let levels: Vec<&str> = rest.split('/').collect();
    match levels[..] {
        ["status"] => Topic::Status(None),
        [b, "status"] => Topic::Status(Some(b)),
        ["available"] => Topic::Available(None),
        [b, "available"] => Topic::Available(Some(b)),
        [b, "bridge"] => Topic::Bridge(b),
        [_, "events"] => Topic::Events(None),
        [b, _, "events"] => Topic::Events(Some(b)),
        _ => Topic::Other,
    }
}

/// Says `line` at most at the first time and each power of two of `n`.
fn say(n: u64, line: impl std::fmt::Display) {
    if n.is_power_of_two() {
        if n == 1 {
            log::warn!("{line}");
        } else {
            log::warn!("{line} ({n} such so far)");
        }
    }
}

/// The board of a prefix-less root's `available` (the boards without `--board-id` publish
/// `R/available`): the one board whose status names the root itself as its prefix.
fn board_of_root(f: &Fleet, root: &str) -> Option<String> {
    let mut b = f.boards().values().filter(|b| b.status.as_ref().is_some_and(|s| s.prefix == root));
    let one = b.next()?;
    b.next().is_none().then(|| one.id.clone())
}

/// One message from the broker into the state; what it says goes to the log.
fn take(root: &str, shared: &Shared, topic: &str, payload: &[u8]) {
    let mut f = lock(shared);
    let word = || std::str::from_utf8(payload).unwrap_or("").trim().to_string();
    let result = match classify(root, topic) {
        Topic::Status(b) => f.status(topic, b, payload, Instant::now()).map(|n| n.into_iter().collect::<Vec<_>>()),
        Topic::Events(b) => f.event(topic, b, payload).map(|(_, n)| n.into_iter().collect()),
        Topic::Available(b) => {
            let board = b.map(str::to_string).or_else(|| board_of_root(&f, root));
            match (board, word().as_str()) {
                (Some(b), w @ ("online" | "offline")) => f.available(topic, &b, w == "online").map(|_| vec![]),
                (None, _) => Ok(vec![]),
                (Some(_), w) => {
                    let n = f.rejected.entry("malformed").and_modify(|n| *n += 1).or_insert(1);
                    say(*n, format_args!("{topic}: {w:?} is not online or offline: not taken"));
                    Ok(vec![])
                }
            }
        }
        Topic::Bridge(b) => match word().as_str() {
            w @ ("0" | "1") => f.bridge(topic, b, w == "1").map(|n| n.into_iter().collect()),
            w => {
                let n = f.rejected.entry("malformed").and_modify(|n| *n += 1).or_insert(1);
                say(*n, format_args!("{topic}: {w:?} is not a bridge's 0 or 1: not taken"));
                Ok(vec![])
            }
        },
        Topic::Other => Ok(vec![]),
    };
    match result {
        Ok(notices) => {
            for n in notices {
                match n {
                    Notice::Clash { board, sessions } => log::warn!(
                        "two boards use the id {board} (sessions {} and {} both publish): give each board its own --board-id",
                        sessions.0,
                        sessions.1
                    ),
                    Notice::Bridge { board, up: false } => log::warn!(
                        "board {board}: its bridge to this broker is down: its events wait on the board until it is back; if it stays down, the board's mosquitto log (journalctl -u mosquitto) says why (a login or certificate the centre refuses, the network)"
                    ),
                    Notice::Bridge { board, up: true } => log::info!("board {board}: its bridge is back"),
                    Notice::Unknown { board } => log::info!(
                        "events from board {board}, which has sent no status yet (its status comes with its stats, every --mqtt-stats-interval)"
                    ),
                }
            }
        }
        Err(r) => {
            let n = f.rejected.get(r.reason()).copied().unwrap_or(1);
            say(n, r);
        }
    }
}

/// One line for a connection error: what it means and what to do (never the password).
fn explain(broker: &BrokerUrl, e: &ConnectionError) -> String {
    match e {
        ConnectionError::ConnectionRefused(ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized) => format!(
            "the broker {} refused the credentials{}: fix the user in --broker and the password in $ZCPIPE_MQTT_PASSWORD; retrying",
            broker.address(),
            broker.user.as_ref().map(|u| format!(" of user {u}")).unwrap_or_else(|| " (none given: the broker wants a user)".into()),
        ),
        e => format!("cannot reach the broker {} ({e}); retrying every {} s", broker.address(), crate::mqtt::bridge::BACKOFF_MAX.as_secs()),
    }
}

/// Subscribes and takes messages until `stop` (or `until`).
fn subscribe(cfg: &FleetConfig, shared: &Shared, stop: &AtomicBool, until: Option<Instant>) -> Result<()> {
    let mut opts = crate::mqtt::bridge::base_options(&cfg.broker, &cfg.client_id, cfg.ca_file.as_deref())?;
    opts.set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut conn) = Client::new(opts, 64);
    let mut said: Option<String> = None;
    let done = || stop.load(Ordering::Relaxed) || until.is_some_and(|u| Instant::now() >= u);
    while !done() {
        match conn.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                log::info!("connected to {}, reading {}/...", cfg.broker.describe(), cfg.root);
                said = None;
                for t in topics(&cfg.root) {
                    client.try_subscribe(t, QoS::AtLeastOnce)?;
                }
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) => take(&cfg.root, shared, &p.topic, &p.payload),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let line = explain(&cfg.broker, &e);
                if said.as_deref() != Some(line.as_str()) {
                    log::warn!("{line}");
                    said = Some(line);
                }
                let until = Instant::now() + crate::mqtt::bridge::BACKOFF_MAX.min(Duration::from_secs(2));
                while Instant::now() < until && !done() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Err(_) => {}
        }
    }
    let _ = client.try_disconnect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_under_the_root_name_their_board() {
        for (t, want) in [
            ("zc/b1/status", Topic::Status(Some("b1"))),
            ("zc/status", Topic::Status(None)),
            ("zc/b1/available", Topic::Available(Some("b1"))),
            ("zc/available", Topic::Available(None)),
            ("zc/b1/bridge", Topic::Bridge("b1")),
            ("zc/b1/cam0/events", Topic::Events(Some("b1"))),
            ("zc/cam0/events", Topic::Events(None)),
            ("zc/b1/cam0/person", Topic::Other),
            ("other/b1/status", Topic::Other),
        ] {
            assert_eq!(classify("zc", t), want, "{t}");
        }
        assert_eq!(topics("zc").len(), 7);
    }
}
