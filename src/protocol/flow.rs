//! Flow control of stage 1: the root never runs more than a window of
//! datagrams ahead of its slowest receiver (`docs/flow-control.md`).
//!
//! A receiver's *progress* is how far along the message the datagrams it took
//! from its socket are: the root multicasts in order, so once a datagram of
//! fragment `k` came, nothing before it waits in the socket any more, lost or
//! not. Progress is reported at *checkpoints*, every `step` fragments, up a
//! tree of the ranks rooted at the root: a rank reports checkpoint `j` once
//! it and its whole subtree are past it, so the root learns the slowest
//! receiver's progress from its children alone, in log(p) hops, and no rank
//! sends or receives more than `FANOUT + 1` reports per checkpoint, whatever
//! p. The root may multicast fragment `k` once `k < window + step × j`, `j`
//! the checkpoint every child reported. No datagram is acknowledged.
//!
//! Reports are cumulative (`u32`, little-endian: the highest checkpoint
//! passed) and strictly increasing, and the last one every rank sends names
//! the last checkpoint, so a parent keeps one receive posted per child until
//! that one came and nothing is left for a later broadcast. A receiver that
//! knows stage 1 is over (the message's last datagram or the chain's `END`
//! came, or it owns everything) is past every checkpoint, so loss never
//! withholds a report for good; a root whose receivers report nothing for
//! [`STALL_LIMIT`] (every datagram of a window lost, a receiver stopped)
//! sends one more window without waiting, and after a second such stall of
//! the same broadcast leaves the children that hold it back out of its
//! credit: the others pace it, and a child is counted again once its
//! reports no longer hold the root back. The chain repairs what that costs.
//! A receiver stopped for a little longer than the limit is then overrun by
//! at most a window, one still computing, or one that lost every datagram,
//! holds the root back by two limits at most, and it alone loses datagrams:
//! the rest of the message is not sent unpaced to every receiver.
//!
//! The tree numbers the ranks from the root backwards along the ring (node
//! `i` is the rank at distance `size - i` from the root), so that no report
//! goes where the chain's frames or `NEED` go, except from the rank after the
//! root, a leaf, when the root is its parent: it sends its last report before
//! its `NEED` (both are due at the same moment), and the root receives the
//! `NEED` after that report.

use std::time::Duration;

/// Children per rank in the reporting tree: depth 4 for 4,096 ranks.
pub const FANOUT: usize = 8;
/// How long a root out of credit waits for a report before it grants
/// itself more ([`Flow::stalled`]): longer than a receiver's usual stalls,
/// so a stall costs time, not bytes.
pub const STALL_LIMIT: Duration = Duration::from_millis(50);
/// Bytes of a report.
pub const REPORT_LEN: usize = 4;

/// A report that cannot be what the child sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportError {
    /// Not [`REPORT_LEN`] bytes.
    BadLength,
    /// Not above the child's last report, beyond the last checkpoint, or
    /// from a rank that is not a child.
    BadCheckpoint,
}

/// One rank's part in the flow control of one broadcast.
#[derive(Clone, Debug)]
pub struct Flow {
    window: u32,
    step: u32,
    /// Checkpoints of this broadcast: 0 when the message fits the window.
    checkpoints: u32,
    parent: Option<usize>,
    children: Vec<usize>,
    /// The highest checkpoint each child reported.
    reported_by: Vec<u32>,
    /// Root: the children left out of its credit after a stall.
    left_out: Vec<bool>,
    /// Non-root: fragments this rank is past, and the highest checkpoint it
    /// reported to its parent.
    progress: u32,
    reported: u32,
    /// Root: the credit it granted itself after stalls, and how many.
    granted: u32,
    stalls: u32,
}

/// A rank's node in the reporting tree, from its distance to the root.
fn node_of(vrank: usize, size: usize) -> usize {
    (size - vrank) % size
}

fn vrank_of(node: usize, size: usize) -> usize {
    (size - node) % size
}

