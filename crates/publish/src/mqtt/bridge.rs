//! The MQTT bridge's threads: the publish stage's [`Output`] on one side, rumqttc's
//! synchronous client on the other.
//!
//! ```text
//! frame loop ── line() ──> DropOldest queue ──> feeder thread ── try_publish ──> rumqttc
//!   (never blocks)          (bounded, counted)   (only while connected)          request channel
//!                                                                                 (bounded)
//!                                                net thread: Connection::recv ──> broker
//!                                                (connects, reconnects with back-off)
//! ```
//!
//! `line()` takes a mutex held only for a push or a pop, never across I/O. The feeder hands
//! messages to rumqttc only while connected, so while the broker is away they wait in our
//! queue, whose oldest go (counted as `dropped`) when it is full.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use rumqttc::{
    Client, ConnectReturnCode, Connection, ConnectionError, Event, LastWill, MqttOptions, Outgoing, Packet, QoS,
};

use super::{DropOldest, MqttConfig, Msg, Out, Translator};
use crate::output::Output;
use zcpipe_core::schema::{EndJson, SocketLine};

/// The most time [`MqttOutput::close`] takes: the last messages, `offline`, DISCONNECT.
pub(crate) const CLOSE_BUDGET: Duration = Duration::from_millis(1000);

/// The first wait before reconnecting; it doubles after each failure up to [`BACKOFF_MAX`],
/// and starts again from here after a connection.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two connection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The largest packet sent or received (a snapshot's JPEG is the largest message).
const MAX_PACKET: usize = 4 << 20;

/// The largest snapshot sent: a packet's room less its topic and header.
const MAX_PICTURE: usize = MAX_PACKET - (64 << 10);

/// Capacity of rumqttc's request channel (messages handed over but not yet written).
const REQUEST_CHANNEL: usize = 64;

/// What the frame loop and the two threads share.
struct Shared {
    state: Mutex<State>,
    /// The QoS of every message but the detections', and theirs.
    qos: QoS,
    detections_qos: QoS,
    wake: Condvar,
    connected: AtomicBool,
    stop: AtomicBool,
    /// PUBLISH packets written to the broker.
    sent: AtomicU64,
    /// Connections made (the first one, then every reconnection).
    connections: AtomicU64,
    /// Connection attempts or connections that failed.
    errors: AtomicU64,
    /// Snapshots queued for the image entities.
    pictures: AtomicU64,
    /// Snapshots too big for one message ([`MAX_PICTURE`]), not sent.
    pictures_too_big: AtomicU64,
}

impl Shared {
    /// Queues `outs` (the lock is held for pushes only) and wakes the feeder.
    fn push(&self, outs: impl Iterator<Item = Out>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for o in outs {
            match o {
                Out::Once(m) => st.queue.push((m, self.qos)),
                Out::Detections(m) => st.queue.push((m, self.detections_qos)),
                Out::State(m) => {
                    st.latest.insert(m.topic.clone(), m.clone());
                    // Only a state's newest value waits: after a broker outage the flushed
                    // queue never replays an older count after the current one.
                    st.queue.remove_if(|q| q.0.topic == m.topic);
                    st.queue.push((m, self.qos));
                }
                Out::Announce(m) => {
                    st.announce.push(m.clone());
                    st.first.push_back(m);
                }
            }
        }
        drop(st);
        self.wake.notify_all();
    }
}

struct State {
    /// Each message with its QoS.
    queue: DropOldest<(Msg, QoS)>,
    /// Discovery configs and `online`, in order: sent after every connection.
    announce: Vec<Msg>,
    /// The latest message of each state topic (counts): sent again after a reconnection.
    latest: std::collections::BTreeMap<String, Msg>,
    /// Sent before the queue: what every connection starts with, and new announcements.
    first: std::collections::VecDeque<Msg>,
    /// `close` was called: flush until this instant, then `offline` and DISCONNECT.
    closing: Option<Instant>,
}

/// The MQTT bridge as an output of the publish stage.
pub(crate) struct MqttOutput {
    tr: Translator,
    shared: Arc<Shared>,
    client: Client,
    /// The net thread says it ended.
    done: mpsc::Receiver<()>,
    feeder_done: mpsc::Receiver<()>,
    scratch: Vec<Out>,
    closed: bool,
    /// Whether the bridge was connected when the stream ended (the report after `close`).
    connected_at_end: Option<bool>,
}

