//! The local embedder against the Python reference: the same sentences give the same vectors
//! as sentence-transformers (cosine >= 0.999), and meaning, not spelling, decides closeness.
//! Needs the model files: `bash scripts/fetch-model.sh` (scripts/test.sh runs it).

use std::path::PathBuf;

use memlife::embedders::Embedded;
use memlife::embedders::local::LocalEmbedder;
use memlife::logic::similarity::dot;

fn model() -> LocalEmbedder {
    let dir = std::env::var_os("MEMLIFE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
        });
    LocalEmbedder::load(&dir)
        .unwrap_or_else(|e| panic!("{e:#} (run `bash scripts/fetch-model.sh`)"))
}

fn vectors(model: &LocalEmbedder, texts: &[&str]) -> Vec<(Vec<f32>, bool)> {
    model
        .embed(texts)
        .unwrap()
        .into_iter()
        .map(|e| match e {
            Embedded::Vector { values, truncated } => (values, truncated),
            Embedded::Refused(reason) => panic!("refused: {reason}"),
        })
        .collect()
}

#[test]
fn vectors_match_the_sentence_transformers_reference() {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::common::fixture("minilm_reference.json")).unwrap(),
    )
    .unwrap();
    let sentences: Vec<&str> = fixture["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let model = model();
    assert_eq!(model.dim(), 384);
    let got = vectors(&model, &sentences);
    for (i, (vector, truncated)) in got.iter().enumerate() {
        let reference: Vec<f32> = fixture["vectors"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let cosine = dot(vector, &reference);
        assert!(
            cosine >= 0.999,
            "sentence {i} ({:.40}...): cosine {cosine}",
            sentences[i]
        );
        assert_eq!(
            *truncated,
            sentences[i].len() > 2000,
            "sentence {i} truncation flag"
        );
    }
}

#[test]
fn meaning_decides_closeness() {
    let model = model();
    let v = vectors(
        &model,
        &[
            "User prefers dark mode",
            "User likes a dark theme",
            "User has a dog",
        ],
    );
    let (theme, dog) = (dot(&v[0].0, &v[1].0), dot(&v[0].0, &v[2].0));
    assert!(theme > dog + 0.2, "dark theme {theme} vs dog {dog}");

    // Paraphrase groups of the committed sample score above unrelated pairs.
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sample.join("sample.truth.json")).unwrap())
            .unwrap();
    let texts: std::collections::HashMap<String, String> =
        std::fs::read_to_string(sample.join("sample.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    row["id"].as_str().unwrap().to_string(),
                    row["text"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    let groups: Vec<(String, String)> = truth["duplicate_groups"]
        .as_array()
        .unwrap()
        .iter()
        .take(12)
        .map(|g| {
            let ids = g["memory_ids"].as_array().unwrap();
            (
                texts[ids[0].as_str().unwrap()].clone(),
                texts[ids[1].as_str().unwrap()].clone(),
            )
        })
        .collect();
    let firsts: Vec<&str> = groups.iter().map(|g| g.0.as_str()).collect();
    let seconds: Vec<&str> = groups.iter().map(|g| g.1.as_str()).collect();
    let (a, b) = (vectors(&model, &firsts), vectors(&model, &seconds));
    let paraphrase: Vec<f32> = (0..groups.len()).map(|i| dot(&a[i].0, &b[i].0)).collect();
    let unrelated: Vec<f32> = (0..groups.len())
        .map(|i| dot(&a[i].0, &b[(i + 1) % groups.len()].0))
        .collect();
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    assert!(
        mean(&paraphrase) > mean(&unrelated) + 0.2,
        "paraphrases {paraphrase:?} vs unrelated {unrelated:?}"
    );
}

/// Any number of texts in one call (a sessions run embeds all its narratives at once): each
/// gets the vector it gets alone, in the caller's order, blank ones refused in place.
#[test]
fn a_long_list_is_embedded_in_bounded_batches_in_order() {
    let model = model();
    let texts: Vec<String> = (0..150)
        .map(|i| match i % 3 {
            0 => format!("Note {i}: bought apples."),
            1 => format!(
                "Entry {i}: a longer memory about the trip to the coast, the rain on the second \
                 day and the museum we visited instead, then dinner by the harbour."
            ),
            _ => format!("Item {i} about work."),
        })
        .collect();
    let mut refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    refs[70] = "  ";
    let all = model.embed(&refs).unwrap();
    assert_eq!(all.len(), 150);
    assert!(matches!(all[70], Embedded::Refused(_)));
    for i in [0, 1, 2, 69, 71, 149] {
        let alone = vectors(&model, &[refs[i]]);
        let Embedded::Vector { values, .. } = &all[i] else {
            panic!("text {i} refused");
        };
        assert!(dot(values, &alone[0].0) > 0.9999, "text {i}");
    }
}
