//! Seeded, stateless mixing. Every "random" number the simulator shows
//! (addresses, context ids, handle nonces) is a pure function of the machine
//! seed and what is being named, so a run replays exactly from its seed.

/// SplitMix64's finaliser: a cheap bijective scramble of one word.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A keyed hash of several words (domain-separate with the first word).
pub(crate) fn hash(seed: u64, words: &[u64]) -> u64 {
    words.iter().fold(mix64(seed), |h, w| mix64(h ^ *w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_seed_and_words() {
        assert_eq!(hash(1, &[2, 3]), hash(1, &[2, 3]));
        assert_ne!(hash(1, &[2, 3]), hash(2, &[2, 3]));
        assert_ne!(hash(1, &[2, 3]), hash(1, &[3, 2]));
    }
}