fn qos(n: u8) -> QoS {
    match n {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

#[cfg(feature = "mqtt-tls")]
fn tls_transport(_broker: &super::BrokerUrl, ca: Option<&std::path::Path>) -> Result<rumqttc::Transport> {
    use anyhow::Context as _;
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(ca) = ca {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| anyhow::anyhow!("--mqtt-ca {}: {e}; give a PEM file of CA certificates", ca.display()))?;
        if certs.is_empty() {
            anyhow::bail!("--mqtt-ca {}: no certificate in it; give a PEM file of CA certificates", ca.display());
        }
        for c in certs {
            roots.add(c).with_context(|| format!("--mqtt-ca {}: a certificate rustls refuses", ca.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("rustls with ring: no protocol version")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(rumqttc::Transport::tls_with_config(rumqttc::TlsConfiguration::Rustls(Arc::new(tls))))
}

#[cfg(not(feature = "mqtt-tls"))]
fn tls_transport(broker: &super::BrokerUrl, _ca: Option<&std::path::Path>) -> Result<rumqttc::Transport> {
    anyhow::bail!("--mqtt {}: this zcpipe was built without TLS (cargo feature mqtt-tls); use mqtt:// or rebuild with --features mqtt-tls", broker.address())
}

/// The rumqttc options of a client `client_id` of `broker`: credentials, keep-alive 30 s,
/// a clean session, packets up to 4 MiB (a snapshot), TLS for `mqtts://` (CA certificates
/// of `ca` trusted besides the built-in roots).
pub fn base_options(broker: &super::BrokerUrl, client_id: &str, ca: Option<&std::path::Path>) -> Result<MqttOptions> {
    let mut o = MqttOptions::new(client_id, broker.host.clone(), broker.port);
    o.set_keep_alive(Duration::from_secs(30));
    o.set_clean_session(true);
    o.set_max_packet_size(MAX_PACKET, MAX_PACKET);
    o.set_request_channel_capacity(REQUEST_CHANNEL);
    if let Some(u) = &broker.user {
        o.set_credentials(u.clone(), broker.password.as_ref().map(|p| p.expose().to_string()).unwrap_or_default());
    }
    if broker.tls {
        o.set_transport(tls_transport(broker, ca)?);
    }
    Ok(o)
}

/// The rumqttc options of `cfg` ([`base_options`]) with its last will (`offline`,
/// retained, on `P/available`).
pub fn options(cfg: &MqttConfig) -> Result<MqttOptions> {
    let mut o = base_options(&cfg.broker, &cfg.client_id, cfg.ca_file.as_deref())?;
    o.set_last_will(LastWill::new(cfg.availability_topic(), "offline", qos(cfg.qos), true));
    Ok(o)
}

impl MqttOutput {
    /// Starts the bridge to `cfg.broker`: its threads run and connect in the background (a
    /// broker that is away is said in the log and retried, never an error here). Errors: a
    /// TLS set-up that cannot work (`--mqtt-ca`), a thread that cannot start.
    pub fn start(cfg: MqttConfig, tracks: bool) -> Result<MqttOutput> {
        let opts = options(&cfg)?;
        let (client, connection) = Client::new(opts, REQUEST_CHANNEL);
        let online = Msg { topic: cfg.availability_topic(), payload: b"online".to_vec(), retain: true };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: DropOldest::new(cfg.queue),
                announce: vec![online],
                latest: Default::default(),
                first: Default::default(),
                closing: None,
            }),
            wake: Condvar::new(),
            qos: qos(cfg.qos),
            detections_qos: qos(cfg.detections_qos),
            connected: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            pictures: AtomicU64::new(0),
            pictures_too_big: AtomicU64::new(0),
        });
        log::info!(
            "mqtt: publishing to {} as client {} under {}/ (queue {} messages)",
            cfg.broker.describe(),
            cfg.client_id,
            cfg.topic_prefix,
            cfg.queue
        );
        if cfg.discovery_prefix.is_some() && cfg.node_id() != cfg.client_id {
            log::info!(
                "mqtt: Home Assistant node id {} (client id {} has characters discovery topics do not allow: only letters, digits, _ and -)",
                cfg.node_id(),
                cfg.client_id
            );
        }
        let (done_tx, done) = mpsc::channel();
        let (feeder_tx, feeder_done) = mpsc::channel();
        let net = NetLoop {
            shared: shared.clone(),
            broker: cfg.broker.describe(),
            user: cfg.broker.user.clone(),
            queue: cfg.queue,
        };
        std::thread::Builder::new().name("mqtt-net".into()).spawn(move || {
            net.run(connection);
            let _ = done_tx.send(());
        })?;
        let feeder = Feeder {
            shared: shared.clone(),
            client: client.clone(),
            qos: qos(cfg.qos),
            availability: cfg.availability_topic(),
        };
        std::thread::Builder::new().name("mqtt-feed".into()).spawn(move || {
            feeder.run();
            let _ = feeder_tx.send(());
        })?;
        Ok(MqttOutput {
            tr: Translator::new(cfg).counting_tracks(tracks),
            shared,
            client,
            done,
            feeder_done,
            scratch: vec![],
            closed: false,
            connected_at_end: None,
        })
    }

    /// Queues what `out` holds (the lock is held for pushes only).
    fn enqueue(&mut self) {
        if !self.scratch.is_empty() {
            self.shared.push(self.scratch.drain(..));
        }
    }

    /// Where the snapshot output hands each picture it takes: the camera's latest snapshot
    /// for Home Assistant's image entity, and for a new object the picture's notice
    /// ([`super::fleet::snapshot_notice`]) after it.
    pub(crate) fn picture_sink(&self) -> crate::output::PictureSink {
        let shared = self.shared.clone();
        let cfg = self.tr.config().clone();
        let announced = Mutex::new(std::collections::BTreeSet::<String>::new());
        Box::new(move |pic: &crate::output::Picture<'_>| {
            let (camera, jpeg) = (pic.camera, pic.jpeg);
            if jpeg.len() > MAX_PICTURE {
                let n = shared.pictures_too_big.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 {
                    log::warn!(
                        "mqtt: a snapshot of {camera} is {} KiB, over the {} KiB a message may hold: not sent (snapshots of a smaller --view-size fit)",
                        jpeg.len() / 1024,
                        MAX_PICTURE / 1024
                    );
                }
                return;
            }
            let first = announced.lock().unwrap_or_else(|e| e.into_inner()).insert(camera.to_string());
            shared.pictures.fetch_add(1, Ordering::Relaxed);
            let notice = super::fleet::snapshot_notice(&cfg, pic).map(Out::Once);
            shared.push(cfg.snapshot_msgs(camera, jpeg.to_vec(), first).into_iter().chain(notice));
        })
    }

    /// The counters: `broker` (no credentials), `connected` (after `close`: when the stream
    /// ended), `sent`, `dropped`, `queued`,
    /// `connections`, `reconnects`, `errors`.
    fn counters(&self) -> MqttReport {
        let (dropped, queued) = {
            let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            (st.queue.dropped(), st.queue.len())
        };
        let connections = self.shared.connections.load(Ordering::Relaxed);
        MqttReport {
            broker: self.tr.config().broker.address(),
            connected: self.connected_at_end.unwrap_or_else(|| self.shared.connected.load(Ordering::Relaxed)),
            sent: self.shared.sent.load(Ordering::Relaxed),
            dropped,
            queued,
            connections,
            reconnects: connections.saturating_sub(1),
            errors: self.shared.errors.load(Ordering::Relaxed),
            pictures: self.shared.pictures.load(Ordering::Relaxed),
            pictures_too_big: self.shared.pictures_too_big.load(Ordering::Relaxed),
        }
    }

    /// Its counters as the `bridge` of the stats message.
    fn counters_json(&self) -> serde_json::Value {
        serde_json::to_value(self.counters()).unwrap_or_default()
    }
}

