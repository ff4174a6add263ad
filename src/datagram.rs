//! The multicast datagram of ipmc (specified in `docs/datagram.md`).
//!
//! Unlike the thesis's format (3-byte sequence number, 1-byte broadcast id),
//! every datagram names the communicator instance it belongs to and a 64-bit
//! broadcast number that cannot wrap, and its exact length is checked. The
//! decoder takes any bytes and never panics.

/// First two bytes of every ipmc datagram.
pub const MAGIC: u16 = 0x4950; // "IP"
/// Version of this layout.
pub const VERSION: u8 = 1;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 36;
/// Bytes of the CRC-32 trailer, when present.
pub const CRC_LEN: usize = 4;
/// Largest payload a datagram can carry (its length field is 16 bits).
pub const MAX_PAYLOAD: usize = u16::MAX as usize;

const FLAG_CRC: u8 = 0x01;

/// The header fields of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Identifies one communicator instance of one job (drawn at setup).
    pub comm_id: u64,
    /// Counts the broadcasts on that communicator, from 0.
    pub bcast: u64,
    /// Length of the whole (packed) message in bytes.
    pub message_len: u64,
    /// Which fragment of the message the payload is.
    pub fragment: u32,
}

/// A decoded datagram, borrowing its payload from the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub header: Header,
    pub payload: &'a [u8],
}

/// Why a received datagram was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Shorter than a header, or its length disagrees with its payload length.
    BadLength,
    /// Not an ipmc datagram of this version.
    BadMagic,
    /// With CRC on, the trailer is missing or does not match; with CRC off, one is present.
    BadCrc,
}

/// Appends the datagram for `header` and `payload` to `out` (cleared first).
///
/// # Panics
/// If `payload` is longer than [`MAX_PAYLOAD`]: the fragment size is limited
/// far below that by its parameter's range.
pub fn encode(header: &Header, payload: &[u8], with_crc: bool, out: &mut Vec<u8>) {
    let len = u16::try_from(payload.len()).expect("payload fits a datagram");
    out.clear();
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.push(VERSION);
    out.push(if with_crc { FLAG_CRC } else { 0 });
    out.extend_from_slice(&header.comm_id.to_be_bytes());
    out.extend_from_slice(&header.bcast.to_be_bytes());
    out.extend_from_slice(&header.message_len.to_be_bytes());
    out.extend_from_slice(&header.fragment.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    debug_assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(payload);
    if with_crc {
        let crc = crc32fast::hash(out);
        out.extend_from_slice(&crc.to_be_bytes());
    }
}

fn be<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&bytes[at..at + N]);
    a
}

/// Decodes `bytes`; `with_crc` is this communicator's `use_crc_checking`.
pub fn decode(bytes: &[u8], with_crc: bool) -> Result<Datagram<'_>, Reject> {
    if bytes.len() < HEADER_LEN {
        return Err(Reject::BadLength);
    }
    if u16::from_be_bytes(be(bytes, 0)) != MAGIC || bytes[2] != VERSION || bytes[34..36] != [0, 0] {
        return Err(Reject::BadMagic);
    }
    if (bytes[3] & FLAG_CRC != 0) != with_crc || bytes[3] & !FLAG_CRC != 0 {
        return Err(Reject::BadCrc);
    }
    let payload_len = usize::from(u16::from_be_bytes(be(bytes, 32)));
    let trailer = if with_crc { CRC_LEN } else { 0 };
    if bytes.len() != HEADER_LEN + payload_len + trailer {
        return Err(Reject::BadLength);
    }
    let body_end = HEADER_LEN + payload_len;
    if with_crc && crc32fast::hash(&bytes[..body_end]) != u32::from_be_bytes(be(bytes, body_end)) {
        return Err(Reject::BadCrc);
    }
    Ok(Datagram {
        header: Header {
            comm_id: u64::from_be_bytes(be(bytes, 4)),
            bcast: u64::from_be_bytes(be(bytes, 12)),
            message_len: u64::from_be_bytes(be(bytes, 20)),
            fragment: u32::from_be_bytes(be(bytes, 28)),
        },
        payload: &bytes[HEADER_LEN..body_end],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const H: Header = Header {
        comm_id: 0x0123_4567_89ab_cdef,
        bcast: 1 << 40,
        message_len: 10_000,
        fragment: 2,
    };

    #[test]
    fn round_trip_with_and_without_crc() {
        let mut buf = Vec::new();
        for with_crc in [true, false] {
            for payload in [&b""[..], b"x", &[7u8; 4096][..]] {
                encode(&H, payload, with_crc, &mut buf);
                let trailer = if with_crc { CRC_LEN } else { 0 };
                assert_eq!(buf.len(), HEADER_LEN + payload.len() + trailer);
                let d = decode(&buf, with_crc).unwrap();
                assert_eq!((d.header, d.payload), (H, payload));
                assert_eq!(decode(&buf, !with_crc), Err(Reject::BadCrc));
            }
        }
    }

    #[test]
    fn layout_is_the_documented_one() {
        let mut buf = Vec::new();
        encode(&H, b"ab", false, &mut buf);
        let want: Vec<u8> = [
            &[0x49, 0x50, 1, 0][..],
            &0x0123_4567_89ab_cdefu64.to_be_bytes(),
            &(1u64 << 40).to_be_bytes(),
            &10_000u64.to_be_bytes(),
            &2u32.to_be_bytes(),
            &[0, 2, 0, 0],
            b"ab",
        ]
        .concat();
        assert_eq!(buf, want);
    }

    #[test]
    fn every_truncation_and_extension_is_rejected() {
        let mut buf = Vec::new();
        encode(&H, &[1u8; 300], true, &mut buf);
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut], true).is_err(), "accepted {cut} bytes");
        }
        buf.push(0);
        assert_eq!(decode(&buf, true), Err(Reject::BadLength));
    }

    #[test]
    fn every_single_bit_flip_is_rejected_with_crc() {
        let mut buf = Vec::new();
        encode(&H, &[0x5a; 64], true, &mut buf);
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, true).is_err(), "accepted a flip of bit {bit}");
        }
    }

    /// Millions of random and mutated inputs: the decoder never panics, and
    /// with CRC on it accepts nothing but intact datagrams.
    #[test]
    fn random_input_never_panics_nor_passes_the_crc() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x1b3c);
        let mut valid = Vec::new();
        let mut input = Vec::new();
        let mut accepted_garbage = 0u32;
        for round in 0..1_000_000u32 {
            let len = (rng.next_u32() % 120) as usize;
            input.resize(len, 0);
            rng.fill_bytes(&mut input);
            if round % 2 == 0 && len >= 4 {
                // A real header with random damage exercises the deep checks.
                let header = Header {
                    fragment: round,
                    ..H
                };
                encode(&header, &input[..len - 4], true, &mut valid);
                input.clone_from(&valid);
                let at = rng.next_u32() as usize % input.len();
                input[at] ^= 1 << (rng.next_u32() % 8);
                if rng.next_u32() % 4 == 0 {
                    input.truncate(rng.next_u32() as usize % input.len());
                }
            }
            let _ = decode(&input, false);
            if decode(&input, true).is_ok() {
                accepted_garbage += 1;
            }
        }
        assert_eq!(accepted_garbage, 0, "damaged datagrams passed the CRC");
    }
}
