//! The multicast datagram of ipmc (specified in `docs/datagram.md`).
//!
//! Unlike the thesis's format (3-byte sequence number, 1-byte broadcast id),
//! every datagram names the communicator instance it belongs to and a 64-bit
//! broadcast number that cannot wrap, and its exact length is checked. By
//! default it carries a 128-bit tag (keyed BLAKE3) under the communicator's
//! secret key, so that nobody without the key can inject or alter data
//! (AES-128 with POLYVAL where the CPU computes it in hardware,
//! [`polyval_mac`]); on request the payload is encrypted too (AES-128-GCM).
//! The decoder takes any bytes and never panics.

use std::fmt;

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce, Tag};
use subtle::ConstantTimeEq;

use crate::protocol::polyval_mac::{self, PolyvalMac};

/// First two bytes of every ipmc datagram.
pub const MAGIC: u16 = 0x4950; // "IP"
/// Version of this layout.
pub const VERSION: u8 = 2;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 36;
/// Bytes of the CRC-32 trailer, when present.
pub const CRC_LEN: usize = 4;
/// Bytes of the authentication tag trailer, when present: one AES block in
/// every mode (GCM's tag, POLYVAL's, keyed BLAKE3's cut to it).
pub const TAG_LEN: usize = polyval_mac::TAG_LEN;
/// Bytes of a communicator's secret key.
pub const KEY_LEN: usize = 32;
/// Largest payload a datagram can carry (its length field is 16 bits).
pub const MAX_PAYLOAD: usize = u16::MAX as usize;

const FLAG_CRC: u8 = 0x01;
const FLAG_TAG: u8 = 0x02;
const FLAG_SECRET: u8 = 0x04;
// 0x08 (with FLAG_TAG) was the AES-128-GMAC tag; such a datagram is refused.
/// With [`FLAG_TAG`]: the tag is AES-128 with POLYVAL's, not keyed BLAKE3's.
const FLAG_POLYVAL: u8 = 0x10;

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
    /// Without authentication: the CRC trailer is missing, present when it
    /// should not be, or does not match.
    BadCrc,
    /// With authentication: no tag, or a tag that does not verify under the
    /// communicator's key (forged, altered, or of another communicator).
    BadAuth,
}

/// A communicator's secret key, drawn by rank 0 at setup.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key(pub [u8; KEY_LEN]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// How a communicator protects its datagrams (`coll_ipmc_authenticate`,
/// `coll_ipmc_use_crc_checking`), agreed at setup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// No tag: a CRC-32 trailer if `use_crc_checking`, else nothing.
    Off { crc: bool },
    /// A keyed BLAKE3 hash of header and payload, cut to 128 bits.
    Tag(Key),
    /// AES-128 with POLYVAL over header and payload ([`polyval_mac`]: GMAC's
    /// construction over POLYVAL), under the key's first 16 bytes: a 128-bit
    /// tag as strong as [`Auth::Tag`]'s, and about 4 times as fast on
    /// MTU-sized datagrams where the CPU has AES and carry-less
    /// multiplication instructions ([`polyval_is_fast`]).
    Polyval(Key),
    /// The payload encrypted with AES-128-GCM (the key's first 16 bytes),
    /// its 128-bit tag over header and ciphertext.
    Encrypt(Key),
}

impl Auth {
    /// The CRC mode of the thesis (no key).
    pub fn crc(with_crc: bool) -> Self {
        Auth::Off { crc: with_crc }
    }

    /// What protects each datagram, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Auth::Off { crc: false } => "no check",
            Auth::Off { crc: true } => "a CRC-32",
            Auth::Tag(_) => "a keyed BLAKE3 tag",
            Auth::Polyval(_) => "an AES-128-POLYVAL tag",
            Auth::Encrypt(_) => "AES-128-GCM encryption",
        }
    }
}

/// [`Auth`] ready for use: the cipher's key schedule is computed once.
#[derive(Clone)]
pub struct Protection {
    flags: u8,
    key: Option<Key>,
    /// AES-128-GCM, for [`Auth::Encrypt`].
    cipher: Option<Box<Aes128Gcm>>,
    /// For [`Auth::Polyval`].
    mac: Option<Box<PolyvalMac>>,
}

/// Bits per carry-less multiplication where the AES-128-POLYVAL tag hashes
/// 16 blocks per reduction here ([`crate::cpu::polyval`]), or `None` where
/// the POLYVAL crate hashes 4.
pub fn polyval_width() -> Option<u32> {
    use crate::cpu::polyval::{Bits, WidePolyval};
    WidePolyval::available().map(|bits| match bits {
        Bits::B512 => 512,
        Bits::B256 => 256,
    })
}

