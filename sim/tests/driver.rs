//! The component's own driver (`ipmc::driver::multicast::Driver`) on simulated
//! clusters: what the multicast delivers, what the chain repairs, what is
//! never taken, and what repair costs as the ring grows.

use ipmc::protocol::datagram::{Auth, Key, KEY_LEN};
use ipmc::protocol::two_stage::Verdict;
use ipmc_sim::engine::Outcome;
use ipmc_sim::network::{Faults, Network};
use ipmc_sim::scenario::{Algorithm, Scenario};

fn ipmc(nodes: usize, size: usize, net: Network) -> Scenario {
    let mut s = Scenario::new(nodes, size, net);
    s.algorithm = Algorithm::Ipmc;
    s
}

fn run(s: &Scenario) -> Outcome {
    s.run().unwrap_or_else(|e| panic!("{e}\n{s:?}"))
}

/// The non-root ranks' counters.
fn receivers(s: &Scenario, out: &Outcome) -> Vec<ipmc::base::counters::Datagrams> {
    (0..s.nodes)
        .filter(|&r| r != s.root)
        .map(|r| out.datagrams[r])
        .collect()
}

#[test]
fn a_perfect_network_delivers_everything_by_multicast() {
    for fragment in [1000, 4096] {
        for size in [1, fragment - 1, fragment, fragment + 1, 5 * fragment] {
            for nodes in [2, 3, 7, 33] {
                let mut s = ipmc(nodes, size, Network::emulated());
                s.ipmc.fragment_size = fragment;
                s.root = nodes / 2;
                let out = run(&s);
                for d in receivers(&s, &out) {
                    assert_eq!(d.bytes_multicast, size as u64, "{s:?}");
                    assert_eq!(d.bytes_chain, 0, "the chain carried data: {s:?}");
                }
            }
        }
    }
}

#[test]
fn total_loss_delivers_everything_by_the_chain() {
    let net = Network {
        loss: 1.0,
        ..Network::emulated()
    };
    for (nodes, size) in [(2, 5000), (5, 70_000), (17, 300_000)] {
        let s = ipmc(nodes, size, net.clone());
        let out = run(&s);
        for d in receivers(&s, &out) {
            assert_eq!(d.bytes_multicast, 0);
            assert_eq!(d.bytes_chain, size as u64);
        }
    }
}

/// Genuine datagrams of another communicator or of later broadcasts, valid
/// under the key (or unprotected), are never taken: every rank still ends
/// with the root's bytes (the run checks them), and the ranks counted them
/// as what they are.
#[test]
fn foreign_datagrams_are_never_taken() {
    let key = Key([9; KEY_LEN]);
    for auth in [
        Auth::Tag(key),
        Auth::Encrypt(key),
        Auth::crc(true),
        Auth::crc(false),
    ] {
        let net = Network {
            loss: 0.05,
            faults: Faults {
                foreign: 0.5,
                ..Faults::default()
            },
            ..Network::emulated()
        };
        let mut s = ipmc(9, 200_000, net);
        s.ipmc.auth = auth;
        let out = run(&s);
        // Those of later broadcasts are kept for them, uncounted until then.
        let mut comm = 0;
        for d in receivers(&s, &out) {
            comm += d.verdict(Verdict::WrongComm);
            assert_eq!(d.bytes_multicast + d.bytes_chain, 200_000);
        }
        assert!(
            comm > 0,
            "{auth:?}: no datagram of another communicator came"
        );
        assert!(
            out.counters.faulty > comm,
            "{auth:?}: no later broadcast's came"
        );
    }
}

#[test]
fn an_empty_message_is_done_at_once() {
    let out = run(&ipmc(16, 0, Network::emulated()));
    assert_eq!(out.counters.datagrams_sent, 0);
    assert!(out.completion_max_ns() < 1_000_000, "{out:?}");
}

