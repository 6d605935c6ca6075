//! A tiny seeded pseudo-random generator (splitmix64): the simulation is reproducible on
//! every platform, without a dependency. (paceline keeps its own for its backoff jitter;
//! neither crate depends on the other.)

/// splitmix64: 64 bits of state, one multiply-xorshift round per draw. Not for cryptography;
/// plenty for arrival times and jitter.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator for one purpose (`stream`) of the simulation seeded with `seed`, independent
    /// of the generators for other purposes.
    pub(crate) fn derive(seed: u64, stream: u64) -> Self {
        let mut mixer = Self::new(seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        Self::new(mixer.next_u64())
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A draw in `0..=max`, by multiply-shift (bias below 2^-64 per draw, irrelevant here).
    pub(crate) fn up_to(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(n) => ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64,
            None => self.next_u64(),
        }
    }
}

/// FNV-1a of a scope's name: a stable hash (unlike `std`'s, which is seeded per process), used
/// to derive each scope's own generator.
pub(crate) fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // Reference values of splitmix64 seeded with 1234567.
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn up_to_stays_in_range_and_reaches_both_ends() {
        let mut rng = SplitMix64::new(7);
        let draws: Vec<u64> = (0..1_000).map(|_| rng.up_to(3)).collect();
        assert!(draws.iter().all(|&d| d <= 3));
        assert!(draws.contains(&0) && draws.contains(&3));
        assert_eq!(rng.up_to(0), 0);
    }

    #[test]
    fn derived_streams_differ_and_repeat() {
        let a = SplitMix64::derive(1, 1).next_u64();
        assert_eq!(a, SplitMix64::derive(1, 1).next_u64());
        assert_ne!(a, SplitMix64::derive(1, 2).next_u64());
        assert_ne!(a, SplitMix64::derive(2, 1).next_u64());
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xCBF2_9CE4_8422_2325);
        assert_eq!(stable_hash("a"), 0xAF63_DC4C_8601_EC8C);
    }
}
