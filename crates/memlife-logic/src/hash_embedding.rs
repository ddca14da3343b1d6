//! A deterministic, lexical embedder for machines without the model: feature hashing of word
//! unigrams, word bigrams and character trigrams into signed buckets, L2-normalised. It finds
//! shared words, not shared meaning ("dark mode" ~ "dark theme", but not "dog" ~ "puppy").
//!
//! Pure: no model files, no network. The `hash` embedder serves it, and so does the mock
//! server's embeddings endpoint.

use crate::hash::fnv1a;
use crate::similarity::normalise;

/// The name recorded beside vectors this embedder makes.
pub const HASH_MODEL_NAME: &str = "hash-lexical-v1";

const WORD_WEIGHT: f32 = 1.0;
const BIGRAM_WEIGHT: f32 = 0.7;
const TRIGRAM_WEIGHT: f32 = 0.35;

fn add(vector: &mut [f32], hash: u64, weight: f32) {
    let bucket = (hash % vector.len() as u64) as usize;
    let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
    vector[bucket] += sign * weight;
}

/// Embeds one text into `dim` dimensions.
pub fn hash_embed(text: &str, dim: usize) -> Vec<f32> {
    let mut vector = vec![0.0f32; dim.max(1)];
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    for (i, word) in words.iter().enumerate() {
        add(&mut vector, fnv1a(&["w", word]), WORD_WEIGHT);
        if let Some(next) = words.get(i + 1) {
            add(&mut vector, fnv1a(&["b", word, next]), BIGRAM_WEIGHT);
        }
        let padded: Vec<char> = format!("<{word}>").chars().collect();
        for window in padded.windows(3) {
            let trigram: String = window.iter().collect();
            add(&mut vector, fnv1a(&["c", &trigram]), TRIGRAM_WEIGHT);
        }
    }
    normalise(&mut vector);
    vector
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::similarity::dot;

    #[test]
    fn deterministic_unit_vectors() {
        let a = hash_embed("User prefers dark mode.", 384);
        assert_eq!(a, hash_embed("User prefers dark mode.", 384));
        let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!(hash_embed("", 384).iter().all(|v| *v == 0.0));
    }

    #[test]
    fn shared_words_score_higher_than_unrelated_text() {
        let base = hash_embed("User prefers dark mode", 384);
        let near = hash_embed("User likes dark mode in apps", 384);
        let far = hash_embed("Bob adopted a rabbit from the shelter", 384);
        assert!(dot(&base, &near) > dot(&base, &far) + 0.2);
        assert!(dot(&base, &hash_embed("user PREFERS dark-mode!", 384)) > 0.99);
    }
}
