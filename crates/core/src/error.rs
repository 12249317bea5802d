//! The conditions callers branch on, as one enum matched by variant.
//!
//! The operations of a hop (a control connection's receive, a sender's send, a pool
//! consumer's join and receive, a producer's publish) return [`Result`], whose error is
//! [`Error`]: a neighbour gone or a corrupt ring is a variant the caller matches
//! (`Err(Error::PeerGone { .. })`), and every other failure is [`Error::Other`], an
//! [`anyhow::Error`] with its context. A typed condition keeps its variant when context is
//! added ([`Error::context`]); it is never searched for in an anyhow chain.

use std::fmt::Display;

/// A failure of a hop's operation: the conditions a caller decides on (stop quietly, drop
/// a consumer, wait for a neighbour's restart, exit 3), or any other failure. The Display
/// text is the bare description (users and the integration tests read it in
/// `zcpipe: error: ...` lines).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A neighbouring stage went away: its control socket (or data socket) hung up, or it
    /// refused us, seen where that was detected. A secondary failure: the neighbour
    /// reports its own cause, so the stage that sees this stops quietly (the command line
    /// exits 3 for it), or waits for the neighbour's restart.
    #[error("{what}")]
    PeerGone {
        /// Who hung up, and where it was seen (`"infer stage hung up"`).
        what: String,
    },
    /// The consumer wrote indices into the shared ring that no consumer following the
    /// protocol can (`head` past `tail`, a return queue longer than its capacity): a broken
    /// or hostile peer. The producer's own state is intact (it never trusts those words); a
    /// producer that keeps serving drops that consumer
    /// ([`crate::pool::PoolProducer::keep_serving`]).
    #[error("{what}")]
    RingCorrupt {
        /// What was found in the ring.
        what: String,
    },
    /// Nothing came within a socket's receive timeout (SO_RCVTIMEO, `EAGAIN`): a peer
    /// that connected and said nothing in time.
    #[error("{what}")]
    TimedOut {
        /// What was waited for.
        what: String,
    },
    /// Any other failure (a system call, a malformed message, a stop), with its context.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The result of a hop's operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Returns early with an [`Error::Other`] made as `anyhow::anyhow!` makes its error: the
/// `bail!` of a function that returns [`Result`] (converted with `From`, so it serves a
/// function returning `anyhow::Result` too).
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => {
        return ::core::result::Result::Err(::core::convert::From::from($crate::Error::Other($crate::__anyhow::anyhow!($($arg)*))))
    };
}

impl Error {
    /// A hang-up described by `what` (`"infer stage hung up"`).
    pub fn peer_gone(what: impl Into<String>) -> Error {
        Error::PeerGone { what: what.into() }
    }

    /// The consumer of a hop, process `pid`, hung up (seen by its producer).
    pub(crate) fn downstream_gone(pid: i32) -> Error {
        Error::peer_gone(format!("downstream (pid {pid}) hung up"))
    }

    /// A corrupt ring described by `what`.
    pub(crate) fn ring_corrupt(what: impl Into<String>) -> Error {
        Error::RingCorrupt { what: what.into() }
    }

    /// Any other failure, from its message.
    pub(crate) fn other(msg: impl Display) -> Error {
        Error::Other(anyhow::anyhow!("{msg}"))
    }

    /// This error with `context` before it (`"{context}: {self}"`), keeping its variant.
    pub fn context(self, context: impl Display) -> Error {
        match self {
            Error::PeerGone { what } => Error::PeerGone { what: format!("{context}: {what}") },
            Error::RingCorrupt { what } => Error::RingCorrupt { what: format!("{context}: {what}") },
            Error::TimedOut { what } => Error::TimedOut { what: format!("{context}: {what}") },
            Error::Other(e) => Error::Other(e.context(context.to_string())),
        }
    }

    /// As an [`anyhow::Error`], for a caller that has no variant to match: the error
    /// [`Error::Other`] holds (its chain as it was), else this error.
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            Error::Other(e) => e,
            e => anyhow::Error::new(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn context_keeps_the_variant_and_reads_as_a_chain() {
        let e = Error::peer_gone("infer stage hung up").context("reading a frame");
        assert_eq!(format!("{e:#}"), "reading a frame: infer stage hung up");
        assert!(matches!(&e, Error::PeerGone { what } if what == "reading a frame: infer stage hung up"));
        assert!(matches!(Error::ring_corrupt("bad head").context("sending"), Error::RingCorrupt { .. }));
        let o = Error::other("ppoll: EBADF").context("waiting for returns");
        assert!(matches!(o, Error::Other(_)));
        assert_eq!(format!("{o:#}"), "waiting for returns: ppoll: EBADF");
        // As an anyhow error, the same one line.
        let a: anyhow::Error = Error::peer_gone("scale stage hung up").context("capture").into();
        assert_eq!(format!("{a:#}"), "capture: scale stage hung up");
    }
}
