//! POLYVAL (RFC 8452) sixteen blocks at a time, with the CPU's 512-bit
//! carry-less multiplication (AVX-512F and VPCLMULQDQ), for the datagrams'
//! tag ([`crate::protocol::polyval_mac`]).
//!
//! The POLYVAL crate multiplies 4 blocks by H⁴ … H¹ with 128-bit
//! instructions and reduces once per 4; here each 512-bit instruction
//! multiplies 4 blocks at once, and 16 blocks by H¹⁶ … H¹ share one
//! reduction: the datagrams' tag about twice as fast on MTU-sized datagrams
//! (`docs/performance.md`, "A wider POLYVAL"). The arithmetic is the
//! crate's, after its x86 backend (polyval 0.7, MIT or Apache-2.0): the
//! R/F method, each power H kept with `D = swap(H) ⊕ H₀·P1`, four products
//! per block and one multiplication to reduce; so the hash is the same
//! value, and the tests compare the two.
//!
//! Built with Rust 1.89 or later on x86-64 (`ipmc_wide_clmul`, set by
//! `build.rs`; the intrinsics are not stable before); elsewhere, and on a
//! CPU without the instructions, [`WidePolyval::new`] gives `None` and the
//! crate hashes.

pub use imp::WidePolyval;

// Compiled only by Rust 1.89 or later (`build.rs`), so its MSRV is that.
#[cfg(all(target_arch = "x86_64", ipmc_wide_clmul))]
#[clippy::msrv = "1.89"]
mod imp {
    use std::arch::x86_64::*;

    /// x⁶³ + x⁶² + x⁵⁷: what reduces modulo RFC 8452's x¹²⁸ + x¹²⁷ +
    /// x¹²⁶ + x¹²¹ + 1 in the R/F method.
    const P1: u64 = 0xC200_0000_0000_0000;
    /// Blocks per reduction.
    const WIDTH: usize = 16;

    /// One key's powers H¹⁶ … H¹ with their companions, computed once.
    #[derive(Clone)]
    pub struct WidePolyval {
        /// `h[i]` is H^(16 − i): a group of g blocks multiplies its block
        /// j by `h[16 − g + j]`, so that the last block meets H¹.
        h: [[u8; 16]; WIDTH],
        /// Each power's `D = swap(H) ⊕ H₀·P1`.
        d: [[u8; 16]; WIDTH],
    }

    impl WidePolyval {
        /// The key `h`'s powers, or `None` where the CPU lacks the
        /// instructions.
        pub fn new(h: &[u8; 16]) -> Option<Self> {
            // SAFETY: the CPU has the features `expand` is compiled for.
            Self::available().then(|| unsafe { expand(h) })
        }

        /// Whether this CPU has the instructions.
        pub fn available() -> bool {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("vpclmulqdq")
                && is_x86_feature_detected!("pclmulqdq")
        }

        /// POLYVAL of `bytes` zero-padded to whole blocks, then the block
        /// `last` (the MAC's lengths).
        pub fn hash(&self, bytes: &[u8], last: &[u8; 16]) -> [u8; 16] {
            // SAFETY: `new` found the features `hash` is compiled for.
            unsafe { hash(self, bytes, last) }
        }
    }

    fn load(block: &[u8; 16]) -> __m128i {
        // SAFETY: 16 readable bytes; the load has no alignment rule.
        unsafe { _mm_loadu_si128(block.as_ptr().cast()) }
    }

    fn store(x: __m128i) -> [u8; 16] {
        let mut out = [0u8; 16];
        // SAFETY: 16 writable bytes; the store has no alignment rule.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), x) };
        out
    }

    #[target_feature(enable = "pclmulqdq")]
    fn expand(key: &[u8; 16]) -> WidePolyval {
        let mut out = WidePolyval {
            h: [[0; 16]; WIDTH],
            d: [[0; 16]; WIDTH],
        };
        let h1 = load(key);
        let d1 = companion(h1);
        let mut power = h1;
        for k in 1..=WIDTH {
            if k > 1 {
                power = mul(power, h1, d1);
            }
            out.h[WIDTH - k] = store(power);
            out.d[WIDTH - k] = store(companion(power));
        }
        out
    }

    /// `D = swap(H) ⊕ H₀·P1`.
    #[target_feature(enable = "pclmulqdq")]
    fn companion(h: __m128i) -> __m128i {
        let p = _mm_set_epi64x(P1 as i64, 0);
        _mm_xor_si128(
            _mm_shuffle_epi32::<0x4e>(h),
            _mm_clmulepi64_si128::<0x10>(h, p),
        )
    }