/// Whether this CPU computes AES-128 and POLYVAL in hardware (AES and
/// carry-less multiplication instructions), which their code detects at run
/// time; without them the tag would be slower than keyed BLAKE3.
pub fn polyval_is_fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

impl fmt::Debug for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protection(flags {:#04x})", self.flags)
    }
}

impl Protection {
    pub fn new(auth: Auth) -> Self {
        let aes_key = |k: Key| -> [u8; 16] { k.0[..16].try_into().expect("16 bytes") };
        let (flags, key, secret, mac) = match auth {
            Auth::Off { crc } => (if crc { FLAG_CRC } else { 0 }, None, None, None),
            Auth::Tag(k) => (FLAG_TAG, Some(k), None, None),
            Auth::Polyval(k) => (FLAG_TAG | FLAG_POLYVAL, None, None, Some(k)),
            Auth::Encrypt(k) => (FLAG_TAG | FLAG_SECRET, None, Some(k), None),
        };
        Protection {
            flags,
            key,
            cipher: secret.map(|k| Box::new(Aes128Gcm::new(&aes_key(k).into()))),
            mac: mac.map(|k| Box::new(PolyvalMac::new(&aes_key(k)))),
        }
    }

    /// The thesis's CRC mode, or nothing.
    pub fn crc(with_crc: bool) -> Self {
        Self::new(Auth::crc(with_crc))
    }

    fn trailer(&self) -> usize {
        if self.flags & FLAG_TAG != 0 {
            TAG_LEN
        } else if self.flags & FLAG_CRC != 0 {
            CRC_LEN
        } else {
            0
        }
    }

    /// Whether the payload travels encrypted (then [`decode`] needs a copy
    /// it may change; [`verify`] serves the others in place).
    pub fn encrypts(&self) -> bool {
        self.flags & FLAG_SECRET != 0
    }

    /// Bytes a datagram adds to its payload.
    pub fn overhead(&self) -> usize {
        HEADER_LEN + self.trailer()
    }

    /// The reason for a datagram that does not carry this protection.
    fn reject(&self) -> Reject {
        if self.flags & FLAG_TAG != 0 {
            Reject::BadAuth
        } else {
            Reject::BadCrc
        }
    }
}

/// The keyed BLAKE3 hash of `bytes`, cut to [`TAG_LEN`] bytes.
fn keyed_tag(key: &Key, bytes: &[u8]) -> [u8; TAG_LEN] {
    let hash = blake3::keyed_hash(&key.0, bytes);
    hash.as_bytes()[..TAG_LEN]
        .try_into()
        .expect("TAG_LEN bytes")
}

/// The nonce of a datagram: its broadcast number and fragment index, which
/// the root of each broadcast uses once per key (each fragment is multicast
/// once; an offer repeated after a full send buffer tags the same bytes).
fn nonce_bytes(header: &Header) -> [u8; polyval_mac::NONCE_LEN] {
    let mut n = [0u8; polyval_mac::NONCE_LEN];
    n[..8].copy_from_slice(&header.bcast.to_be_bytes());
    n[8..].copy_from_slice(&header.fragment.to_be_bytes());
    n
}

/// [`nonce_bytes`] for AES-GCM.
fn nonce(header: &Header) -> Nonce<aes_gcm::aead::consts::U12> {
    nonce_bytes(header).into()
}

/// The AES-GCM tag in a datagram's `trailer` (whose length [`layout`] checked).
fn tag(trailer: &[u8]) -> Result<Tag, Reject> {
    Tag::try_from(trailer).map_err(|_| Reject::BadLength)
}

/// The datagram for `header` and `payload` in `out` (cleared first).
///
/// # Panics
/// If `payload` is longer than [`MAX_PAYLOAD`]: the fragment size is limited
/// far below that by its parameter's range.
pub fn encode(header: &Header, payload: &[u8], prot: &Protection, out: &mut Vec<u8>) {
    out.clear();
    encode_into(header, payload, prot, out);
}

