//! `zcpipe fleet`'s command line, turned into [`FleetConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use zcpipe_core::secret::Secret;
use zcpipe_publish::fleet::state::Limits;
use zcpipe_publish::fleet::{self, FleetConfig};
use zcpipe_publish::mqtt::{check_prefix, level, BrokerUrl};

use super::mqtt::PASSWORD_ENV;

/// `zcpipe fleet`.
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// The broker every board's messages reach: mqtt://[user@]host[:port] or mqtts://...;
    /// the password in $ZCPIPE_MQTT_PASSWORD (or in the URL, which then shows in ps).
    #[arg(long, value_name = "URL")]
    pub broker: String,
    /// Serve the fleet page, /api/fleet and /metrics here (port 0: any free port, logged).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8090")]
    pub http: SocketAddr,
    /// Allow a --http address other than loopback (the page has no login: it shows every
    /// board's events).
    #[arg(long)]
    pub http_allow_remote: bool,
    /// The boards' topic root: each board publishes under ROOT/<board id> (ROOT is
    /// zcpipe-<instance> for boards run with another --instance).
    #[arg(long, value_name = "ROOT", default_value = "zcpipe")]
    pub root: String,
    /// PEM file of CA certificates to trust for mqtts:// (besides the built-in public roots).
    #[arg(long, value_name = "FILE")]
    pub mqtt_ca: Option<PathBuf>,
    /// MQTT client id (default zcpipe-fleet-<hostname>).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// The most boards kept (1 to 100000); messages of more are refused, one line each.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_boards: u32,
    /// Print a Prometheus scrape configuration of the boards' web views (from their
    /// retained status, read for --wait seconds) and exit.
    #[arg(long)]
    pub prometheus_config: bool,
    /// With --prometheus-config: seconds to read the boards' retained status (1 to 60).
    #[arg(long, value_name = "SECONDS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub wait: u64,
}

impl FleetArgs {
    /// The checked configuration. Errors (one line, no password): a bad URL, root, client
    /// id or CA file.
    pub fn config(&self) -> Result<FleetConfig> {
        let mut broker = BrokerUrl::parse(&self.broker)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().replacen("--mqtt", "--broker", 1)))?;
        if broker.user.is_some() && broker.password.is_none() {
            broker.password = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()).map(Secret::new);
        }
        check_prefix("--root", &self.root)?;
        let client_id = self.client_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("zcpipe-fleet-{}", level(host.trim()))
        });
        if client_id.is_empty() || client_id.len() > 128 || !client_id.bytes().all(|b| b.is_ascii_graphic()) {
            anyhow::bail!("--client-id {client_id:?}: use 1 to 128 printable ASCII characters without spaces");
        }
        if let Some(ca) = self.mqtt_ca.as_ref().filter(|c| !c.is_file()) {
            anyhow::bail!("--mqtt-ca {}: no such file; give a PEM file of CA certificates", ca.display());
        }
        if !self.http.ip().is_loopback() && !self.http_allow_remote {
            anyhow::bail!(
                "--http {}: not a loopback address, so other machines could read every board's events (the page has no login): add --http-allow-remote if that is meant, or use 127.0.0.1:{}",
                self.http,
                self.http.port()
            );
        }
        Ok(FleetConfig {
            broker,
            ca_file: self.mqtt_ca.clone(),
            client_id,
            root: self.root.clone(),
            http: (!self.prometheus_config).then_some(self.http),
            limits: Limits { max_boards: self.max_boards as usize, ..Limits::default() },
        })
    }

    /// Runs `zcpipe fleet` until `stop` (or prints the scrape configuration).
    pub fn run(&self, stop: &AtomicBool) -> Result<i32> {
        let cfg = self.config()?;
        if self.prometheus_config {
            let f = fleet::snapshot(&cfg, Duration::from_secs(self.wait))?;
            print!("{}", fleet::page::scrape_config(&f));
            return Ok(0);
        }
        let listener = match cfg.http {
            Some(a) => Some(std::net::TcpListener::bind(a).map_err(|e| match e.kind() {
                std::io::ErrorKind::AddrInUse => anyhow::anyhow!("--http {a}: address in use: pick another port"),
                _ => anyhow::anyhow!("--http {a}: cannot listen there: {e}"),
            })?),
            None => None,
        };
        fleet::run(cfg, listener, stop)?;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        f: FleetArgs,
    }

    #[test]
    fn bad_values_are_one_line_without_the_password() {
        for (args, says) in [
            (&["--broker", "http://u:hunter2@h"][..], "--broker http://u:***@h: scheme http:// is not MQTT"),
            (&["--broker", "mqtt://h", "--root", "a/+"], "--root \"a/+\": give topic levels"),
            (&["--broker", "mqtt://h", "--http", "0.0.0.0:80"], "--http 0.0.0.0:80: not a loopback address"),
            (&["--broker", "mqtt://h", "--mqtt-ca", "/nonexistent.pem"], "--mqtt-ca /nonexistent.pem: no such file"),
        ] {
            let a = T::parse_from(std::iter::once(&"t").chain(args)).f;
            let e = format!("{:#}", a.config().unwrap_err());
            assert!(e.starts_with(says), "{args:?}: {e}");
            assert!(!e.contains("hunter2") && !e.contains('\n'), "{e}");
        }
        let c = T::parse_from(["t", "--broker", "mqtt://fleet.lan", "--max-boards", "5"]).f.config().unwrap();
        assert_eq!((c.broker.port, c.root.as_str(), c.limits.max_boards), (1883, "zcpipe", 5));
        assert_eq!(c.http, Some("127.0.0.1:8090".parse().unwrap()));
    }
}