/// The MQTT bridge's counters, for the stage's report (`mqtt`) and its stats message.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct MqttReport {
    /// The broker, `host:port`.
    pub broker: String,
    /// Connected now (at the end: when the stream ended).
    pub connected: bool,
    /// Messages sent.
    pub sent: u64,
    /// Messages dropped (queue full while the broker was slow or away).
    pub dropped: u64,
    /// Messages queued now.
    pub queued: usize,
    /// Connections made.
    pub connections: u64,
    /// Connections after the first.
    pub reconnects: u64,
    /// Errors seen.
    pub errors: u64,
    /// Snapshots queued for Home Assistant's image entities.
    pub pictures: u64,
    /// Snapshots too big for one message, not sent.
    pub pictures_too_big: u64,
}

impl MqttReport {
    /// Its line of the end-of-run summary.
    pub fn summary_line(&self) -> String {
        let pictures = match (self.pictures, self.pictures_too_big) {
            (0, 0) => String::new(),
            (n, 0) => format!("; {n} snapshots for Home Assistant"),
            (n, big) => format!("; {n} snapshots for Home Assistant, {big} too big to send"),
        };
        format!(
            "  mqtt: {}: {} messages sent, {} dropped (queue full while the broker was slow or away), {} left queued, {} reconnects; {} when the stream ended{pictures}",
            self.broker,
            self.sent,
            self.dropped,
            self.queued,
            self.reconnects,
            if self.connected { "connected" } else { "not connected" }
        )
    }
}