impl Flow {
    /// Flow control of a message of `fragments` on the rank at distance
    /// `vrank` from the root of `size` ranks, with a window of `window`
    /// fragments (0: none). Parent and children are distances from the root.
    pub fn new(fragments: u32, window: u32, size: usize, vrank: usize) -> Self {
        let window = if window == 0 { u32::MAX } else { window };
        let step = (window / 2).max(1);
        let checkpoints = fragments.saturating_sub(window).div_ceil(step);
        let node = node_of(vrank, size);
        let (parent, children) = if checkpoints == 0 {
            (None, Vec::new())
        } else {
            let parent = (node > 0).then(|| vrank_of((node - 1) / FANOUT, size));
            let first = node * FANOUT + 1;
            let children = (first..(first + FANOUT).min(size))
                .map(|n| vrank_of(n, size))
                .collect();
            (parent, children)
        };
        Flow {
            window,
            step,
            checkpoints,
            reported_by: vec![0; children.len()],
            left_out: vec![false; children.len()],
            parent,
            children,
            progress: 0,
            reported: 0,
            granted: 0,
            stalls: 0,
        }
    }

    /// Checkpoints of this broadcast.
    pub fn checkpoints(&self) -> u32 {
        self.checkpoints
    }

    /// The parent to report to (a distance from the root), if any.
    pub fn parent(&self) -> Option<usize> {
        self.parent
    }

    /// Root: the fragments it may have multicast by now.
    pub fn credit(&self, fragments: u32) -> u32 {
        if self.checkpoints == 0 {
            return fragments;
        }
        let passed = self.counted_passed().unwrap_or(self.checkpoints);
        self.step
            .saturating_mul(passed)
            .saturating_add(self.window)
            .max(self.granted)
            .min(fragments)
    }

    /// Root: no report came for [`STALL_LIMIT`] while it had multicast
    /// `sent` fragments and had no credit for more: it may send one more
    /// window, and after a second stall leaves out of its credit the
    /// children that hold it back (with none left, it sends the rest).
    pub fn stalled(&mut self, sent: u32) {
        if self.stalls == 0 {
            self.granted = self.granted.max(sent.saturating_add(self.window));
        } else if let Some(slowest) = self.counted_passed() {
            for (out, &r) in self.left_out.iter_mut().zip(&self.reported_by) {
                *out |= r == slowest;
            }
        }
        self.stalls += 1;
    }

    /// Root, having multicast `sent` fragments: a child left out of its
    /// credit is counted again once its reports would let the root have
    /// sent them, so that it paces the root again without holding it back.
    pub fn count_again(&mut self, sent: u32) {
        let (step, window) = (self.step, self.window);
        for (out, &r) in self.left_out.iter_mut().zip(&self.reported_by) {
            *out &= step.saturating_mul(r).saturating_add(window) < sent;
        }
    }

    /// Root: the stalls of this broadcast so far.
    pub fn stalls(&self) -> u32 {
        self.stalls
    }

    /// Non-root: a datagram of fragment `k` came (or every one did: `k` is
    /// the last).
    pub fn passed(&mut self, k: u32) {
        self.progress = self.progress.max(k.saturating_add(1));
    }

    /// The checkpoint every child reported; `None` without children.
    fn subtree_passed(&self) -> Option<u32> {
        self.reported_by.iter().copied().min()
    }

    /// Root: the checkpoint every child its credit counts reported; `None`
    /// when it counts none.
    fn counted_passed(&self) -> Option<u32> {
        self.reported_by
            .iter()
            .zip(&self.left_out)
            .filter(|&(_, &out)| !out)
            .map(|(&r, _)| r)
            .min()
    }

    /// Non-root: the report due to the parent now, if one is: the highest
    /// checkpoint this rank and its subtree are past, when above the last
    /// one reported. `stage1_over`: this rank knows stage 1 is over.
    pub fn report_due(&self, stage1_over: bool) -> Option<u32> {
        self.parent?;
        let own = if stage1_over {
            self.checkpoints
        } else {
            (self.progress / self.step).min(self.checkpoints)
        };
        let passed = self.subtree_passed().map_or(own, |c| c.min(own));
        (passed > self.reported).then_some(passed)
    }

