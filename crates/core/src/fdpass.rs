//! Control messages with file descriptors over a Unix `SOCK_SEQPACKET` socket.
//!
//! Each message is one packet: a JSON payload plus, optionally, fds in one `SCM_RIGHTS`
//! control message (unix(7), cmsg(3)). The kernel silently drops fds that do not fit the
//! receiver's control buffer (or past its RLIMIT_NOFILE) and only sets `MSG_CTRUNC`; that
//! flag, and `MSG_TRUNC` for the payload, are fatal here. Received fds are close-on-exec.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, Context, Result};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// Most fds one message may carry (the kernel's `SCM_MAX_FD` is 253).
pub(crate) const MAX_FDS: usize = 253;
/// Largest payload accepted, in bytes.
pub(crate) const MAX_PAYLOAD: usize = 64 * 1024;

/// Sends one packet: `payload` and `fds` (duplicated into the peer by the kernel).
pub fn send(sock: BorrowedFd<'_>, payload: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    if fds.len() > MAX_FDS {
        bail!("{} fds in one message exceeds SCM_MAX_FD ({MAX_FDS})", fds.len());
    }
    if payload.len() > MAX_PAYLOAD {
        bail!("control message of {} bytes exceeds {MAX_PAYLOAD}", payload.len());
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) if n == payload.len() => return Ok(()),
            Ok(n) => bail!("short send of a control message: {n} of {} bytes", payload.len()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("sendmsg on control socket"),
        }
    }
}

/// Receives one packet. Returns `Ok(None)` at end of file or ECONNRESET (the peer closed
/// or died).
/// Errors if the payload or the fds were truncated (`MSG_TRUNC`, `MSG_CTRUNC`): fds lost
/// that way would leak or desynchronise the pool, so this is fatal, never ignored.
pub fn recv(sock: BorrowedFd<'_>) -> crate::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut reset_seen = false;
    loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        // A real msg_name buffer (not `()`): qemu-user writes the peer address even into a
        // zero-length one and corrupts the stack; the kernel never does, so this costs nothing.
        let msg = match recvmsg::<nix::sys::socket::UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            // The peer closed with our message unread, or before accepting us. On a
            // SOCK_SEQPACKET socket the kernel reports that error before the messages still
            // queued (a `busy` it sent before closing) and clears it as it does: one more
            // receive reads what is queued, or the end (the peer's close shut the socket, so
            // it cannot wait).
            Err(nix::errno::Errno::ECONNRESET) if !reset_seen => {
                reset_seen = true;
                continue;
            }
            Err(nix::errno::Errno::ECONNRESET) => return Ok(None),
            Err(nix::errno::Errno::EAGAIN) => {
                return Err(crate::Error::TimedOut {
                    what: "recvmsg on control socket: nothing within the receive timeout (EAGAIN)".into(),
                })
            }
            Err(e) => return Err(anyhow::Error::new(e).context("recvmsg on control socket").into()),
        };
        // Take ownership of every fd first, so none leaks whatever happens next.
        let mut fds = Vec::new();
        for c in msg.cmsgs().context("parsing control messages").map_err(crate::Error::Other)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: SCM_RIGHTS just installed this fd in our table; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            return Err(crate::Error::other(
                "control message truncated (MSG_CTRUNC): fds were dropped by the kernel; raise RLIMIT_NOFILE (ulimit -n)",
            ));
        }
        if msg.flags.contains(MsgFlags::MSG_TRUNC) {
            return Err(crate::Error::other(format!(
                "control message payload truncated (MSG_TRUNC): over {MAX_PAYLOAD} bytes"
            )));
        }
        let n = msg.bytes;
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        buf.truncate(n);
        return Ok(Some((buf, fds)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsFd;

    #[test]
    fn fds_cross_and_eof_is_seen() {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
        let m = crate::dmabuf::sealed_memfd("t", 4096, true).unwrap();
        send(a.as_fd(), b"hello", &[m.as_fd(), m.as_fd()]).unwrap();
        let (p, fds) = recv(b.as_fd()).unwrap().unwrap();
        assert_eq!(p, b"hello");
        assert_eq!(fds.len(), 2);
        assert_ne!(fds[0].as_raw_fd(), m.as_raw_fd());
        drop(a);
        assert!(recv(b.as_fd()).unwrap().is_none());
    }

    /// A peer that answers, then closes with our request unread (a server turning a client
    /// away as `busy`): the kernel reports ECONNRESET first; the answer is still read.
    #[test]
    fn an_answer_sent_before_a_close_with_our_message_unread_is_read() {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
        send(b.as_fd(), b"request", &[]).unwrap();
        send(a.as_fd(), b"busy", &[]).unwrap();
        drop(a);
        let (p, fds) = recv(b.as_fd()).unwrap().expect("the answer, not a hang-up");
        assert_eq!((p.as_slice(), fds.len()), (&b"busy"[..], 0));
        assert!(recv(b.as_fd()).unwrap().is_none());
    }
}