/// Appends the datagram for `header` and `payload` to `out`, after the
/// datagrams already there (a batch the kernel cuts apart, UDP GSO).
///
/// # Panics
/// As [`encode`].
pub fn encode_into(header: &Header, payload: &[u8], prot: &Protection, out: &mut Vec<u8>) {
    let len = u16::try_from(payload.len()).expect("payload fits a datagram");
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.push(VERSION);
    out.push(prot.flags);
    out.extend_from_slice(&header.comm_id.to_be_bytes());
    out.extend_from_slice(&header.bcast.to_be_bytes());
    out.extend_from_slice(&header.message_len.to_be_bytes());
    out.extend_from_slice(&header.fragment.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    debug_assert_eq!(out.len() - start, HEADER_LEN);
    out.extend_from_slice(payload);
    if let Some(key) = &prot.key {
        let tag = keyed_tag(key, &out[start..]);
        out.extend_from_slice(&tag);
    } else if let Some(mac) = &prot.mac {
        let tag = mac.tag(&nonce_bytes(header), &out[start..]);
        out.extend_from_slice(&tag);
    } else if let Some(c) = &prot.cipher {
        let (head, body) = out[start..].split_at_mut(HEADER_LEN);
        let tag = c
            .encrypt_inout_detached(&nonce(header), head, body.into())
            .expect("a datagram is far below AES-GCM's length limit");
        out.extend_from_slice(&tag);
    } else if prot.flags & FLAG_CRC != 0 {
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
}

fn be<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&bytes[at..at + N]);
    a
}

/// The header of `bytes`, if they start like an ipmc datagram of this
/// version: enough to tell which communicator and broadcast it claims to
/// belong to. Nothing in it is authentic yet: [`decode`] checks that.
pub fn header(bytes: &[u8]) -> Result<Header, Reject> {
    if bytes.len() < HEADER_LEN {
        return Err(Reject::BadLength);
    }
    if u16::from_be_bytes(be(bytes, 0)) != MAGIC || bytes[2] != VERSION || bytes[34..36] != [0, 0] {
        return Err(Reject::BadMagic);
    }
    Ok(Header {
        comm_id: u64::from_be_bytes(be(bytes, 4)),
        bcast: u64::from_be_bytes(be(bytes, 12)),
        message_len: u64::from_be_bytes(be(bytes, 20)),
        fragment: u32::from_be_bytes(be(bytes, 28)),
    })
}

/// Decodes `bytes` under the communicator's protection: checks the layout,
/// the CRC or the tag, and decrypts an encrypted payload in place (only
/// once the tag verified; on any error the bytes are unchanged).
pub fn decode<'a>(bytes: &'a mut [u8], prot: &Protection) -> Result<Datagram<'a>, Reject> {
    let (Some(c), true) = (&prot.cipher, prot.encrypts()) else {
        return verify(bytes, prot);
    };
    let (header, body_end) = layout(bytes, prot)?;
    let (body, trailer) = bytes.split_at_mut(body_end);
    let (head, payload) = body.split_at_mut(HEADER_LEN);
    c.decrypt_inout_detached(&nonce(&header), head, payload.into(), &tag(trailer)?)
        .map_err(|_| Reject::BadAuth)?;
    Ok(Datagram {
        header,
        payload: &bytes[HEADER_LEN..body_end],
    })
}

/// As [`decode`], for a protection that does not encrypt
/// ([`Protection::encrypts`]): the bytes are checked where they are, in one
/// pass, never copied.
pub fn verify<'a>(bytes: &'a [u8], prot: &Protection) -> Result<Datagram<'a>, Reject> {
    let (header, body_end) = layout(bytes, prot)?;
    let (body, trailer) = bytes.split_at(body_end);
    if let Some(key) = &prot.key {
        // Constant time, so that timing tells a forger nothing.
        if !bool::from(keyed_tag(key, body)[..].ct_eq(trailer)) {
            return Err(Reject::BadAuth);
        }
    } else if prot.encrypts() {
        return Err(Reject::BadAuth);
    } else if let Some(mac) = &prot.mac {
        if !bool::from(mac.tag(&nonce_bytes(&header), body)[..].ct_eq(trailer)) {
            return Err(Reject::BadAuth);
        }
    } else if prot.flags & FLAG_CRC != 0
        && crc32fast::hash(body) != u32::from_be_bytes(be(trailer, 0))
    {
        return Err(Reject::BadCrc);
    }
    Ok(Datagram {
        header,
        payload: &bytes[HEADER_LEN..body_end],
    })
}