impl Output for MqttOutput {
    fn name(&self) -> &'static str {
        "mqtt"
    }

    fn line(&mut self, line: &SocketLine) {
        let mut out = std::mem::take(&mut self.scratch);
        self.tr.line(line, super::wall_ms, &mut out);
        self.scratch = out;
        self.enqueue();
    }

    fn camera_removed(&mut self, camera: &str) {
        let mut out = std::mem::take(&mut self.scratch);
        self.tr.camera_removed(camera, &mut out);
        self.scratch = out;
        self.enqueue();
    }

    fn tick(&mut self) {
        if self.tr.stats_due() {
            let m = self.tr.stats(self.counters_json());
            self.scratch.push(Out::Once(m));
            let s = self.tr.status(self.counters());
            self.scratch.push(Out::State(s));
            self.enqueue();
        }
    }

    fn report(&self) -> crate::report::OutputReport {
        crate::report::OutputReport::Mqtt(self.counters())
    }

    fn close(&mut self, _end: &EndJson) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.connected_at_end = Some(self.shared.connected.load(Ordering::Relaxed));
        // Nothing is in view any more: every count to 0 (before the last stats).
        let mut ends = std::mem::take(&mut self.scratch);
        self.tr.end(&mut ends);
        self.scratch = ends;
        self.enqueue();
        let m = self.tr.stats(self.counters_json());
        self.scratch.push(Out::Once(m));
        let s = self.tr.status(self.counters());
        self.scratch.push(Out::State(s));
        self.enqueue();
        let start = Instant::now();
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).closing = Some(start + CLOSE_BUDGET * 7 / 10);
        self.shared.wake.notify_all();
        let _ = self.feeder_done.recv_timeout(CLOSE_BUDGET * 8 / 10);
        self.shared.stop.store(true, Ordering::Relaxed);
        if self.connected_at_end == Some(true) {
            // The feeder sent `offline` and DISCONNECT: the net thread ends once it is written.
            let _ = self.done.recv_timeout(CLOSE_BUDGET.saturating_sub(start.elapsed()));
        } else {
            let _ = self.client.try_disconnect();
        }
        let c = self.counters();
        log::info!(
            "mqtt: closed ({} messages sent, {} dropped, {} left queued, {} reconnects)",
            c.sent,
            c.dropped,
            c.queued,
            c.reconnects
        );
    }
}

/// The thread that hands queued messages to rumqttc while connected.
struct Feeder {
    shared: Arc<Shared>,
    client: Client,
    qos: QoS,
    availability: String,
}

