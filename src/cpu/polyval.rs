//! POLYVAL (RFC 8452) sixteen blocks at a time, with the CPU's 512-bit
//! carry-less multiplication (AVX-512F and VPCLMULQDQ) or its 256-bit one
//! (AVX2 and VPCLMULQDQ: AMD's Zen 3, Intel's cores without AVX-512), for
//! the datagrams' tag ([`crate::protocol::polyval_mac`]).
//!
//! The POLYVAL crate multiplies 4 blocks by H⁴ … H¹ with 128-bit
//! instructions and reduces once per 4; here each instruction multiplies 4
//! blocks at once (2 with 256 bits), and 16 blocks by H¹⁶ … H¹ share one
//! reduction: the datagrams' tag about twice as fast on MTU-sized datagrams
//! (`docs/performance.md`, "A wider POLYVAL"). Each group's products are
//! summed without the hash carried in from the group before, which joins
//! them by a multiplication of its own just before the reduction: what one
//! group waits for of the one before is that multiplication, not the sum
//! over the group's lanes. The 512-bit arithmetic is the
//! crate's, after its x86 backend (polyval 0.7, MIT or Apache-2.0): the
//! R/F method, each power H kept with `D = swap(H) ⊕ H₀·P1`, four products
//! per block and one multiplication to reduce. The 256-bit one is
//! Karatsuba's, three products per block and two multiplications to
//! reduce (as in Gueron's AES-GCM-SIV code): each measured the faster at its
//! width. Both give the crate's value, and the tests compare them with it.
//!
//! Built with Rust 1.89 or later on x86-64 (`ipmc_wide_clmul`, set by
//! `build.rs`; the intrinsics are not stable before); elsewhere, and on a
//! CPU without the instructions, [`WidePolyval::new`] gives `None` and the
//! crate hashes.