/// Under loss a rank asks its predecessor once and gets what it lacks, so
/// repair does not walk the ring: 512 ranks pay about what 8 pay.
#[test]
fn repair_costs_about_the_same_on_a_ring_of_8_or_512() {
    let net = Network {
        loss: 0.03,
        ..Network::emulated()
    };
    let median = |nodes: usize| {
        let mut t: Vec<u64> = (0..5)
            .map(|seed| {
                let mut s = ipmc(nodes, 65536, net.clone());
                s.seed = seed;
                run(&s).completion_max_ns()
            })
            .collect();
        t.sort_unstable();
        t[2] as f64
    };
    let (small, large) = (median(8), median(512));
    assert!(
        large < 1.3 * small,
        "8 ranks: {small} ns, 512 ranks: {large} ns"
    );
}

#[test]
fn every_loss_level_ends_with_the_roots_bytes() {
    for loss in [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0] {
        for (nodes, size) in [(2, 4097), (9, 65536), (64, 20_000)] {
            let net = Network {
                loss,
                ..Network::emulated()
            };
            let s = ipmc(nodes, size, net);
            let out = run(&s);
            for d in receivers(&s, &out) {
                assert_eq!(d.bytes_multicast + d.bytes_chain, size as u64, "{s:?}");
            }
        }
    }
}

/// Calls of `MPI_Bcast` one after another with changing roots and lengths,
/// as a program makes them: every call returns with the root's bytes (the
/// run checks them), no receive or message is left over at the end (the
/// run fails otherwise: it would meet a later broadcast), and each rank
/// received exactly the bytes of every call it was not the root of.
#[test]
fn back_to_back_broadcasts_with_changing_roots_deliver_every_byte() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    for (seed, loss) in [0.0, 0.05, 0.3, 1.0].into_iter().enumerate() {
        for nodes in [2, 5, 17] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed as u64);
            let net = Network {
                loss,
                burst: 2.0,
                ..Network::emulated()
            };
            let mut s = ipmc(nodes, 0, net);
            s.calls = (0..6)
                .map(|_| {
                    let root = rng.next_u64() as usize % nodes;
                    let len = [0, 1, 4096, 10_000, 70_000][rng.next_u64() as usize % 5];
                    (root, len)
                })
                .collect();
            s.seed = seed as u64;
            let out = run(&s);
            for (rank, d) in out.datagrams.iter().enumerate() {
                let expected: usize = s
                    .calls
                    .iter()
                    .filter(|&&(root, _)| root != rank)
                    .map(|&(_, len)| len)
                    .sum();
                assert_eq!(
                    d.bytes_multicast + d.bytes_chain,
                    expected as u64,
                    "rank {rank}: {s:?}"
                );
            }
        }
    }
}

/// A call returns once the rank owns the message and leaves the rest to the
/// background, so a root starts its next broadcast at once and broadcasts
/// back to back pipeline on the wire: 20 of 64 KiB on 16 nodes take little
/// more than 20 wire times. Above `background_limit` a call returns only
/// once it has served its successor, and the root, which waits for its
/// successor's `NEED` in every call, is done with its calls later.
#[test]
fn early_returning_ranks_pipeline_back_to_back_broadcasts() {
    let mut s = ipmc(16, 65536, Network::emulated());
    s.calls = vec![(0, 65536); 20];
    let out = run(&s);
    let pipelined = out.completion_max_ns();
    let wire = 20 * s.wire_ns();
    assert!(
        (pipelined as f64) < 1.12 * wire as f64,
        "20 broadcasts took {pipelined} ns, 20 wire times are {wire} ns"
    );
    let root_free = out.returned_ns[0];
    s.ipmc.background_limit = 0;
    let held = run(&s).returned_ns[0];
    assert!(
        held > root_free,
        "root held {held} ns, early {root_free} ns"
    );
}

