//! The datagrams' fast tag: AES-128 with POLYVAL, GMAC's construction over
//! GHASH's little-endian twin (the hash of AES-GCM-SIV, RFC 8452).
//!
//! For a key `K`, `H = AES_K(0¹²⁸)` keys POLYVAL, and the tag of `bytes`
//! under a 96-bit nonce `N` is
//!
//! ```text
//! POLYVAL_H(bytes, zero-padded to 16 ‖ le64(bit length) ‖ le64(0)) ⊕ AES_K(N ‖ be32(1))
//! ```
//!
//! as GMAC is `GHASH_H(…) ⊕ AES_K(N ‖ be32(1))`. POLYVAL(H, X) is GHASH of
//! the byte-reversed blocks under a key derived one-to-one from H (RFC 8452,
//! appendix A), so a random H gives the same bound on a forgery as GMAC's,
//! and the nonce rule is GMAC's: one message per nonce and key (a datagram
//! offered again is the same message). GHASH in the RustCrypto crates is
//! POLYVAL with every block reversed around it; skipping that makes the tag
//! about 1.5 times as fast on MTU-sized datagrams (`docs/performance.md`,
//! "A faster tag"). Where the CPU multiplies 256 or 512 bits at once, the
//! hash is [`WidePolyval`]'s, the same value: the tag about twice as fast.

use aes::cipher::{BlockCipherEncrypt, KeyInit as _};
use aes::Aes128;
use polyval::universal_hash::UniversalHash;
use polyval::Polyval;

use crate::cpu::polyval::{Bits, WidePolyval};

/// Bytes of a tag: one AES block.
pub const TAG_LEN: usize = 16;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 12;

/// One key's AES schedule and POLYVAL powers, computed once.
#[derive(Clone)]
pub struct PolyvalMac {
    aes: Aes128,
    hash: Polyval,
    /// The same hash 16 blocks at a time, where the CPU can.
    wide: Option<WidePolyval>,
}

impl PolyvalMac {
    pub fn new(key: &[u8; 16]) -> Self {
        Self::with(key, WidePolyval::new)
    }

    /// With the POLYVAL crate's hash whatever the CPU.
    #[cfg(test)]
    pub fn portable(key: &[u8; 16]) -> Self {
        Self::with(key, |_| None)
    }

    /// With the hash `bits` at a time, if this CPU can.
    #[cfg(test)]
    pub fn with_bits(key: &[u8; 16], bits: Bits) -> Option<Self> {
        let mac = Self::with(key, |h| WidePolyval::with_bits(h, bits));
        mac.is_wide().then_some(mac)
    }

    fn with(key: &[u8; 16], wide: impl FnOnce(&[u8; 16]) -> Option<WidePolyval>) -> Self {
        let aes = Aes128::new(key.into());
        let mut h = aes::Block::default();
        aes.encrypt_block(&mut h);
        PolyvalMac {
            wide: wide(&h.into()),
            hash: Polyval::new(&h),
            aes,
        }
    }

    /// Whether the hash is [`WidePolyval`]'s.
    #[cfg(test)]
    pub fn is_wide(&self) -> bool {
        self.wide.is_some()
    }

    /// The tag of `bytes` under `nonce`.
    pub fn tag(&self, nonce: &[u8; NONCE_LEN], bytes: &[u8]) -> [u8; TAG_LEN] {
        // The mask's counter is 1, never 0: no mask equals H's input. Its
        // block is written before the hash, so that the stores have reached
        // the cache when AES loads the 16 bytes at once (loaded at once, it
        // waits for the narrower stores).
        let mut mask = aes::Block::default();
        mask[..NONCE_LEN].copy_from_slice(nonce);
        mask[NONCE_LEN..].copy_from_slice(&1u32.to_be_bytes());
        let bits = (bytes.len() as u64).wrapping_mul(8);
        let mut lengths = [0u8; 16];
        lengths[..8].copy_from_slice(&bits.to_le_bytes());
        // Encrypted before the hash with 256 bits per multiplication,
        // after it otherwise: each order as it measured faster
        // (`docs/performance.md`, "Karatsuba at 256 bits").
        let mask_first = self.wide.as_ref().is_some_and(|w| w.bits() == Bits::B256);
        if mask_first {
            self.aes.encrypt_block(&mut mask);
        }
        let sum: [u8; 16] = match &self.wide {
            Some(wide) => wide.hash(bytes, &lengths),
            None => {
                let mut hash = self.hash.clone();
                hash.update_padded(bytes);
                hash.update(&[lengths.into()]);
                hash.finalize().into()
            }
        };
        if !mask_first {
            self.aes.encrypt_block(&mut mask);
        }
        let mut tag = [0u8; TAG_LEN];
        for ((t, s), m) in tag.iter_mut().zip(sum.iter()).zip(mask.iter()) {
            *t = s ^ m;
        }
        tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The hash is RFC 8452's POLYVAL (its appendix A's example).
    #[test]
    fn the_hash_is_rfc_8452s_polyval() {
        let h: [u8; 16] = hex("25629347589242761d31f826ba4b757b").try_into().unwrap();
        let mut p = Polyval::new(&h.into());
        p.update_padded(&hex(
            "4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362",
        ));
        assert_eq!(
            p.finalize().to_vec(),
            hex("f7a3b47b846119fae5b7866cf5e5b77e")
        );
    }