pub use imp::{Bits, WidePolyval};

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
        /// Each power's `D = swap(H) ⊕ H₀·P1` (the R/F method's).
        d: [[u8; 16]; WIDTH],
        /// Each power's `H₁ ⊕ H₀` in both halves (Karatsuba's).
        k: [[u8; 16]; WIDTH],
        /// Bits per multiplication in [`WidePolyval::hash`].
        bits: Bits,
    }

    /// Bits per carry-less multiplication instruction.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Bits {
        /// AVX-512F: 4 blocks per instruction.
        B512,
        /// AVX2: 2 blocks per instruction.
        B256,
    }

    impl Bits {
        /// The widest this CPU has, if any.
        fn detected() -> Option<Self> {
            if !is_x86_feature_detected!("vpclmulqdq") || !is_x86_feature_detected!("pclmulqdq") {
                None
            } else if is_x86_feature_detected!("avx512f") {
                Some(Bits::B512)
            } else if is_x86_feature_detected!("avx2") {
                Some(Bits::B256)
            } else {
                None
            }
        }

        /// Whether this CPU has this width.
        fn runs_here(self) -> bool {
            match self {
                Bits::B512 => Self::detected() == Some(Bits::B512),
                // A CPU with AVX-512 has AVX2, but it is checked all the same.
                Bits::B256 => Self::detected().is_some() && is_x86_feature_detected!("avx2"),
            }
        }
    }

    impl WidePolyval {
        /// The key `h`'s powers, hashed as wide as the CPU can, or `None`
        /// where it lacks the instructions.
        pub fn new(h: &[u8; 16]) -> Option<Self> {
            Self::with_bits(h, Bits::detected()?)
        }

        /// The key `h`'s powers hashed `bits` at a time, or `None` where
        /// the CPU cannot.
        pub fn with_bits(h: &[u8; 16], bits: Bits) -> Option<Self> {
            // SAFETY: the CPU has the features `expand` is compiled for
            // (`runs_here` checked `pclmulqdq`).
            bits.runs_here().then(|| unsafe { expand(h, bits) })
        }

        /// The widest multiplication this CPU has, if wider than the
        /// crate's.
        pub fn available() -> Option<Bits> {
            Bits::detected()
        }

        /// Bits per multiplication in [`WidePolyval::hash`].
        pub fn bits(&self) -> Bits {
            self.bits
        }

        /// POLYVAL of `bytes` zero-padded to whole blocks, then the block
        /// `last` (the MAC's lengths).
        pub fn hash(&self, bytes: &[u8], last: &[u8; 16]) -> [u8; 16] {
            match self.bits {
                // SAFETY: `with_bits` found the features `hash_512` is
                // compiled for.
                Bits::B512 => unsafe { hash_512(self, bytes, last) },
                // SAFETY: `with_bits` found the features `hash_256` is
                // compiled for.
                Bits::B256 => unsafe { hash_256(self, bytes, last) },
            }
        }
    }

    /// Bytes in a group of [`WIDTH`] blocks, one reduction's.
    const GROUP: usize = 16 * WIDTH;

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
    fn expand(key: &[u8; 16], bits: Bits) -> WidePolyval {
        let mut out = WidePolyval {
            h: [[0; 16]; WIDTH],
            d: [[0; 16]; WIDTH],
            k: [[0; 16]; WIDTH],
            bits,
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
            out.k[WIDTH - k] = store(halves_summed(power));
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

    /// `H₁ ⊕ H₀` in both halves of a block: what Karatsuba's middle
    /// product multiplies.
    #[target_feature(enable = "sse2")]
    fn halves_summed(h: __m128i) -> __m128i {
        _mm_xor_si128(h, _mm_shuffle_epi32::<0x4e>(h))
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

    /// Both widths' loop: the whole groups of `bytes`, then what is left
    /// with `last` as one group (or two); `group` carries the hash over a
    /// group of n blocks that ends where its 16 end. Inlined, so that
    /// `group` is too, with the caller's features.
    #[inline(always)]
    fn groups_hashed(
        bytes: &[u8],
        last: &[u8; 16],
        mut group: impl FnMut(__m128i, &[u8; GROUP], usize) -> __m128i,
    ) -> [u8; 16] {
        let whole = bytes.chunks_exact(GROUP);
        let rest = whole.remainder();
        // The rest zero-padded to whole blocks, then `last`: 17 blocks at
        // most, ending `tail` so that `last` meets H¹ (the zero blocks
        // before them add nothing); with 17 the first is a group of its own.
        // Written before the whole groups are hashed, so that its stores
        // have reached the cache when it is read 64 bytes at a time (read
        // at once, a load wider than the stores waits for them).
        let n = rest.len().div_ceil(16) + 1;
        let mut tail = [0u8; GROUP + 16];
        let at = tail.len() - 16 * n;
        tail[at..at + rest.len()].copy_from_slice(rest);
        tail[GROUP..].copy_from_slice(last);
        let mut acc = load(&[0; 16]);
        for g in whole {
            acc = group(acc, g.try_into().expect("a group"), WIDTH);
        }
        let (first, blocks) = tail.split_at(16);
        if n > WIDTH {
            let mut one = [0u8; GROUP];
            one[GROUP - 16..].copy_from_slice(first);
            acc = group(acc, &one, 1);
        }
        acc = group(acc, blocks.try_into().expect("a group"), n.min(WIDTH));
        store(acc)
    }

    /// `acc` · Hⁿ plus a group's unreduced products `(r, f)`, reduced: the
    /// carried hash joining a group (why apart: the module's comment).
    #[target_feature(enable = "pclmulqdq")]
    fn carried(key: &WidePolyval, acc: __m128i, n: usize, (r, f): (__m128i, __m128i)) -> __m128i {
        let power = WIDTH - n;
        let (h, d) = (load(&key.h[power]), load(&key.d[power]));
        let r = _mm_xor_si128(r, _mm_clmulepi64_si128::<0x10>(acc, d));
        let r = _mm_xor_si128(r, _mm_clmulepi64_si128::<0x11>(acc, h));
        let f = _mm_xor_si128(f, _mm_clmulepi64_si128::<0x00>(acc, d));
        let f = _mm_xor_si128(f, _mm_clmulepi64_si128::<0x01>(acc, h));
        reduce(r, f)
    }

    /// The powers H¹⁶ … H¹ and their companions, four to a register.
    #[derive(Clone, Copy)]
    struct Powers512 {
        h: [__m512i; 4],
        d: [__m512i; 4],
    }

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq")]
    fn hash_512(key: &WidePolyval, bytes: &[u8], last: &[u8; 16]) -> [u8; 16] {
        let powers = Powers512 {
            h: load_4x4(&key.h),
            d: load_4x4(&key.d),
        };
        groups_hashed(bytes, last, |acc, g, n| {
            carried(key, acc, n, group_512(powers, g, n))
        })
    }

    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq")]
    fn hash_256(key: &WidePolyval, bytes: &[u8], last: &[u8; 16]) -> [u8; 16] {
        groups_hashed(bytes, last, |acc, g, n| {
            carried_karatsuba(key, acc, n, group_256(key, g, n))
        })
    }

    /// Sixteen blocks as four registers of four.
    #[target_feature(enable = "avx512f")]
    fn load_4x4(blocks: &[[u8; 16]; WIDTH]) -> [__m512i; 4] {
        let mut out = [_mm512_setzero_si512(); 4];
        for (o, four) in out.iter_mut().zip(blocks.as_flattened().chunks_exact(64)) {
            // SAFETY: 64 readable bytes; the load has no alignment rule.
            *o = unsafe { _mm512_loadu_si512(four.as_ptr().cast()) };
        }
        out
    }

    /// One group's products Σ block_j · H^(16 − j), unreduced (R and F
    /// of the R/F method), four blocks per instruction with the powers in
    /// registers; of a group of `n` blocks, the fours of zero blocks before
    /// them are skipped.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq")]
    fn group_512(powers: Powers512, group: &[u8; GROUP], n: usize) -> (__m128i, __m128i) {
        let mut r = _mm512_setzero_si512();
        let mut f = _mm512_setzero_si512();
        for (i, four) in group.chunks_exact(64).enumerate().skip((WIDTH - n) / 4) {
            // SAFETY: 64 readable bytes; the load has no alignment rule.
            let x = unsafe { _mm512_loadu_si512(four.as_ptr().cast()) };
            let (h, d) = (powers.h[i], powers.d[i]);
            r = _mm512_xor_si512(r, _mm512_clmulepi64_epi128::<0x10>(x, d));
            r = _mm512_xor_si512(r, _mm512_clmulepi64_epi128::<0x11>(x, h));
            f = _mm512_xor_si512(f, _mm512_clmulepi64_epi128::<0x00>(x, d));
            f = _mm512_xor_si512(f, _mm512_clmulepi64_epi128::<0x01>(x, h));
        }
        (lanes_summed(r), lanes_summed(f))
    }

    /// A group's unreduced products in Karatsuba's form: Σ X₀·H₀ (`lo`),
    /// Σ X₁·H₁ (`hi`) and Σ (X₀ ⊕ X₁)·(H₀ ⊕ H₁) (`mid`).
    #[derive(Clone, Copy)]
    struct Karatsuba {
        lo: __m128i,
        hi: __m128i,
        mid: __m128i,
    }

    /// [`group_512`]'s products 2 blocks per instruction, the powers from
    /// memory (AVX2 has 16 registers of 256 bits, too few to keep them),
    /// by Karatsuba: three multiplications per block where the R/F method
    /// takes four, which the 256-bit instruction's throughput rewards (at
    /// 512 bits the R/F method measured faster: `docs/performance.md`).
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq")]
    fn group_256(key: &WidePolyval, group: &[u8; GROUP], n: usize) -> Karatsuba {
        let mut lo = _mm256_setzero_si256();
        let mut hi = _mm256_setzero_si256();
        let mut mid = _mm256_setzero_si256();
        for (i, two) in group.chunks_exact(32).enumerate().skip((WIDTH - n) / 2) {
            let x = load_2(two.try_into().expect("two blocks"));
            let h = load_2(powers_2(&key.h, 2 * i));
            let k = load_2(powers_2(&key.k, 2 * i));
            lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128::<0x00>(x, h));
            hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128::<0x11>(x, h));
            let x_halves = _mm256_xor_si256(x, _mm256_shuffle_epi32::<0x4e>(x));
            mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128::<0x00>(x_halves, k));
        }
        let sum = |v: __m256i| {
            _mm_xor_si128(
                _mm256_extracti128_si256::<0>(v),
                _mm256_extracti128_si256::<1>(v),
            )
        };
        Karatsuba {
            lo: sum(lo),
            hi: sum(hi),
            mid: sum(mid),
        }
    }

    /// [`carried`] for products in Karatsuba's form: `acc` · Hⁿ added,
    /// the middle product spread over the other two, and the 256 bits
    /// reduced.
    #[target_feature(enable = "pclmulqdq")]
    fn carried_karatsuba(key: &WidePolyval, acc: __m128i, n: usize, p: Karatsuba) -> __m128i {
        let power = WIDTH - n;
        let (h, k) = (load(&key.h[power]), load(&key.k[power]));
        let lo = _mm_xor_si128(p.lo, _mm_clmulepi64_si128::<0x00>(acc, h));
        let hi = _mm_xor_si128(p.hi, _mm_clmulepi64_si128::<0x11>(acc, h));
        let mid = _mm_xor_si128(p.mid, _mm_clmulepi64_si128::<0x00>(halves_summed(acc), k));
        // (X₀ ⊕ X₁)(H₀ ⊕ H₁) less X₀H₀ and X₁H₁ is the middle 128 bits.
        let mid = _mm_xor_si128(mid, _mm_xor_si128(lo, hi));
        let lo = _mm_xor_si128(lo, _mm_slli_si128::<8>(mid));
        let hi = _mm_xor_si128(hi, _mm_srli_si128::<8>(mid));
        montgomery(lo, hi)
    }

    /// The 256-bit product `hi`·x¹²⁸ + `lo` times x⁻¹²⁸ modulo RFC 8452's
    /// polynomial, POLYVAL's product: two folds of the low 64 bits by P1
    /// (the reduction of Gueron's AES-GCM-SIV code).
    #[target_feature(enable = "pclmulqdq")]
    fn montgomery(lo: __m128i, hi: __m128i) -> __m128i {
        let p = _mm_set_epi64x(P1 as i64, 0);
        let fold = |x: __m128i| {
            _mm_xor_si128(
                _mm_shuffle_epi32::<0x4e>(x),
                _mm_clmulepi64_si128::<0x10>(x, p),
            )
        };
        _mm_xor_si128(fold(fold(lo)), hi)
    }

    /// The powers `at` and `at + 1` as one run of 32 bytes.
    fn powers_2(powers: &[[u8; 16]; WIDTH], at: usize) -> &[u8; 32] {
        powers[at..at + 2]
            .as_flattened()
            .try_into()
            .expect("two blocks")
    }

    #[target_feature(enable = "avx")]
    fn load_2(blocks: &[u8; 32]) -> __m256i {
        // SAFETY: 32 readable bytes; the load has no alignment rule.
        unsafe { _mm256_loadu_si256(blocks.as_ptr().cast()) }
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

    /// Bits per carry-less multiplication instruction.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Bits {
        B512,
        B256,
    }

    impl WidePolyval {
        pub fn new(_h: &[u8; 16]) -> Option<Self> {
            None
        }

        pub fn with_bits(_h: &[u8; 16], _bits: Bits) -> Option<Self> {
            None
        }

        pub fn available() -> Option<Bits> {
            None
        }

        pub fn bits(&self) -> Bits {
            match self.0 {}
        }

        pub fn hash(&self, _bytes: &[u8], _last: &[u8; 16]) -> [u8; 16] {
            match self.0 {}
        }
    }
}