    /// The report [`Flow::report_due`] gave was sent.
    pub fn reported(&mut self, checkpoint: u32) {
        self.reported = self.reported.max(checkpoint);
    }

    /// The children whose last report has not come: a receive stays posted
    /// for each.
    pub fn children_pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.children
            .iter()
            .zip(&self.reported_by)
            .filter(|&(_, &r)| r < self.checkpoints)
            .map(|(&c, _)| c)
    }

    /// Whether `child`'s last report is still to come.
    pub fn awaits(&self, child: usize) -> bool {
        self.children_pending().any(|c| c == child)
    }

    /// A report from `child` (a distance from the root).
    pub fn on_report(&mut self, child: usize, bytes: &[u8]) -> Result<(), ReportError> {
        let bytes: [u8; REPORT_LEN] = bytes.try_into().map_err(|_| ReportError::BadLength)?;
        let checkpoint = u32::from_le_bytes(bytes);
        let i = self
            .children
            .iter()
            .position(|&c| c == child)
            .ok_or(ReportError::BadCheckpoint)?;
        if checkpoint <= self.reported_by[i] || checkpoint > self.checkpoints {
            return Err(ReportError::BadCheckpoint);
        }
        self.reported_by[i] = checkpoint;
        Ok(())
    }

    /// Whether this rank's reports are all sent and its children's all came.
    pub fn is_done(&self) -> bool {
        let sent = self.parent.is_none() || self.reported == self.checkpoints;
        sent && self.children_pending().next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's parent and children agree, the tree spans the ranks,
    /// and no report goes where the chain's frames or `NEED` go (a rank's
    /// successor or predecessor on the ring) except from the root's
    /// successor, a leaf.
    #[test]
    fn the_tree_spans_the_ranks_and_avoids_the_chain() {
        for size in 1..200 {
            let flows: Vec<Flow> = (0..size).map(|v| Flow::new(1000, 8, size, v)).collect();
            let mut reached = vec![false; size];
            reached[0] = true;
            for (v, f) in flows.iter().enumerate() {
                assert_eq!(f.parent.is_none(), v == 0, "size {size} vrank {v}");
                for &c in &f.children {
                    assert_eq!(flows[c].parent, Some(v));
                    reached[c] = true;
                    let succ = (v + 1) % size;
                    let pred = (v + size - 1) % size;
                    if c == succ {
                        assert_eq!(v, 0);
                        assert!(flows[c].children.is_empty());
                    }
                    // The last rank sends the root no chain frame.
                    assert!(c != pred || v == 0);
                }
            }
            assert!(reached.iter().all(|&r| r), "size {size}");
        }
    }

    #[test]
    fn a_message_within_the_window_has_no_checkpoints() {
        let f = Flow::new(64, 64, 16, 0);
        assert_eq!(f.checkpoints(), 0);
        assert_eq!(f.credit(64), 64);
        assert!(f.is_done());
        assert_eq!(Flow::new(1000, 0, 16, 3).checkpoints(), 0);
        assert_eq!(Flow::new(1000, 0, 16, 3).report_due(false), None);
    }

    #[test]
    fn credit_follows_the_slowest_subtree() {
        // 3 ranks: the root's children are distances 2 and 1.
        let (fragments, window) = (100, 20);
        let mut root = Flow::new(fragments, window, 3, 0);
        let mut a = Flow::new(fragments, window, 3, 1);
        let mut b = Flow::new(fragments, window, 3, 2);
        assert_eq!(root.checkpoints(), 8);
        assert_eq!(root.credit(fragments), 20);
        a.passed(29);
        b.passed(8);
        let ra = a.report_due(false).unwrap();
        assert_eq!(ra, 3);
        a.reported(ra);
        assert_eq!(a.report_due(false), None);
        assert_eq!(b.report_due(false), None);
        root.on_report(1, &ra.to_le_bytes()).unwrap();
        assert_eq!(root.credit(fragments), 20, "held back by distance 2");
        b.passed(10);
        let rb = b.report_due(false).unwrap();
        root.on_report(2, &rb.to_le_bytes()).unwrap();
        assert_eq!(root.credit(fragments), 30);
        // Stage 1 over: the last checkpoint is due, whatever was lost.
        assert_eq!(b.report_due(true), Some(8));
        b.reported(8);
        assert!(b.is_done());
        assert!(!root.is_done());
        assert_eq!(
            root.on_report(2, &rb.to_le_bytes()),
            Err(ReportError::BadCheckpoint)
        );
        assert_eq!(
            root.on_report(2, &9u32.to_le_bytes()),
            Err(ReportError::BadCheckpoint)
        );
        assert_eq!(
            root.on_report(5, &1u32.to_le_bytes()),
            Err(ReportError::BadCheckpoint)
        );
        assert_eq!(root.on_report(1, &[1]), Err(ReportError::BadLength));
    }

    /// A first stall grants one window past what was sent; reports that
    /// catch up take over from it; a second stall, with every child holding
    /// the root back, grants everything.
    #[test]
    fn a_stall_grants_a_window_and_a_second_the_rest() {
        let (fragments, window) = (1000, 20);
        let mut root = Flow::new(fragments, window, 3, 0);
        assert_eq!(root.credit(fragments), 20);
        root.stalled(20);
        assert_eq!(root.credit(fragments), 40);
        assert_eq!(root.stalls(), 1);
        root.on_report(1, &30u32.to_le_bytes()).unwrap();
        root.on_report(2, &30u32.to_le_bytes()).unwrap();
        assert_eq!(root.credit(fragments), 320);
        root.stalled(320);
        assert_eq!(root.credit(fragments), fragments);
        assert_eq!(root.stalls(), 2);
    }

    /// A child still computing is left out at the second stall; the other
    /// goes on pacing the root; the late one is counted again once its
    /// reports no longer hold the root back.
    #[test]
    fn a_late_child_is_left_out_and_the_others_pace_the_root() {
        let (fragments, window) = (1000, 20);
        let mut root = Flow::new(fragments, window, 3, 0);
        root.on_report(2, &1u32.to_le_bytes()).unwrap();
        root.stalled(20);
        assert_eq!(root.credit(fragments), 40);
        root.stalled(40);
        assert_eq!(root.credit(fragments), 40, "distance 2 still counts");
        root.on_report(2, &10u32.to_le_bytes()).unwrap();
        root.count_again(40);
        assert_eq!(root.credit(fragments), 120, "paced by distance 2 alone");
        // Distance 1 arrives and reads its buffer: still behind, left out.
        root.on_report(1, &2u32.to_le_bytes()).unwrap();
        root.count_again(120);
        assert_eq!(root.credit(fragments), 120);
        // Its reports catch up with what was sent: counted again.
        root.on_report(1, &11u32.to_le_bytes()).unwrap();
        root.count_again(120);
        assert_eq!(root.credit(fragments), 120);
        root.on_report(2, &30u32.to_le_bytes()).unwrap();
        assert_eq!(root.credit(fragments), 130, "held back by distance 1 again");
        assert_eq!(root.stalls(), 2);
    }

    #[test]
    fn an_inner_rank_reports_what_its_subtree_passed() {
        let size = 40;
        let (fragments, window) = (1000, 100);
        // Node 1 (distance 39) has children nodes 9..=16.
        let mut inner = Flow::new(fragments, window, size, 39);
        assert_eq!(inner.parent(), Some(0));
        let kids: Vec<usize> = inner.children_pending().collect();
        assert_eq!(kids, (9..=16).map(|n| size - n).collect::<Vec<_>>());
        inner.passed(999);
        assert_eq!(inner.report_due(false), None, "its children are behind");
        for &c in &kids {
            inner.on_report(c, &2u32.to_le_bytes()).unwrap();
        }
        assert_eq!(inner.report_due(false), Some(2));
    }
}
