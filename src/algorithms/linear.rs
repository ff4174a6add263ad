//! The improved linear broadcast (thesis §1.5.1): the root starts a
//! non-blocking send to every other rank and waits for all of them, so a late
//! rank delays only itself.

use crate::base::error::Result;
use crate::base::transport::Transport;

/// Broadcasts the transport's buffer from `root` to every rank.
pub fn bcast<T: Transport>(t: &mut T, root: usize) -> Result<()> {
    let len = t.len();
    if t.rank() == root {
        let mut reqs = Vec::with_capacity(t.size().saturating_sub(1));
        for peer in (0..t.size()).filter(|&p| p != root) {
            reqs.push(t.isend(0..len, peer)?);
        }
        t.wait_all(&reqs)
    } else {
        let req = t.irecv(0..len, root)?;
        t.wait_all(&[req])
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::test_net::run_bcast;

    #[test]
    fn every_rank_gets_the_roots_bytes() {
        for size in [2, 3, 5, 8] {
            for root in 0..size {
                for len in [1, 7, 4096, 100_003] {
                    run_bcast(size, root, len, super::bcast);
                }
            }
        }
    }
}