/// The header of `bytes` and where their payload ends, if flags and length
/// fit the protection.
fn layout(bytes: &[u8], prot: &Protection) -> Result<(Header, usize), Reject> {
    let header = header(bytes)?;
    if bytes[3] != prot.flags {
        return Err(prot.reject());
    }
    let payload_len = usize::from(u16::from_be_bytes(be(bytes, 32)));
    if bytes.len() != HEADER_LEN + payload_len + prot.trailer() {
        return Err(Reject::BadLength);
    }
    Ok((header, HEADER_LEN + payload_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::time::Duration;

    const H: Header = Header {
        comm_id: 0x0123_4567_89ab_cdef,
        bcast: 1 << 40,
        message_len: 10_000,
        fragment: 2,
    };
    const KEY: Key = Key([0x42; KEY_LEN]);

    /// Every protection, with its trailer length.
    fn all() -> Vec<(Auth, usize)> {
        vec![
            (Auth::crc(false), 0),
            (Auth::crc(true), CRC_LEN),
            (Auth::Tag(KEY), TAG_LEN),
            (Auth::Polyval(KEY), TAG_LEN),
            (Auth::Encrypt(KEY), TAG_LEN),
        ]
    }

    #[test]
    fn round_trip_under_every_protection() {
        let mut buf = Vec::new();
        for (auth, trailer) in all() {
            let prot = Protection::new(auth);
            for payload in [&b""[..], b"x", &[7u8; 4096][..]] {
                encode(&H, payload, &prot, &mut buf);
                assert_eq!(buf.len(), HEADER_LEN + payload.len() + trailer);
                assert_eq!(prot.overhead(), HEADER_LEN + trailer);
                assert_eq!(header(&buf), Ok(H));
                let mut copy = buf.clone();
                let d = decode(&mut copy, &prot).unwrap();
                assert_eq!((d.header, d.payload), (H, payload), "{auth:?}");
                // Any other protection refuses it.
                for (other, _) in all().into_iter().filter(|(a, _)| *a != auth) {
                    let mut copy = buf.clone();
                    assert!(decode(&mut copy, &Protection::new(other)).is_err());
                    assert_eq!(copy, buf, "a refused datagram is left as it was");
                }
            }
        }
    }

    #[test]
    fn layout_is_the_documented_one() {
        let mut buf = Vec::new();
        encode(&H, b"ab", &Protection::crc(false), &mut buf);
        let want: Vec<u8> = [
            &[0x49, 0x50, 2, 0][..],
            &0x0123_4567_89ab_cdefu64.to_be_bytes(),
            &(1u64 << 40).to_be_bytes(),
            &10_000u64.to_be_bytes(),
            &2u32.to_be_bytes(),
            &[0, 2, 0, 0],
            b"ab",
        ]
        .concat();
        assert_eq!(buf, want);
        encode(&H, b"ab", &Protection::new(Auth::Tag(KEY)), &mut buf);
        assert_eq!(buf[3], FLAG_TAG);
        assert_eq!(&buf[..3], &want[..3]);
        assert_eq!(&buf[4..want.len()], &want[4..], "the payload is in clear");
        encode(&H, b"ab", &Protection::new(Auth::Encrypt(KEY)), &mut buf);
        assert_eq!(buf[3], FLAG_TAG | FLAG_SECRET);
        assert_eq!(&buf[4..HEADER_LEN], &want[4..HEADER_LEN]);
        assert_ne!(
            &buf[HEADER_LEN..HEADER_LEN + 2],
            b"ab",
            "the payload is secret"
        );
    }

    #[test]
    fn another_key_or_another_place_does_not_verify() {
        let mut buf = Vec::new();
        for auth in [Auth::Tag(KEY), Auth::Encrypt(KEY)] {
            encode(&H, &[9u8; 100], &Protection::new(auth), &mut buf);
            let other = match auth {
                Auth::Tag(_) => Auth::Tag(Key([0x43; KEY_LEN])),
                _ => Auth::Encrypt(Key([0x43; KEY_LEN])),
            };
            let mut copy = buf.clone();
            assert_eq!(
                decode(&mut copy, &Protection::new(other)),
                Err(Reject::BadAuth)
            );
            // A replay under another broadcast number or fragment index.
            for at in [12, 31] {
                let mut moved = buf.clone();
                moved[at] ^= 1;
                assert_eq!(
                    decode(&mut moved, &Protection::new(auth)),
                    Err(Reject::BadAuth)
                );
            }
        }
    }

    #[test]
    fn every_truncation_and_extension_is_rejected() {
        let mut buf = Vec::new();
        for (auth, _) in all().into_iter().skip(1) {
            let prot = Protection::new(auth);
            encode(&H, &[1u8; 300], &prot, &mut buf);
            for cut in 0..buf.len() {
                let mut copy = buf[..cut].to_vec();
                assert!(decode(&mut copy, &prot).is_err(), "accepted {cut} bytes");
            }
            buf.push(0);
            assert_eq!(decode(&mut buf, &prot), Err(Reject::BadLength));
        }
    }

    #[test]
    fn every_single_bit_flip_is_rejected_with_crc_or_tag() {
        let mut buf = Vec::new();
        for (auth, _) in all().into_iter().skip(1) {
            let prot = Protection::new(auth);
            encode(&H, &[0x5a; 64], &prot, &mut buf);
            for bit in 0..buf.len() * 8 {
                let mut bad = buf.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    decode(&mut bad, &prot).is_err(),
                    "{auth:?} accepted a flip of bit {bit}"
                );
            }
        }
    }

    /// Random and mutated inputs: the decoder never panics, and with CRC or
    /// tag on it accepts nothing but intact datagrams.
    #[test]
    fn random_input_never_panics_nor_passes_the_check() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x1b3c);
        let prots: Vec<Protection> = all().into_iter().map(|(a, _)| Protection::new(a)).collect();
        let mut valid = Vec::new();
        let mut input = Vec::new();
        let mut accepted_garbage = 0u32;
        for round in 0..400_000u32 {
            let len = (rng.next_u32() % 120) as usize;
            input.resize(len, 0);
            rng.fill_bytes(&mut input);
            let prot = &prots[round as usize % prots.len()];
            if round % 2 == 0 && len >= 4 {
                // A real header with random damage exercises the deep checks.
                let header = Header {
                    fragment: round,
                    ..H
                };
                encode(&header, &input[..len - 4], prot, &mut valid);
                input.clone_from(&valid);
                let at = rng.next_u32() as usize % input.len();
                input[at] ^= 1 << (rng.next_u32() % 8);
                if rng.next_u32() % 4 == 0 {
                    input.truncate(rng.next_u32() as usize % input.len());
                }
            }
            let _ = header(&input);
            for (i, p) in prots.iter().enumerate() {
                let mut copy = input.clone();
                if decode(&mut copy, p).is_ok() && i > 0 {
                    accepted_garbage += 1;
                }
            }
        }
        assert_eq!(accepted_garbage, 0, "damaged datagrams passed the check");
    }

    /// The cost per core of each protection (CPU time of this thread, so
    /// that other processes do not count); `cargo test --release --lib
    /// tag_throughput -- --nocapture` prints it. No timed assertion: the
    /// figure depends on the machine.
    #[test]
    fn tag_throughput() {
        println!(
            "POLYVAL 16 blocks at a time, bits per carry-less multiplication: {:?}",
            crate::cpu::polyval::WidePolyval::available()
        );
        // Datagrams that fit an MTU of 1,500 bytes and one of 9,000 (jumbo
        // frames), and the default bound.
        for len in [1420, 4096, 8952] {
            let payload = vec![0x77u8; len];
            for (name, auth) in [
                ("crc32", Auth::crc(true)),
                ("tag BLAKE3", Auth::Tag(KEY)),
                ("tag POLYVAL", Auth::Polyval(KEY)),
                ("encrypt", Auth::Encrypt(KEY)),
            ] {
                let prot = Protection::new(auth);
                let n = if cfg!(debug_assertions) { 200 } else { 50_000 };
                // Timed in batches as the path sends and receives them: the
                // thread's CPU clock is a system call, which would cost as
                // much as a datagram's tag.
                const BATCH: u32 = 500;
                let mut batch = vec![Vec::new(); BATCH as usize];
                let (mut enc, mut dec) = (Duration::ZERO, Duration::ZERO);
                for b in 0..n / BATCH {
                    let t0 = crate::platform::os::thread_cpu_time();
                    for (i, out) in batch.iter_mut().enumerate() {
                        let h = Header {
                            fragment: b * BATCH + i as u32,
                            ..H
                        };
                        encode(&h, &payload, &prot, out);
                    }
                    let t1 = crate::platform::os::thread_cpu_time();
                    for out in &mut batch {
                        decode(out, &prot).expect("intact");
                    }
                    dec += crate::platform::os::thread_cpu_time() - t1;
                    enc += t1 - t0;
                }
                let n = n / BATCH * BATCH;
                let rate = |t: Duration| (n as usize * len) as f64 / t.as_secs_f64() / 1e9;
                println!(
                    "datagram {name}: {len}-byte payloads, per core: encode {:.2} GB/s, decode {:.2} GB/s",
                    rate(enc),
                    rate(dec)
                );
            }
        }
    }
}
