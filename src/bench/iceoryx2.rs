//! The `iceoryx2` row of `zcpipe bench ipc` (cargo feature `iceoryx2`): the same ping-pong
//! as every other row, carried by iceoryx2 (<https://github.com/eclipse-iceoryx/iceoryx2>,
//! crate version 0.10) as its users would carry a frame: zero-copy publish-subscribe of a
//! `[u8]` slice plus its Event service for the wake-up.
//!
//! Per direction there is one publish-subscribe service (one publisher, one subscriber,
//! queue of one, no history) and one event service (one notifier, one listener). Sending
//! message `k` loans an uninitialised slice of the message's length from the publisher's
//! shared-memory data segment (`loan_slice_uninit`), writes every byte of it in place,
//! sends it and notifies the peer. Receiving waits on the listener (a blocking wait with a
//! 200 ms timeout, so an abort is noticed; no spinning), takes the sample from the
//! subscriber, reads one byte in 64 of it in place and returns it by dropping it. This is
//! the same kind of hop as zcpipe's ring with its eventfd: written in place, one wake-up.
//!
//! iceoryx2 objects are created after the fork, by each process for itself (a node belongs
//! to one process), under service names unique to the measurement; both processes
//! `open_or_create` the four services, and each waits until the peer's subscriber and
//! listener of its sending direction exist before the first message.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use ::iceoryx2::port::listener::{Listener, ListenerWaitError};
use ::iceoryx2::port::notifier::Notifier;
use ::iceoryx2::port::publisher::Publisher;
use ::iceoryx2::port::subscriber::Subscriber;
use ::iceoryx2::port::update_connections::UpdateConnections;
use ::iceoryx2::prelude::*;
use anyhow::{anyhow, bail, Result};

use super::proc::abort_check;
use super::transports::{marker, read_message, Ctx, Endpoint, Pair};

/// How long set-up waits for the peer's ports (the other transports' connect timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one wait on the listener blocks before checking for an abort.
const WAIT_SLICE: Duration = Duration::from_millis(200);

/// The iceoryx2 transport, set up before the fork: only names (iceoryx2 objects are made
/// after it, in each process).
pub(crate) struct Iox2Pair {
    /// Service-name prefix unique to this measurement: `zcpipe-bench/<pid>/<tag>`.
    prefix: String,
    /// Message length, bytes.
    len: usize,
}

/// Prepares one iceoryx2 measurement at `ctx.size`.
pub(crate) fn prepare(ctx: &Ctx) -> Iox2Pair {
    Iox2Pair { prefix: format!("zcpipe-bench/{}/{}", std::process::id(), ctx.tag), len: ctx.size.bytes }
}

impl Pair for Iox2Pair {
    fn parent(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(Iox2End::open(&self.prefix, self.len, "ab", "ba")?))
    }
    fn child(self: Box<Self>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(Iox2End::open(&self.prefix, self.len, "ba", "ab")?))
    }
}

/// One side: its publisher and notifier for the direction it sends, subscriber and listener
/// for the one it receives. Fields drop in order, so the ports go before their services
/// and the node.
struct Iox2End {
    publisher: Publisher<ipc::Service, [u8], ()>,
    notifier: Notifier<ipc::Service>,
    subscriber: Subscriber<ipc::Service, [u8], ()>,
    listener: Listener<ipc::Service>,
    _services: Services,
    _node: Node<ipc::Service>,
    len: usize,
}

/// The four services one side has opened (kept open for as long as its ports live).
struct Services {
    _tx_data: ::iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>,
    _rx_data: ::iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>,
    _tx_event: ::iceoryx2::service::port_factory::event::PortFactory<ipc::Service>,
    _rx_event: ::iceoryx2::service::port_factory::event::PortFactory<ipc::Service>,
}

/// Turns an iceoryx2 error (which implements `Debug`) into a one-line anyhow error.
fn iox<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> anyhow::Error + '_ {
    move |e| anyhow!("iceoryx2: {what}: {e:?}")
}

