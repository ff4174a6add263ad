//! The Blum-Blum-Shub generator of the thesis (§3.4): x_{n+1} = x_n² mod M,
//! one output bit (the parity of x_{n+1}) per step, with the thesis's 62-bit
//! modulus M = 2^62 − 63 = 64,129,007 · 71,912,637,263. It stretches a few
//! bits of collected entropy into a seed for a faster generator.

/// The smaller prime factor of [`MODULUS`] (≡ 3 mod 4).
pub const P: u64 = 64_129_007;
/// The larger prime factor of [`MODULUS`] (≡ 3 mod 4).
pub const Q: u64 = 71_912_637_263;
/// The thesis's modulus, 2^62 − 63.
pub const MODULUS: u64 = (1 << 62) - 63;

/// A Blum-Blum-Shub generator.
#[derive(Clone, Debug)]
pub struct Bbs {
    x: u64,
    m: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn square_mod(x: u64, m: u64) -> u64 {
    // x < m < 2^63, so x² fits in 126 bits.
    ((u128::from(x) * u128::from(x)) % u128::from(m)) as u64
}

impl Bbs {
    /// A generator with the thesis's modulus, seeded from any 64-bit value.
    pub fn new(seed: u64) -> Self {
        Self::with_modulus(MODULUS, seed)
    }

    /// A generator for modulus `m` (a product of two primes ≡ 3 mod 4). The
    /// state starts at the square of the first value from `seed mod m` up that
    /// is at least 2 and coprime to `m`, so it is a quadratic residue as BBS
    /// requires.
    pub fn with_modulus(m: u64, seed: u64) -> Self {
        assert!(m > 4 && m < 1 << 63, "modulus out of range");
        let mut s = seed % m;
        while s < 2 || gcd(s, m) != 1 {
            s = (s + 1) % m;
        }
        Bbs {
            x: square_mod(s, m),
            m,
        }
    }

    /// The current state.
    pub fn state(&self) -> u64 {
        self.x
    }

    /// Advances the state and returns its parity.
    pub fn next_bit(&mut self) -> bool {
        self.x = square_mod(self.x, self.m);
        self.x.count_ones() % 2 == 1
    }

    /// The next 64 bits, first bit most significant.
    pub fn next_u64(&mut self) -> u64 {
        (0..64).fold(0, |v, _| (v << 1) | u64::from(self.next_bit()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_prime(n: u64) -> bool {
        n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
    }

    /// Euler's totient by trial division.
    fn phi(mut n: u64) -> u64 {
        let mut result = n;
        let mut d = 2;
        while d * d <= n {
            if n % d == 0 {
                while n % d == 0 {
                    n /= d;
                }
                result -= result / d;
            }
            d += 1;
        }
        if n > 1 {
            result -= result / n;
        }
        result
    }

    fn lcm(a: u64, b: u64) -> u64 {
        a / gcd(a, b) * b
    }

    /// Carmichael's λ by trial division.
    fn carmichael(mut n: u64) -> u64 {
        let mut l = 1;
        let mut d = 2;
        while n > 1 {
            if n % d == 0 {
                let mut pk = 1;
                while n % d == 0 {
                    n /= d;
                    pk *= d;
                }
                let part = if d == 2 && pk >= 8 { pk / 4 } else { phi(pk) };
                l = lcm(l, part);
            }
            d += 1;
        }
        l
    }

    #[test]
    fn the_modulus_is_the_one_of_the_thesis() {
        assert_eq!(P * Q, MODULUS);
        assert_eq!(MODULUS, 4_611_686_018_427_387_841);
        assert!(is_prime(P) && is_prime(Q));
        assert_eq!((P % 4, Q % 4), (3, 3));
        // p − 1 = 2 · 32064503 and q − 1 = 2 · 223 · 1223 · 131839, so
        // gcd(φ(p − 1), φ(q − 1)) = 2 and the cycle is long.
        assert_eq!(P - 1, 2 * 32_064_503);
        assert!(is_prime(32_064_503));
        assert_eq!(Q - 1, 2 * 223 * 1223 * 131_839);
        assert!([223, 1223, 131_839].into_iter().all(is_prime));
        assert_eq!(gcd(phi(P - 1), phi(Q - 1)), 2);
    }

    #[test]
    fn matches_values_computed_independently() {
        // Python: x = 12345² mod M; then x = x² mod M, bit = parity(x), 64 times.
        let mut g = Bbs::new(12345);
        assert_eq!(g.state(), 12345 * 12345);
        let mut states = Vec::new();
        let mut bits = 0u64;
        for i in 0..64 {
            bits = (bits << 1) | u64::from(g.next_bit());
            if i < 3 {
                states.push(g.state());
            }
        }
        assert_eq!(
            states,
            [
                23_225_462_820_950_625,
                912_721_569_976_749_279,
                819_072_618_299_822_568
            ]
        );
        assert_eq!(bits, 0xe0f7_38f3_133b_6aa5);
        assert_eq!(Bbs::new(12345).next_u64(), 0xe0f7_38f3_133b_6aa5);
    }

    #[test]
    fn period_divides_lambda_of_lambda_on_small_moduli() {
        for (p, q) in [(11u64, 19u64), (7, 23), (43, 59), (103, 131)] {
            let m = p * q;
            let bound = carmichael(carmichael(m));
            for seed in 0..m {
                let g = Bbs::with_modulus(m, seed);
                let start = g.state();
                let mut h = g.clone();
                let mut period = 0;
                loop {
                    h.next_bit();
                    period += 1;
                    if h.state() == start {
                        break;
                    }
                    assert!(
                        period <= bound,
                        "m={m} seed={seed}: no cycle within λ(λ(m))"
                    );
                }
                assert_eq!(bound % period, 0, "m={m} seed={seed}: period {period}");
            }
        }
    }

    #[test]
    fn seeds_that_share_a_factor_with_the_modulus_are_moved() {
        for seed in [0, 1, P, Q, MODULUS, 2 * P] {
            let g = Bbs::new(seed);
            assert_eq!(gcd(g.state(), MODULUS), 1, "seed {seed}");
        }
    }
}
