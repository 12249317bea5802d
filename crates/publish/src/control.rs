//! The publish stage's control socket ([`zcpipe_core::control::STAGE_SOCKET`] in the run
//! directory): where `zcpipe run` hands it the changes it takes live (a camera's zones,
//! lines and loitering times), the changes to announce, and a camera's removal. Looked at
//! once per turn of the frame loop, without blocking; a peer of another user is refused.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{accept4, SockFlag};

use zcpipe_core::control::{Channel, StageAnswer, StageAsk, StageRequest, STAGE_SOCKET, VERSION};

/// How long the supervisor has to send its request once connected.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Requests taken per turn at most (a flood costs a bounded amount).
const PER_TURN: usize = 4;

/// The listening socket; its file goes when this is dropped.
pub(crate) struct StageControl {
    fd: OwnedFd,
    path: PathBuf,
}

impl StageControl {
    /// Binds the socket in `run_dir` (mode 0600; a file left there by a killed publish
    /// stage is replaced).
    pub(crate) fn bind(run_dir: &Path) -> Result<StageControl> {
        let path = run_dir.join(STAGE_SOCKET);
        let fd = zcpipe_core::control::listen_at(&path, true, 4)?;
        Ok(StageControl { fd, path })
    }

    /// The requests waiting now (at most [`PER_TURN`]), each with the channel its answer goes on.
    pub(crate) fn poll(&mut self) -> Vec<(Channel, StageRequest)> {
        let mut out = vec![];
        for _ in 0..PER_TURN {
            let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            if !matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0) {
                break;
            }
            let Ok(raw) = accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC) else { break };
            // SAFETY: accept4 returned a new descriptor that nothing else owns.
            let conn: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
            let Ok(ch) = Channel::from_fd(conn, REQUEST_TIMEOUT) else { continue };
            if !ch.peer_allowed() {
                log::warn!(
                    "refused a control connection on {} from pid {} of uid {}: not this run's user",
                    self.path.display(),
                    ch.peer_pid,
                    ch.peer_uid
                );
                continue;
            }
            let request = match ch.recv_bytes() {
                Ok(Some(bytes)) => {
                    serde_json::from_slice::<StageAsk>(&bytes).map_err(|e| e.to_string()).and_then(|a| {
                        match a.version {
                            VERSION => Ok(a.request),
                            v => Err(format!(
                                "a change of version {v}; this publish stage reads {VERSION} (a different build)"
                            )),
                        }
                    })
                }
                _ => continue,
            };
            match request {
                Ok(r) => out.push((ch, r)),
                Err(e) => answer(&ch, Err(format!("not a change: {e}"))),
            }
        }
        out
    }
}

impl Drop for StageControl {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers the supervisor.
pub(crate) fn answer(ch: &Channel, a: StageAnswer) {
    if let Err(e) = ch.send(&a) {
        log::info!("could not answer the supervisor's change: {e:#}");
    }
}
