//! One broadcast's protocol state (`protocol::two_stage::Broadcast`) fed any
//! sequence of datagrams, chain frames, `NEED` replies and flow control
//! reports from its neighbours, interleaved with the steps a driver takes:
//! it never panics, and it never claims bytes that no input carried.
#![no_main]

use std::time::Duration;

use ipmc::protocol::datagram::{encode, Auth, Header, Protection};
use ipmc::protocol::two_stage::{Broadcast, Params};
use libfuzzer_sys::fuzz_target;

/// Reads the fuzzer's bytes front to back; zeros once they run out.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        *first
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let size = 2 + usize::from(input.byte() % 7);
    let vrank = usize::from(input.byte()) % size;
    let params = Params {
        comm_id: 7,
        bcast: u64::from(input.byte() % 3),
        size,
        vrank,
        message_len: usize::from(input.u16()),
        fragment_size: 1 + usize::from(input.u16() % 4096),
        auth: Auth::crc(true),
        root_wait: Duration::ZERO,
        window: u32::from(input.byte() % 8),
        frame_bytes: usize::from(input.u16()),
    };
    let prot = Protection::new(params.auth);
    let mut b = Broadcast::new(params);
    let mut now = Duration::ZERO;
    if b.params().vrank == 0 {
        b.start_root(now);
    }
    let mut out = Vec::new();
    while !input.0.is_empty() {
        now += Duration::from_micros(u64::from(input.byte()));
        let len = usize::from(input.u16() % 5000);
        match input.byte() % 9 {
            0 => {
                let _ = b.on_datagram(input.bytes(len));
            }
            1 => {
                // A well-formed datagram of some fragment, which the deep
                // checks (lengths, indices, broadcast numbers) then judge.
                let h = Header {
                    comm_id: 7,
                    bcast: u64::from(input.byte() % 3),
                    message_len: u64::from(input.u16()),
                    fragment: u32::from(input.u16()),
                };
                encode(&h, input.bytes(len.min(4096)), &prot, &mut out);
                let _ = b.on_datagram(&out);
            }
            2 => {
                let _ = b.on_chain(input.bytes(len));
            }
            3 => {
                let _ = b.on_reply(input.bytes(len));
            }
            4 => {
                let child = usize::from(input.byte());
                let _ = b.on_report(child, input.bytes(len % 16));
            }
            5 => {
                let _ = b.next_multicasts(now, 1 + len % 8, &mut out);
                b.multicast_sent(len % 4);
            }
            6 => {
                let _ = b.next_chain_send(&mut out);
                let _ = b.next_reply(&mut out);
            }
            7 => {
                let _ = b.next_report(&mut out);
                let _ = (b.wake_at(), b.is_done(), b.flow_done());
            }
            _ => {
                let _ = (b.need_due(), b.report_due(), b.reply_may_come());
            }
        }
    }
    // Every fragment counts once, by whichever path brought it first.
    let came = b.bytes_by_multicast() + b.bytes_by_chain();
    assert!(came <= b.params().message_len as u64, "{came} bytes came");
});