    /// `m · h` in POLYVAL's field (`d` is `h`'s companion).
    #[target_feature(enable = "pclmulqdq")]
    fn mul(m: __m128i, h: __m128i, d: __m128i) -> __m128i {
        let r = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x10>(m, d),
            _mm_clmulepi64_si128::<0x11>(m, h),
        );
        let f = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(m, d),
            _mm_clmulepi64_si128::<0x01>(m, h),
        );
        reduce(r, f)
    }

    /// R ⊕ F₁ ⊕ x⁶⁴·F₀ ⊕ P1·F₀: the unreduced products' sum brought back
    /// into the field with one multiplication.
    #[target_feature(enable = "pclmulqdq")]
    fn reduce(r: __m128i, f: __m128i) -> __m128i {
        let p1 = _mm_set_epi64x(0, P1 as i64);
        let x = _mm_xor_si128(r, _mm_srli_si128::<8>(f));
        let x = _mm_xor_si128(x, _mm_slli_si128::<8>(f));
        _mm_xor_si128(x, _mm_clmulepi64_si128::<0x00>(f, p1))
    }

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq")]
    fn hash(key: &WidePolyval, bytes: &[u8], last: &[u8; 16]) -> [u8; 16] {
        let full = bytes.len() / 16;
        let rem = bytes.len() % 16;
        // The padded last block of `bytes` (if partial) and `last`.
        let mut tail = [0u8; 32];
        let tail_blocks = if rem > 0 {
            tail[..rem].copy_from_slice(&bytes[full * 16..]);
            tail[16..].copy_from_slice(last);
            2
        } else {
            tail[..16].copy_from_slice(last);
            1
        };
        let n = full + tail_blocks;
        // Groups of 16 but the first, so that the tail ends the last one.
        let mut g = n - WIDTH * ((n - 1) / WIDTH);
        let mut start = 0;
        let mut acc = _mm_setzero_si128();
        while start < n {
            let own = full.saturating_sub(start).min(g);
            let from_tail = start.max(full) - full;
            acc = group(
                key,
                acc,
                &bytes[start * 16..(start + own) * 16],
                &tail[from_tail * 16..(from_tail + g - own) * 16],
            );
            start += g;
            g = WIDTH;
        }
        store(acc)
    }

    /// The hash `acc` carried over the blocks of `first` then `second`
    /// (together at most 16): Σ block_j · H^(g − j), `acc` added to the
    /// first block.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq")]
    fn group(key: &WidePolyval, acc: __m128i, first: &[u8], second: &[u8]) -> __m128i {
        let g = (first.len() + second.len()) / 16;
        debug_assert!(
            g <= WIDTH && first.len().is_multiple_of(16) && second.len().is_multiple_of(16)
        );
        let mut r = _mm512_setzero_si512();
        let mut f = _mm512_setzero_si512();
        let mut carry = _mm512_zextsi128_si512(acc);
        let mut power = WIDTH - g;
        for blocks in [first, second] {
            for four in blocks.chunks(64) {
                let lanes = four.len() / 16;
                // Two 64-bit elements per block.
                let mask = ((1u32 << (2 * lanes)) - 1) as __mmask8;
                // SAFETY: the mask enables `lanes` blocks, all within
                // `four`, and within the powers: `power + lanes` ≤ 16
                // since the group holds at most 16 blocks; what it
                // disables is neither read nor able to fault.
                let (x, h, d) = unsafe {
                    (
                        _mm512_maskz_loadu_epi64(mask, four.as_ptr().cast()),
                        _mm512_maskz_loadu_epi64(mask, key.h.as_ptr().add(power).cast()),
                        _mm512_maskz_loadu_epi64(mask, key.d.as_ptr().add(power).cast()),
                    )
                };
                let x = _mm512_xor_si512(x, carry);
                carry = _mm512_setzero_si512();
                r = _mm512_xor_si512(r, _mm512_clmulepi64_epi128::<0x10>(x, d));
                r = _mm512_xor_si512(r, _mm512_clmulepi64_epi128::<0x11>(x, h));
                f = _mm512_xor_si512(f, _mm512_clmulepi64_epi128::<0x00>(x, d));
                f = _mm512_xor_si512(f, _mm512_clmulepi64_epi128::<0x01>(x, h));
                power += lanes;
            }
        }
        reduce(lanes_summed(r), lanes_summed(f))
    }

    #[target_feature(enable = "avx512f")]
    fn lanes_summed(v: __m512i) -> __m128i {
        _mm_xor_si128(
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<0>(v),
                _mm512_extracti32x4_epi32::<1>(v),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(v),
                _mm512_extracti32x4_epi32::<3>(v),
            ),
        )
    }
}

#[cfg(not(all(target_arch = "x86_64", ipmc_wide_clmul)))]
mod imp {
    /// Never made: the crate's POLYVAL serves.
    #[derive(Clone)]
    pub struct WidePolyval(std::convert::Infallible);

    impl WidePolyval {
        pub fn new(_h: &[u8; 16]) -> Option<Self> {
            None
        }

        pub fn available() -> bool {
            false
        }

        pub fn hash(&self, _bytes: &[u8], _last: &[u8; 16]) -> [u8; 16] {
            match self.0 {}
        }
    }
}
