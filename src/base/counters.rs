//! What a multicast driver did with datagrams and bytes, counted per
//! communicator: the component prints and exports them
//! ([`crate::component::stats`]), the simulator reports them.

use crate::protocol::two_stage::Verdict;

/// What the multicast algorithm did with datagrams and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Datagrams {
    /// Datagrams this rank multicast as a root.
    pub sent: u64,
    /// Times a datagram waited because the send buffer was full.
    pub send_full: u64,
    /// Datagrams the kernel refused to send (the chain delivers them).
    pub send_failed: u64,
    /// Times a root's receivers reported no progress for the flow control's
    /// stall limit and it sent on without them.
    pub flow_stalls: u64,
    /// Datagrams read from the socket (injected losses included).
    pub received: u64,
    /// Dropped on purpose by `coll_ipmc_inject_loss`.
    pub injected: u64,
    /// This rank's own datagrams, looped back.
    pub own: u64,
    /// What the protocol said about the rest.
    pub verdicts: [u64; VERDICTS.len()],
    /// Message bytes that first arrived by multicast, and by the chain.
    pub bytes_multicast: u64,
    pub bytes_chain: u64,
}

/// Every verdict, with its key in the report.
pub const VERDICTS: [(Verdict, &str); 10] = [
    (Verdict::Useful, "useful"),
    (Verdict::Duplicate, "dup"),
    (Verdict::Own, "root_own"),
    (Verdict::WrongComm, "rej_comm"),
    (Verdict::Stale, "rej_stale"),
    (Verdict::Future, "rej_future"),
    (Verdict::BadLength, "rej_length"),
    (Verdict::BadMagic, "rej_magic"),
    (Verdict::BadCrc, "rej_crc"),
    (Verdict::BadAuth, "rej_auth"),
];

impl Datagrams {
    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Datagrams) {
        self.sent += other.sent;
        self.send_full += other.send_full;
        self.send_failed += other.send_failed;
        self.flow_stalls += other.flow_stalls;
        self.received += other.received;
        self.injected += other.injected;
        self.own += other.own;
        for (mine, theirs) in self.verdicts.iter_mut().zip(other.verdicts) {
            *mine += theirs;
        }
        self.bytes_multicast += other.bytes_multicast;
        self.bytes_chain += other.bytes_chain;
    }

    pub fn count(&mut self, v: Verdict) {
        self.verdicts[Self::index(v)] += 1;
    }

    /// How many received datagrams got verdict `v`.
    pub fn verdict(&self, v: Verdict) -> u64 {
        self.verdicts[Self::index(v)]
    }

    fn index(v: Verdict) -> usize {
        VERDICTS
            .iter()
            .position(|(w, _)| *w == v)
            .expect("every verdict has a counter")
    }
}
