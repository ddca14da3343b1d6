//! The one non-cryptographic hash of the crate: 64-bit FNV-1a, used where a value must be the
//! same on every machine and dependency version (synthetic data seeds, lexical hash vectors).
//! `std`'s hashers are randomly keyed or may change between releases; FNV never does.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;
/// Mixed in between parts, so ("ab", "c") and ("a", "bc") hash apart.
const PART_SEPARATOR: u64 = 0x1f;

/// FNV-1a over the bytes of `parts`, with a separator between consecutive parts. For one
/// part it is plain FNV-1a of that text.
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash = OFFSET_BASIS;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hash = (hash ^ PART_SEPARATOR).wrapping_mul(PRIME);
        }
        for byte in part.bytes() {
            hash = (hash ^ byte as u64).wrapping_mul(PRIME);
        }
    }
    hash
}

/// FNV-1a over 32-bit words in four interleaved lanes (word `i` goes to lane `i % 4`), the
/// lanes then folded together: the same on every machine, and a quarter of the dependent
/// multiplications of [`fnv1a`] over the same bytes (a 384-float vector is 384 words, not
/// 1,536 bytes). For fingerprints of vectors, not for text.
pub fn fnv1a_words(words: impl IntoIterator<Item = u32>) -> u64 {
    let mut lanes = [OFFSET_BASIS; 4];
    for (i, word) in words.into_iter().enumerate() {
        let lane = &mut lanes[i % 4];
        *lane = (*lane ^ word as u64).wrapping_mul(PRIME);
    }
    lanes.iter().fold(OFFSET_BASIS, |hash, lane| {
        lane.to_le_bytes()
            .iter()
            .fold(hash, |h, &b| (h ^ b as u64).wrapping_mul(PRIME))
    })
}

#[cfg(test)]
mod tests {
    use super::{fnv1a, fnv1a_words};

    #[test]
    fn word_hashes_tell_order_and_values_apart() {
        let base = fnv1a_words([1, 2, 3, 4, 5]);
        assert_eq!(base, fnv1a_words([1, 2, 3, 4, 5]));
        assert_ne!(base, fnv1a_words([2, 1, 3, 4, 5]));
        assert_ne!(base, fnv1a_words([1, 2, 3, 4, 6]));
        assert_ne!(base, fnv1a_words([1, 2, 3, 4, 5, 0]));
        // Words four apart share a lane, and still swap apart.
        assert_ne!(base, fnv1a_words([5, 2, 3, 4, 1]));
    }

    #[test]
    fn matches_the_published_fnv1a_test_vectors() {
        // From the FNV reference test suite (64-bit FNV-1a).
        assert_eq!(fnv1a(&[""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&["a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&["foobar"]), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn parts_are_separated() {
        assert_ne!(fnv1a(&["ab", "c"]), fnv1a(&["a", "bc"]));
        assert_ne!(fnv1a(&["ab", "c"]), fnv1a(&["abc"]));
    }
}
