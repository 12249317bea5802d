//! `--mqtt` and the `--mqtt-*` flags (`zcpipe run`, `zcpipe stage publish`), and their
//! checked form, [`zcpipe_publish::mqtt::MqttConfig`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use zcpipe_core::secret::Secret;
use zcpipe_publish::mqtt::fleet::{board_id_from_machine_id, board_id_of, check_board_id};
use zcpipe_publish::mqtt::{check_prefix, level, BrokerUrl, MqttConfig};

/// Where the default board id comes from (the first that exists).
const MACHINE_ID: [&str; 2] = ["/etc/machine-id", "/var/lib/dbus/machine-id"];

/// The environment variable that gives the broker's password when `--mqtt` names a user
/// without one (so the password need not be on a command line: systemd's
/// `EnvironmentFile=`, a shell's `read -s`). Stage processes inherit it from `zcpipe run`.
pub const PASSWORD_ENV: &str = "ZCPIPE_MQTT_PASSWORD";

/// MQTT bridge options.
#[derive(Args, Debug, Clone, Default)]
pub struct MqttArgs {
    /// Publish detections, counts, events and stats to this MQTT broker:
    /// mqtt://[user[:password]@]host[:port] or mqtts://... (TLS). The password may instead be
    /// in $ZCPIPE_MQTT_PASSWORD. It is never shown.
    #[arg(long, value_name = "URL")]
    pub mqtt: Option<String>,
    /// MQTT client id (default zcpipe-<hostname>, plus -<instance> for another instance).
    #[arg(long, value_name = "ID", requires = "mqtt")]
    pub mqtt_client_id: Option<String>,
    /// First topic level(s) of every message but discovery's (default zcpipe, or
    /// zcpipe-<instance> for another --instance, so two instances on one broker do not mix).
    #[arg(long, value_name = "PREFIX")]
    pub mqtt_topic_prefix: Option<String>,
    /// Home Assistant's MQTT discovery prefix.
    #[arg(long, value_name = "PREFIX", default_value = "homeassistant")]
    pub mqtt_discovery_prefix: String,
    /// No Home Assistant discovery configs.
    #[arg(long)]
    pub mqtt_no_discovery: bool,
    /// QoS of every message (0, 1 or 2).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mqtt_qos: u8,
    /// QoS of the detections messages (0, 1 or 2; default --mqtt-qos). 0 with --mqtt-qos 1:
    /// a board's bridge queues events, counts and status while its uplink is down, not
    /// every frame's detections.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mqtt_detections_qos: Option<u8>,
    /// Retain the per-label count topics and stats (availability and discovery are always
    /// retained; detections and events never).
    #[arg(long)]
    pub mqtt_retain: bool,
    /// Messages kept while the broker is slow or away (1 to 1000000); beyond that the
    /// oldest are dropped and counted.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub mqtt_queue: u32,
    /// Seconds between two messages on <prefix>/stats (1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub mqtt_stats_interval: u32,
    /// PEM file of CA certificates to trust for mqtts:// (besides the built-in public roots).
    #[arg(long, value_name = "FILE", requires = "mqtt")]
    pub mqtt_ca: Option<PathBuf>,
    /// This board's id in a fleet (letters, digits, - and _, up to 64): in every event's id
    /// and the board's status; given, it is also a topic level (default prefix
    /// zcpipe/<ID>, client id zcpipe-<ID>). Default: the first 12 letters and digits of
    /// /etc/machine-id, with topics as without it.
    #[arg(long, value_name = "ID")]
    pub board_id: Option<String>,
    /// This board's web view as the fleet view reaches it (http://board.lan:8080/), in the
    /// board's status: the fleet page links to it.
    #[arg(long, value_name = "URL")]
    pub board_url: Option<String>,
}

/// This machine's host name (`/proc/sys/kernel/hostname`), as a client id part.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