impl Feeder {
    fn run(self) {
        loop {
            let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            // Wait for something to send while connected, or the end.
            loop {
                let connected = self.shared.connected.load(Ordering::Relaxed);
                if st.closing.is_some() || (connected && (!st.first.is_empty() || !st.queue.is_empty())) {
                    break;
                }
                st = self.shared.wake.wait_timeout(st, Duration::from_millis(200)).unwrap_or_else(|e| e.into_inner()).0;
            }
            let connected = self.shared.connected.load(Ordering::Relaxed);
            if let Some(deadline) = st.closing {
                let nothing_left = st.first.is_empty() && st.queue.is_empty();
                if !connected || nothing_left || Instant::now() >= deadline {
                    drop(st);
                    if connected {
                        let _ = self.client.try_publish(self.availability.clone(), self.qos, true, "offline");
                        let _ = self.client.try_disconnect();
                    }
                    return;
                }
            }
            let (from_first, (m, q)) = match st.first.pop_front() {
                Some(m) => (true, (m, self.qos)),
                None => match st.queue.pop() {
                    Some(m) => (false, m),
                    None => continue,
                },
            };
            drop(st);
            if self.client.try_publish(m.topic.clone(), q, m.retain, m.payload.clone()).is_err() {
                // rumqttc's channel is full (the broker is slow): put it back and wait a little.
                let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                if from_first {
                    st.first.push_front(m);
                } else {
                    st.queue.unpop((m, q));
                }
                drop(st);
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// The thread that runs rumqttc's event loop: connects, reconnects with back-off, says
/// what happened (once per kind of trouble), counts.
struct NetLoop {
    shared: Arc<Shared>,
    /// The broker as shown ([`super::BrokerUrl::describe`]: no password).
    broker: String,
    user: Option<String>,
    queue: usize,
}

impl NetLoop {
    /// One line for a connection error: what it means and what to do. Never holds the
    /// password (rumqttc's errors do not carry the options).
    fn explain(&self, e: &ConnectionError) -> String {
        match e {
            ConnectionError::ConnectionRefused(ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized) => format!(
                "mqtt: the broker {} refused the credentials{} ({}): fix the user and password in --mqtt (or ZCPIPE_MQTT_PASSWORD); the pipeline goes on and the bridge keeps retrying (back-off up to {} s)",
                self.broker,
                self.user.as_ref().map(|u| format!(" of user {u}")).unwrap_or_else(|| " (none given: the broker wants a user)".into()),
                if matches!(e, ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized)) { "not authorised" } else { "bad user name or password" },
                BACKOFF_MAX.as_secs()
            ),
            ConnectionError::ConnectionRefused(code) => {
                format!("mqtt: the broker {} refused the connection ({code:?}); the pipeline goes on and the bridge keeps retrying (back-off up to {} s)", self.broker, BACKOFF_MAX.as_secs())
            }
            e => format!(
                "mqtt: cannot reach the broker {} ({e}); the pipeline goes on, the bridge retries (back-off up to {} s) and keeps the newest {} messages meanwhile",
                self.broker,
                BACKOFF_MAX.as_secs(),
                self.queue
            ),
        }
    }

    fn run(self, mut conn: Connection) {
        let mut backoff = BACKOFF_MIN;
        let mut said: Option<String> = None;
        let mut lost_at: Option<Instant> = None;
        loop {
            if self.shared.stop.load(Ordering::Relaxed) && !self.shared.connected.load(Ordering::Relaxed) {
                return;
            }
            match conn.recv() {
                Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                    let n = self.shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
                    {
                        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                        // Every connection starts with `online`, the discovery configs and the latest counts.
                        let again: Vec<Msg> = st.announce.iter().cloned().chain(st.latest.values().cloned()).collect();
                        st.first = again.into();
                        self.shared.connected.store(true, Ordering::Relaxed);
                    }
                    self.shared.wake.notify_all();
                    match lost_at.take() {
                        Some(t) if n > 1 => log::info!(
                            "mqtt: connected to {} again after {:.1} s",
                            self.broker,
                            t.elapsed().as_secs_f64()
                        ),
                        _ => log::info!("mqtt: connected to {}", self.broker),
                    }
                    said = None;
                    backoff = BACKOFF_MIN;
                }
                Ok(Ok(Event::Outgoing(Outgoing::Publish(_)))) => {
                    self.shared.sent.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Ok(Event::Outgoing(Outgoing::Disconnect))) => {
                    self.shared.connected.store(false, Ordering::Relaxed);
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(ConnectionError::RequestsDone)) | Err(_) => return,
                Ok(Err(e)) => {
                    let was = self.shared.connected.swap(false, Ordering::Relaxed);
                    self.shared.errors.fetch_add(1, Ordering::Relaxed);
                    if was {
                        lost_at = Some(Instant::now());
                        log::warn!("mqtt: lost the connection to {} ({e}); reconnecting (back-off up to {} s), keeping the newest {} messages meanwhile", self.broker, BACKOFF_MAX.as_secs(), self.queue);
                        said = None;
                    } else {
                        let line = self.explain(&e);
                        if said.as_deref() != Some(line.as_str()) {
                            log::warn!("{line}");
                            said = Some(line);
                        }
                    }
                    // Back off, looking at the stop flag every 50 ms.
                    let until = Instant::now() + backoff;
                    while Instant::now() < until {
                        if self.shared.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(
                            Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
                        );
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}
