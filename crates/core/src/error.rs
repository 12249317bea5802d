//! The conditions callers branch on, as one enum matched by variant.
//!
//! Everything else stays an [`anyhow::Error`] with context; these are the failures a
//! caller decides on (stop quietly, drop a consumer, exit 3). Where one travels inside an
//! anyhow chain, [`Error::find`] is the one place that chain is searched for it.

/// A condition a caller matches on. The Display text is the bare description (users and
/// the integration tests read it in `zcpipe: error: ...` lines).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A neighbouring stage went away: its control socket (or data socket) hung up, seen
    /// where the hang-up was detected. A secondary failure: the neighbour reports its own
    /// cause, so the stage that sees this stops quietly (the command line exits 3 for it).
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
}

impl Error {
    /// A hang-up described by `what` (`"infer stage hung up"`).
    pub fn peer_gone(what: impl Into<String>) -> Error {
        Error::PeerGone { what: what.into() }
    }

    /// A corrupt ring described by `what`.
    pub(crate) fn ring_corrupt(what: impl Into<String>) -> Error {
        Error::RingCorrupt { what: what.into() }
    }

    /// The condition `e` carries (it, or any error in its chain), if any: the boundary
    /// where an anyhow chain gives back its typed condition, to `match` on.
    pub fn find(e: &anyhow::Error) -> Option<&Error> {
        e.chain().find_map(|c| c.downcast_ref::<Error>())
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use anyhow::Context;

    #[test]
    fn found_through_context_with_the_same_text() {
        let e: anyhow::Error = Error::peer_gone("infer stage hung up").into();
        let e = Err::<(), _>(e).context("reading a frame").unwrap_err();
        assert_eq!(format!("{e:#}"), "reading a frame: infer stage hung up");
        assert!(matches!(Error::find(&e), Some(Error::PeerGone { what }) if what == "infer stage hung up"));
        let c: anyhow::Error = Error::ring_corrupt("bad head").into();
        assert!(matches!(Error::find(&c), Some(Error::RingCorrupt { .. })));
        assert!(Error::find(&anyhow::anyhow!("plain")).is_none());
    }
}