/// 10 Gbit/s links, host costs of one datagram per system call: the hosts,
/// not the links, are the limit.
fn ten_gigabit() -> Network {
    Network {
        rate_bps: 10_000_000_000,
        bucket: 256 << 10,
        ..Network::emulated()
    }
}

/// Flow control: receivers slower than the root lose no datagram to their
/// receive buffers (without it they lose thousands). (Since the chain
/// repairs a block of fragments per frame, the slowest rank is done no
/// later without flow control here: `docs/flow-control.md`.)
#[test]
fn slow_receivers_lose_nothing_to_their_buffers() {
    let net = Network {
        slow_hosts: 2,
        slow_factor: 2.0,
        ..ten_gigabit()
    };
    let mut s = ipmc(8, 16 << 20, net);
    let paced = run(&s);
    assert_eq!(paced.counters.rcvbuf_drops, 0);
    // The chain carries at most the tail of datagrams still on their way
    // when a slow rank asked (a frame of a block can overtake them), not
    // losses.
    for d in receivers(&s, &paced) {
        assert!(d.bytes_chain < (16 << 20) / 8, "{d:?}");
    }
    s.ipmc.flow_window = usize::MAX;
    let unpaced = run(&s);
    assert!(
        unpaced.counters.rcvbuf_drops > 1000,
        "{:?}",
        unpaced.counters
    );
}

/// A receiver that stops for 10 ms costs about 10 ms, and no datagram.
#[test]
fn a_stalled_receiver_costs_time_not_bytes() {
    let s = ipmc(8, 16 << 20, ten_gigabit());
    let steady = run(&s).completion_max_ns();
    let stall = 10_000_000;
    let stalled = Scenario {
        net: Network {
            stall: Some((3, 2_000_000, stall)),
            ..ten_gigabit()
        },
        ..s.clone()
    };
    let out = run(&stalled);
    assert_eq!(out.counters.rcvbuf_drops, 0);
    assert!(
        out.completion_max_ns() < steady + stall + stall / 5,
        "{} µs, steady {} µs",
        out.completion_max_ns() / 1000,
        steady / 1000
    );
}

/// A rank whose predecessor on the ring stalls returns once it owns the
/// message and has served its successor, without waiting for the late
/// rank's `END`: ranks 2 and 3 of 4 return about when flow control stops
/// waiting for rank 1 (two stall limits), long before rank 1 wakes. The
/// message lies in the caller's memory (beyond the background limit).
#[test]
fn a_rank_after_a_stalled_one_returns_without_it() {
    let stall = 300_000_000;
    let s = ipmc(
        4,
        16 << 20,
        Network {
            stall: Some((1, 0, stall)),
            ..ten_gigabit()
        },
    );
    assert!(s.size > s.ipmc.background_limit, "{s:?}");
    let out = run(&s);
    let t = &out.returned_ns;
    assert!(t[0] > stall && t[1] > stall, "{t:?}");
    assert!(t[2] < stall * 2 / 3 && t[3] < stall * 2 / 3, "{t:?}");
}

/// Small windows on rings larger than a node's children (reports pass
/// through inner ranks), with loss up to total: every byte arrives, and a
/// root whose receivers cannot report still finishes (after its stall
/// limit).
#[test]
fn reports_climb_the_tree_whatever_is_lost() {
    for (nodes, loss) in [(3, 0.0), (20, 0.0), (40, 0.05), (75, 0.3), (9, 1.0)] {
        let net = Network {
            loss,
            ..ten_gigabit()
        };
        let mut s = ipmc(nodes, 1 << 20, net);
        s.ipmc.flow_window = 64 << 10;
        s.root = nodes / 3;
        let out = run(&s);
        for d in receivers(&s, &out) {
            assert_eq!(d.bytes_multicast + d.bytes_chain, 1 << 20, "{s:?}");
        }
        if loss == 0.0 {
            assert_eq!(out.counters.rcvbuf_drops, 0);
        }
    }
}