impl MqttArgs {
    /// The checked configuration of instance `instance` (`None` without `--mqtt`), the
    /// password from the URL or else [`PASSWORD_ENV`]. Errors (one line, no password): a bad
    /// URL, a bad prefix or client id, a CA file that does not exist.
    pub fn config(&self, instance: &str) -> Result<Option<MqttConfig>> {
        let Some(url) = &self.mqtt else { return Ok(None) };
        let mut broker = BrokerUrl::parse(url)?;
        if broker.user.is_some() && broker.password.is_none() {
            broker.password = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()).map(Secret::new);
        }
        let board = self.board_id()?;
        let topic_prefix = self.topic_prefix(instance);
        check_prefix("--mqtt-topic-prefix", &topic_prefix)?;
        check_prefix("--mqtt-discovery-prefix", &self.mqtt_discovery_prefix)?;
        let host = match &self.board_id {
            Some(b) => b.clone(),
            None => level(&hostname()),
        };
        let client_id = match &self.mqtt_client_id {
            Some(id) => id.clone(),
            None if instance == "default" => format!("zcpipe-{host}"),
            None => format!("zcpipe-{host}-{instance}"),
        };
        if let Some(u) = self.board_url.as_ref().filter(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
            anyhow::bail!("--board-url {u:?}: give the board's web view as http://HOST:PORT/ (or https://)");
        }
        if client_id.is_empty() || client_id.len() > 128 || !client_id.bytes().all(|b| b.is_ascii_graphic()) {
            anyhow::bail!("--mqtt-client-id {client_id:?}: use 1 to 128 printable ASCII characters without spaces");
        }
        if let Some(ca) = self.mqtt_ca.as_ref().filter(|c| !c.is_file()) {
            anyhow::bail!("--mqtt-ca {}: no such file; give a PEM file of CA certificates", ca.display());
        }
        Ok(Some(MqttConfig {
            broker,
            client_id,
            topic_prefix,
            discovery_prefix: (!self.mqtt_no_discovery).then(|| self.mqtt_discovery_prefix.clone()),
            qos: self.mqtt_qos,
            detections_qos: self.mqtt_detections_qos.unwrap_or(self.mqtt_qos),
            retain: self.mqtt_retain,
            queue: self.mqtt_queue as usize,
            stats_every: Duration::from_secs(self.mqtt_stats_interval as u64),
            ca_file: self.mqtt_ca.clone(),
            board,
            board_url: self.board_url.clone(),
        }))
    }

    /// The board id: `--board-id`, checked, else from the machine id, else (a container
    /// without one) from the host name. Error: a bad `--board-id`, in one line with the fix.
    pub fn board_id(&self) -> Result<String> {
        if let Some(b) = &self.board_id {
            return Ok(check_board_id(b)?);
        }
        let found =
            MACHINE_ID.iter().find_map(|p| std::fs::read_to_string(p).ok().and_then(|t| board_id_from_machine_id(&t)));
        Ok(found.unwrap_or_else(|| board_id_of(&hostname())))
    }

    /// For the plan: `mqtt mqtt://host:1883 (user alice, password ***)`; `None` without `--mqtt`
    /// or with a bad URL (which [`MqttArgs::config`] reports).
    pub fn describe(&self) -> Option<String> {
        let b = BrokerUrl::parse(self.mqtt.as_ref()?).ok()?;
        Some(format!("mqtt {}", b.describe()))
    }

    /// The topic prefix of instance `instance`: `--mqtt-topic-prefix`, else `zcpipe` for the
    /// default instance and `zcpipe-<instance>` for another, followed by `/<board>` with
    /// `--board-id`.
    pub fn topic_prefix(&self, instance: &str) -> String {
        let root = match &self.mqtt_topic_prefix {
            Some(p) => return p.clone(),
            None if instance == "default" => "zcpipe".to_string(),
            None => format!("zcpipe-{instance}"),
        };
        match &self.board_id {
            Some(b) => format!("{root}/{}", level(b)),
            None => root,
        }
    }

    /// The password of `--mqtt`'s URL as [`PASSWORD_ENV`] for the publish stage's
    /// environment (its command line gets the URL without it: [`MqttArgs::flags`]); none
    /// without a password in the URL (one from [`PASSWORD_ENV`] is inherited as it is).
    pub fn secret_env(&self) -> Vec<(String, String)> {
        let b = self.mqtt.as_deref().and_then(|u| BrokerUrl::parse(u).ok());
        b.and_then(|b| b.password.map(|p| (PASSWORD_ENV.to_string(), p.expose().to_string()))).into_iter().collect()
    }

    /// The same options as flags, for the publish stage's command line: the URL without its
    /// password, which the stage gets in its environment ([`MqttArgs::secret_env`]; one from
    /// [`PASSWORD_ENV`] already is).
    pub fn flags(&self) -> Vec<String> {
        let Some(url) = &self.mqtt else { return vec![] };
        // The password goes to the stage in its environment ([`MqttArgs::secret_env`]).
        let url = BrokerUrl::parse(url).map_or_else(|_| url.clone(), |b| b.to_arg(false));
        let mut v = vec![format!("--mqtt={url}")];
        v.extend(self.mqtt_client_id.iter().map(|c| format!("--mqtt-client-id={c}")));
        // Without it the stage picks the same default from its own --instance.
        v.extend(self.mqtt_topic_prefix.iter().map(|p| format!("--mqtt-topic-prefix={p}")));
        v.push(format!("--mqtt-discovery-prefix={}", self.mqtt_discovery_prefix));
        if self.mqtt_no_discovery {
            v.push("--mqtt-no-discovery".into());
        }
        v.push(format!("--mqtt-qos={}", self.mqtt_qos));
        v.extend(self.mqtt_detections_qos.iter().map(|q| format!("--mqtt-detections-qos={q}")));
        if self.mqtt_retain {
            v.push("--mqtt-retain".into());
        }
        v.push(format!("--mqtt-queue={}", self.mqtt_queue));
        v.push(format!("--mqtt-stats-interval={}", self.mqtt_stats_interval));
        v.extend(self.mqtt_ca.iter().map(|c| format!("--mqtt-ca={}", c.display())));
        v.extend(self.board_id.iter().map(|b| format!("--board-id={b}")));
        v.extend(self.board_url.iter().map(|u| format!("--board-url={u}")));
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
        m: MqttArgs,
    }

    #[test]
    fn flags_read_back_and_the_plan_hides_the_password() {
        let a = T::parse_from([
            "t",
            "--mqtt",
            "mqtt://alice:p%40ss@broker.lan",
            "--mqtt-qos",
            "1",
            "--mqtt-detections-qos",
            "0",
            "--mqtt-retain",
            "--mqtt-queue",
            "7",
            "--mqtt-topic-prefix",
            "home/zc",
            "--mqtt-client-id",
            "zc1",
        ])
        .m;
        let c = a.config("default").unwrap().unwrap();
        assert_eq!(
            (c.broker.host.as_str(), c.broker.port, c.broker.user.as_deref()),
            ("broker.lan", 1883, Some("alice"))
        );
        assert_eq!(c.broker.password.as_ref().unwrap().expose(), "p@ss");
        assert_eq!(
            (c.qos, c.detections_qos, c.retain, c.queue, c.topic_prefix.as_str(), c.client_id.as_str()),
            (1, 0, true, 7, "home/zc", "zc1")
        );
        // The stage's command line has no password: its environment has it.
        assert!(!a.flags().concat().contains("p%40ss") && !a.flags().concat().contains("p@ss"), "{:?}", a.flags());
        assert_eq!(a.secret_env(), [(PASSWORD_ENV.to_string(), "p@ss".to_string())]);
        let back = T::parse_from(std::iter::once("t".to_string()).chain(a.flags())).m;
        let mut without = c.clone();
        without.broker.password = None;
        if std::env::var_os(PASSWORD_ENV).is_none() {
            assert_eq!(
                back.config("default").unwrap(),
                Some(without),
                "flags read back the same but the password: {:?}",
                a.flags()
            );
        }
        assert_eq!(a.describe().unwrap(), "mqtt mqtt://broker.lan:1883 (user alice, password ***)");
        assert!(!format!("{c:?}").contains("p@ss"), "the config's Debug hides the password: {c:?}");
        assert_eq!(T::parse_from(["t"]).m.config("default").unwrap(), None);
        let other = T::parse_from(["t", "--mqtt", "mqtt://h"]).m.config("garage").unwrap().unwrap();
        assert!(other.client_id.starts_with("zcpipe-") && other.client_id.ends_with("-garage"), "{}", other.client_id);
    }

    #[test]
    fn bad_values_are_one_line_without_the_password() {
        for (args, says) in [
            (&["--mqtt", "http://u:hunter2@h"][..], "--mqtt http://u:***@h: scheme http:// is not MQTT"),
            (&["--mqtt", "mqtt://u:hunter2@h:99999"], "--mqtt mqtt://u:***@h:99999: port \"99999\" is not 1 to 65535"),
            (&["--mqtt", "mqtt://h", "--mqtt-topic-prefix", "a/#"], "--mqtt-topic-prefix \"a/#\": give topic levels"),
            (&["--mqtt", "mqtt://h", "--mqtt-discovery-prefix", "ha/"], "--mqtt-discovery-prefix \"ha/\""),
            (&["--mqtt", "mqtt://h", "--mqtt-ca", "/nonexistent.pem"], "--mqtt-ca /nonexistent.pem: no such file"),
        ] {
            let a = T::parse_from(std::iter::once(&"t").chain(args)).m;
            let e = format!("{:#}", a.config("default").unwrap_err());
            assert!(e.starts_with(says), "{args:?}: {e}");
            assert!(!e.contains("hunter2") && !e.contains('\n'), "{e}");
        }
        assert!(T::try_parse_from(["t", "--mqtt", "mqtt://h", "--mqtt-qos", "3"]).is_err());
    }
}
