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

#[cfg(test)]
mod tests {
    use super::fnv1a;

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
