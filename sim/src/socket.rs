//! A rank's multicast socket in the simulator: a receive queue the network
//! fills and a send queue it drains, both bounded like the kernel's buffers.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ipmc::base::io::DatagramIo;

/// What the network and the rank share of a socket.
#[derive(Default)]
pub struct SocketState {
    /// Datagrams received, oldest first, and their bytes.
    pub rx: VecDeque<Rc<[u8]>>,
    pub rx_bytes: usize,
    pub rcvbuf: usize,
    /// Datagrams sent since the network last looked.
    pub tx: Vec<Rc<[u8]>>,
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
        s.tx.push(datagram.into());
        Ok(true)
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