    /// The construction as the module states it: tags computed apart from
    /// this code (`tests/vectors/polyval_mac.py`: POLYVAL by hand after
    /// RFC 8452, AES from OpenSSL), for 0, 37 and 100 bytes.
    #[test]
    fn the_tag_is_the_stated_construction() {
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let nonce: [u8; NONCE_LEN] = hex("000001000000000000000002").try_into().unwrap();
        let cases: [(Vec<u8>, &str); 3] = [
            (Vec::new(), "62b8070127302cf045330e674cb3bea4"),
            ((0..37).collect(), "5f0808f23bce58602cfa0d9bf12e5dfe"),
            (
                (0..100u32).map(|i| (7 * i) as u8).collect(),
                "b29528d2df2099584b290aba9624bb2f",
            ),
        ];
        let wide = [Bits::B512, Bits::B256].map(|bits| PolyvalMac::with_bits(&key, bits));
        for mac in [PolyvalMac::new(&key), PolyvalMac::portable(&key)]
            .into_iter()
            .chain(wide.into_iter().flatten())
        {
            for (bytes, want) in &cases {
                assert_eq!(
                    mac.tag(&nonce, bytes).to_vec(),
                    hex(want),
                    "{} bytes, wide {}",
                    bytes.len(),
                    mac.is_wide()
                );
            }
        }
    }

    /// Each wide hash this CPU has is the crate's for every length to
    /// 1,040 bytes (65 blocks: 4 whole groups of 16, and every last group
    /// from the lengths' block alone to 17 blocks) under 3 keys; under 50
    /// keys for lengths to 100 bytes, those of 15 mod 16, and datagrams'
    /// sizes: 1,456 bytes (MTU 1,500), 4,132 (jumbo frames, 4 KiB
    /// fragments) and 8,988.
    #[test]
    fn the_wide_hash_is_the_crates() {
        let widths: Vec<Bits> = [Bits::B512, Bits::B256]
            .into_iter()
            .filter(|&bits| PolyvalMac::with_bits(&[0; 16], bits).is_some())
            .collect();
        assert_eq!(widths.first().copied(), WidePolyval::available());
        if widths.is_empty() {
            // The build or the CPU lacks wide carry-less multiplication:
            // every constructor gives the crate's hash, nothing to compare.
            eprintln!("the_wide_hash_is_the_crates: no wide hash here, skipped");
            return;
        }
        let lengths: Vec<usize> = (0..=16 * 65).chain([1456, 4132, 8988]).collect();
        for bits in widths {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(27);
            for k in 0..50 {
                let mut key = [0u8; 16];
                rng.fill_bytes(&mut key);
                let wide = PolyvalMac::with_bits(&key, bits).expect("checked above");
                let portable = PolyvalMac::portable(&key);
                let mut nonce = [0u8; NONCE_LEN];
                rng.fill_bytes(&mut nonce);
                for &len in &lengths {
                    if k > 2 && len > 100 && len % 16 != 15 && len < 1456 {
                        continue; // every length under 3 keys, some under all
                    }
                    let mut bytes = vec![0u8; len];
                    rng.fill_bytes(&mut bytes);
                    assert_eq!(
                        wide.tag(&nonce, &bytes),
                        portable.tag(&nonce, &bytes),
                        "{bits:?}, key {k}, {len} bytes"
                    );
                }
            }
        }
    }

    /// The tag's cost per core with each hash this CPU has (CPU time of
    /// this thread); `cargo test --release --lib tag_throughput_per_width
    /// -- --nocapture` prints it. No timed assertion: the figure depends on
    /// the machine.
    #[test]
    fn tag_throughput_per_width() {
        let key = [5u8; 16];
        let nonce = [7u8; NONCE_LEN];
        let macs = [
            ("the crate's", Some(PolyvalMac::portable(&key))),
            ("256-bit", PolyvalMac::with_bits(&key, Bits::B256)),
            ("512-bit", PolyvalMac::with_bits(&key, Bits::B512)),
        ];
        for len in [1420, 4096, 8952] {
            let bytes = vec![0x77u8; len];
            for (name, mac) in &macs {
                let Some(mac) = mac else {
                    println!("POLYVAL {name}: not on this CPU");
                    continue;
                };
                let n: usize = if cfg!(debug_assertions) { 100 } else { 200_000 };
                let mut sum = 0u8;
                // A tenth untimed first: the first runs find the caches
                // and the clock cold.
                for _ in 0..n / 10 {
                    sum ^= mac.tag(&nonce, std::hint::black_box(&bytes))[0];
                }
                let t0 = crate::platform::os::thread_cpu_time();
                for _ in 0..n {
                    sum ^= mac.tag(&nonce, std::hint::black_box(&bytes))[0];
                }
                let t = crate::platform::os::thread_cpu_time() - t0;
                std::hint::black_box(sum);
                println!(
                    "tag POLYVAL {name}: {len} bytes, {:.2} GB/s per core",
                    (n * len) as f64 / t.as_secs_f64() / 1e9
                );
            }
        }
    }

    #[test]
    fn key_nonce_length_and_every_byte_count() {
        let mac = PolyvalMac::new(&[1; 16]);
        let nonce = [3u8; NONCE_LEN];
        let bytes = [9u8; 100];
        let tag = mac.tag(&nonce, &bytes);
        assert_ne!(PolyvalMac::new(&[2; 16]).tag(&nonce, &bytes), tag);
        assert_ne!(mac.tag(&[4; NONCE_LEN], &bytes), tag);
        // Zero padding alone would make these two equal; the length block
        // tells them apart.
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_ne!(mac.tag(&nonce, &longer), tag);
        for i in 0..bytes.len() {
            let mut flipped = bytes;
            flipped[i] ^= 0x80;
            assert_ne!(mac.tag(&nonce, &flipped), tag, "byte {i}");
        }
    }
}
