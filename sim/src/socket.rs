//! A rank's multicast socket in the simulator: a receive queue the network
//! fills and a send queue it drains, both bounded like the kernel's buffers.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ipmc::base::io::{send_one_by_one, DatagramIo};

/// Most datagrams one system call sends with UDP segmentation (Linux's
/// `UDP_MAX_SEGMENTS`), as the component's socket.
const SEGMENTS_PER_CALL: usize = 64;

/// What the network and the rank share of a socket.
#[derive(Default)]
pub struct SocketState {
    /// Datagrams received, oldest first, and their bytes.
    pub rx: VecDeque<Rc<[u8]>>,
    pub rx_bytes: usize,
    pub rcvbuf: usize,
    /// Datagrams sent since the network last looked, each with the
    /// socket's [`SocketState::messages`] and [`SocketState::bytes`] once
    /// the system call that sent it returned: the datagram leaves the host
    /// when the host's work up to there is done.
    pub tx: Vec<(Rc<[u8]>, u64, u64)>,
    /// Bytes one system call may send (UDP segmentation); 0: one datagram
    /// per call.
    pub call_bytes: usize,
    /// Bytes of this host's datagrams not yet on the wire.
    pub tx_queued: usize,
    pub sndbuf: usize,
    /// A send found the buffer full: wake the rank when it drains.
    pub blocked: bool,
    /// Datagrams and bytes through the socket since the host's cost was
    /// last charged.
    pub messages: u64,
    pub bytes: u64,
}

/// The [`DatagramIo`] of a simulated rank.
pub struct SimSocket(pub Rc<RefCell<SocketState>>);

impl DatagramIo for SimSocket {
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<bool> {
        let mut s = self.0.borrow_mut();
        // As Linux does, a datagram goes whenever the buffer is not full
        // yet, however long it is.
        if s.tx_queued > 0 && s.tx_queued + datagram.len() > s.sndbuf {
            s.blocked = true;
            return Ok(false);
        }
        s.tx_queued += datagram.len();
        s.messages += 1;
        s.bytes += datagram.len() as u64;
        let (m, b) = (s.messages, s.bytes);
        s.tx.push((datagram.into(), m, b));
        Ok(true)
    }

    fn batch_limit(&self) -> usize {
        if self.0.borrow().call_bytes > 0 {
            SEGMENTS_PER_CALL
        } else {
            1
        }
    }

    /// As many system calls as the component's socket makes for `batch`:
    /// each call's datagrams leave once the whole call is paid for.
    fn send_batch(&mut self, batch: &[u8], len: usize) -> std::io::Result<usize> {
        let len = len.max(1);
        let per_call = (self.0.borrow().call_bytes / len).clamp(1, SEGMENTS_PER_CALL);
        let mut sent = 0;
        for call in batch.chunks(per_call * len) {
            let before = self.0.borrow().tx.len();
            let n = match send_one_by_one(self, call, len) {
                Ok(n) => n,
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            };
            let mut s = self.0.borrow_mut();
            let (m, b) = (s.messages, s.bytes);
            for t in &mut s.tx[before..] {
                (t.1, t.2) = (m, b);
            }
            sent += n;
            if n < call.len().div_ceil(len) {
                break;
            }
        }
        Ok(sent)
    }

    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<(usize, bool)>> {
        let mut s = self.0.borrow_mut();
        let Some(d) = s.rx.pop_front() else {
            return Ok(None);
        };
        s.rx_bytes -= d.len();
        s.messages += 1;
        s.bytes += d.len() as u64;
        // As the kernel does, a datagram longer than the buffer is cut.
        let n = d.len().min(buf.len());
        buf[..n].copy_from_slice(&d[..n]);
        Ok(Some((n, false)))
    }

    fn group(&self) -> String {
        "simulated group".into()
    }
}
