//! How a communicator's ranks spread over nodes (hosts): what decides whether
//! multicast can pay off (thesis §3.5 counts nodes, each of which ran one
//! process) and whether a communicator is node-local, which Open MPI's own
//! shared-memory broadcast serves best.

use std::collections::HashMap;

/// The nodes of one communicator. Built from facts every rank sees alike (the
/// node, host name and boot id, every rank published), so every rank counts
/// the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nodes {
    /// Distinct nodes the communicator spans.
    pub count: usize,
    /// The most ranks any one node holds.
    pub max_ranks: usize,
}

impl Nodes {
    /// From the host name of every rank, in rank order.
    pub fn from_hosts<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        let mut per_host: HashMap<String, usize> = HashMap::new();
        for host in hosts {
            *per_host.entry(host.as_ref().to_owned()).or_default() += 1;
        }
        Nodes {
            count: per_host.len(),
            max_ranks: per_host.values().copied().max().unwrap_or(0),
        }
    }

    /// Every rank a node of its own (`coll_ipmc_ranks_are_nodes`).
    pub fn one_per_rank(size: usize) -> Self {
        Nodes {
            count: size,
            max_ranks: usize::from(size > 0),
        }
    }

    /// Whether all ranks share one node.
    pub fn is_single(&self) -> bool {
        self.count <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_hosts_and_the_fullest_one() {
        let n = Nodes::from_hosts(["a", "b", "a", "c", "a"]);
        assert_eq!(
            n,
            Nodes {
                count: 3,
                max_ranks: 3
            }
        );
        assert!(!n.is_single());
        let one = Nodes::from_hosts(["h"; 8]);
        assert_eq!(
            one,
            Nodes {
                count: 1,
                max_ranks: 8
            }
        );
        assert!(one.is_single());
        assert_eq!(
            Nodes::one_per_rank(5),
            Nodes {
                count: 5,
                max_ranks: 1
            }
        );
        assert!(!Nodes::one_per_rank(2).is_single());
    }

    #[test]
    fn the_count_does_not_depend_on_rank_order() {
        let hosts = ["n1", "n2", "n1", "n3", "n2", "n1"];
        let mut reversed = hosts;
        reversed.reverse();
        assert_eq!(Nodes::from_hosts(hosts), Nodes::from_hosts(reversed));
    }
}