/// Retries `f` until it succeeds or `CONNECT_TIMEOUT` passes: both processes
/// `open_or_create` the same services at the same time, and one may find a service the
/// other is still creating.
fn retry<T, E: std::fmt::Debug>(what: &str, mut f: impl FnMut() -> std::result::Result<T, E>) -> Result<T> {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() >= CONNECT_TIMEOUT => return Err(iox(what)(e)),
            Err(_) => {
                abort_check()?;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

fn service_name(s: &str) -> Result<ServiceName> {
    ServiceName::new(s).map_err(iox("service name"))
}

impl Iox2End {
    /// Opens this side's node, services and ports, then waits until the peer's subscriber
    /// and listener of direction `tx` exist (so the first message is not sent into the void).
    fn open(prefix: &str, len: usize, tx: &str, rx: &str) -> Result<Iox2End> {
        // iceoryx2 logs to stderr (e.g. that it found no config file and uses the defaults);
        // keep the bench's stderr for real problems.
        set_log_level(LogLevel::Error);
        // No iceoryx2 signal handlers: the bench's own SIGINT/SIGTERM handlers stay in place.
        let node = NodeBuilder::new()
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<ipc::Service>()
            .map_err(iox("creating a node"))?;
        let data = |dir: &str| -> Result<_> {
            let name = service_name(&format!("{prefix}/data-{dir}"))?;
            retry("opening the publish-subscribe service", || {
                node.service_builder(&name)
                    .publish_subscribe::<[u8]>()
                    .max_publishers(1)
                    .max_subscribers(1)
                    .history_size(0)
                    .subscriber_max_buffer_size(1)
                    .subscriber_max_borrowed_samples(1)
                    .open_or_create()
            })
        };
        let event = |dir: &str| -> Result<_> {
            let name = service_name(&format!("{prefix}/event-{dir}"))?;
            retry("opening the event service", || {
                node.service_builder(&name).event().max_notifiers(1).max_listeners(1).open_or_create()
            })
        };
        let (tx_data, rx_data, tx_event, rx_event) = (data(tx)?, data(rx)?, event(tx)?, event(rx)?);
        let publisher = tx_data
            .publisher_builder()
            .initial_max_slice_len(len)
            .max_loaned_samples(1)
            .create()
            .map_err(iox("creating the publisher"))?;
        let subscriber =
            rx_data.subscriber_builder().buffer_size(1).create().map_err(iox("creating the subscriber"))?;
        let notifier = tx_event.notifier_builder().create().map_err(iox("creating the notifier"))?;
        let listener = rx_event.listener_builder().create().map_err(iox("creating the listener"))?;
        let start = Instant::now();
        while tx_data.dynamic_config().number_of_subscribers() < 1
            || tx_event.dynamic_config().number_of_listeners() < 1
        {
            abort_check()?;
            if start.elapsed() >= CONNECT_TIMEOUT {
                bail!("iceoryx2: the peer's subscriber and listener did not appear within {CONNECT_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        publisher.update_connections().map_err(iox("connecting the publisher"))?;
        notifier.update_connections().map_err(iox("connecting the notifier"))?;
        Ok(Iox2End {
            publisher,
            notifier,
            subscriber,
            listener,
            _services: Services { _tx_data: tx_data, _rx_data: rx_data, _tx_event: tx_event, _rx_event: rx_event },
            _node: node,
            len,
        })
    }
}

impl Endpoint for Iox2End {
    fn send(&mut self, k: u64) -> Result<()> {
        let mut sample = self.publisher.loan_slice_uninit(self.len).map_err(iox("loan_slice_uninit"))?;
        let payload: &mut [MaybeUninit<u8>] = sample.payload_mut();
        // SAFETY: `payload` is a valid, writable slice of `payload.len()` bytes of the loaned
        // sample (MaybeUninit<u8> has u8's layout); write_bytes fills all of them (a memset,
        // as `write_message` does for the other transports).
        unsafe { std::ptr::write_bytes(payload.as_mut_ptr().cast::<u8>(), marker(k), payload.len()) };
        // SAFETY: every byte of the payload was initialised just above.
        let sample = unsafe { sample.assume_init() };
        sample.send().map_err(iox("send"))?;
        self.notifier.notify().map_err(iox("notify"))?;
        Ok(())
    }

    fn recv(&mut self, k: u64) -> Result<()> {
        loop {
            // Wait first: every message comes with exactly one notification, so a wake-up
            // without a sample is a spurious one and we wait again.
            match self.listener.timed_wait(|_| {}, WAIT_SLICE) {
                Ok(_) => {}
                Err(ListenerWaitError::InterruptSignal) => {}
                Err(e) => {
                    abort_check()?;
                    return Err(iox("waiting on the listener")(e));
                }
            }
            abort_check()?;
            if let Some(sample) = self.subscriber.receive().map_err(iox("receive"))? {
                let b = sample.payload();
                if b.len() != self.len {
                    bail!("iceoryx2: message {k} has {} bytes, expected {}", b.len(), self.len);
                }
                return read_message(b, k, true);
            }
        }
    }
}
