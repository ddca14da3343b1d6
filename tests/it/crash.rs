//! The crash harness: every job that writes is killed (abort, as `kill -9` would) at each of
//! its named crash points in turn, then run again; the store must pass `memlife check` and
//! hold exactly what one uninterrupted run leaves (same memories, scores, links; audit rows
//! not duplicated). A later job joins by adding its scenario to `SCENARIOS`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::common::{TestDb, memlife_command, stderr, stdout};

/// Two users' memories: near-duplicates and a change for `link`, stale low-salience ones for
/// `scores` to archive, restatements for `consolidate`, enough rows for `embed` to commit in
/// several chunks.
fn memories() -> String {
    let mut lines = Vec::new();
    let texts = [
        "Noor drinks oat milk in her coffee every morning",
        "Noor now drinks almond milk in her coffee instead of oat milk",
        "Noor runs along the canal on Saturday mornings",
        "Noor is training for the Rotterdam half marathon",
        "Noor works as a structural engineer at a bridge firm",
        "Noor's sister Lina lives in Utrecht",
        "Noor switched from Vim to Helix for editing code",
        "Noor edits code in Vim with a custom colour scheme",
        // Restatements that complete one another: what `consolidate` folds.
        "Noor's sister Lina lives in Utrecht and works as a nurse",
        "Noor's sister Lina lives in Utrecht with her two cats",
        // Two facts in one memory: what `refine` splits.
        "Noor plays the cello in an amateur orchestra. Noor's car is a blue Volvo estate.",
    ];
    for (user, days) in [("noor", 0), ("omar", 40)] {
        for (i, text) in texts.iter().enumerate() {
            let text = text.replace("Noor", if user == "noor" { "Noor" } else { "Omar" });
            let day = 1 + days + i * 3;
            let (salience, state) = if i >= 6 {
                (0.02, "active")
            } else {
                (0.6, "candidate")
            };
            lines.push(format!(
                r#"{{"id":"{user}-{i}","user_id":"{user}","text":"{text}","salience":{salience},"state":"{state}","created_at":"2025-01-{:02}T09:00:00Z"}}"#,
                day.min(28)
            ));
        }
    }
    lines.join("\n") + "\n"
}

struct Scenario {
    name: &'static str,
    /// Steps that bring a fresh database to where the job starts.
    setup: &'static [&'static [&'static str]],
    job: &'static [&'static str],
    points: &'static [&'static str],
    /// A count that one clean run makes non-zero: proof the points sit between real writes.
    witness: &'static str,
}

const IMPORT: &[&str] = &["import", "{memories}"];
const EMBED: &[&str] = &["embed", "--embedder", "hash", "--commit-rows", "4"];
const RECALL_BEFORE: &[&str] = &[
    "recall",
    "Noor drinks milk in her coffee",
    "--user",
    "noor",
    "--embedder",
    "hash",
    "--now",
    "2025-08-30T00:00:00Z",
];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "import",
        setup: &[],
        job: IMPORT,
        points: &[
            "import.started",
            "import.mid-write",
            "import.after-commit",
            "import.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories",
    },
    Scenario {
        name: "embed",
        setup: &[IMPORT],
        job: EMBED,
        points: &["embed.started", "embed.after-chunk", "embed.finishing"],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE embedding IS NOT NULL",
    },
    Scenario {
        name: "scores",
        // A recall's activations wait for the run to write them.
        setup: &[IMPORT, EMBED, RECALL_BEFORE],
        job: &["scores", "--now", "2025-09-01T00:00:00Z"],
        points: &[
            "scores.started",
            "scores.after-audit",
            "scores.after-update",
            "scores.after-activations",
            "scores.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'ARCHIVE'",
    },
    Scenario {
        name: "link (online, offline judge)",
        setup: &[IMPORT, EMBED],
        job: &["link", "--min-score", "0.2"],
        points: &[
            "link.started",
            "link.after-links",
            "link.after-chains",
            "link.after-marks",
            "link.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM links",
    },
    Scenario {
        name: "cluster (full mode)",
        setup: &[IMPORT, EMBED],
        job: &["cluster", "--mode", "full", "--threshold", "0.2"],
        points: &[
            "cluster.started",
            "cluster.before-write",
            "cluster.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM clusters",
    },
    Scenario {
        name: "consolidate (online, offline judge)",
        setup: &[IMPORT, EMBED, LINK, CLUSTER],
        job: &[
            "consolidate",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
        ],
        points: &[
            "consolidate.started",
            "consolidate.after-audit",
            "consolidate.after-memory",
            "consolidate.after-links",
            "consolidate.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE source = 'consolidate'",
    },
    Scenario {
        name: "refine (online, offline judge)",
        setup: &[IMPORT, EMBED],
        job: &[
            "--config",
            "{config}",
            "refine",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
        ],
        points: &[
            "refine.started",
            "refine.after-audit",
            "refine.after-memories",
            "refine.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE source = 'refine'",
    },
    Scenario {
        name: "entities",
        setup: &[IMPORT],
        job: &["entities", "--embedder", "hash"],
        points: &[
            "entities.started",
            "entities.after-unlink",
            "entities.after-entities",
            "entities.after-links",
            "entities.after-marks",
            "entities.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM links WHERE link_type LIKE 'shares_entity:%'",
    },
    Scenario {
        name: "entity-gc",
        // Entities, then stale memories archived (their entities archived by a first GC),
        // then a near-duplicate of Lina: the GC merges it and deletes what is past grace.
        setup: &[
            IMPORT,
            &["entities", "--embedder", "hash"],
            &["scores", "--now", "2025-09-01T00:00:00Z"],
            &["entity-gc", "--now", "2025-09-01T00:00:00Z", "--no-merge"],
            &["import", "--table", "entities", "{entities}"],
            &["import", "--table", "memory_entities", "{memory_entities}"],
        ],
        job: &["entity-gc", "--now", "2025-12-01T00:00:00Z"],
        points: &[
            "entity-gc.started",
            "entity-gc.after-audit",
            "entity-gc.after-survivors",
            "entity-gc.after-links",
            "entity-gc.after-merges",
            "entity-gc.after-archive",
            "entity-gc.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'ENTITY_MERGE' \
                  AND classification = 'same-name'",
    },
    Scenario {
        name: "sessions (offline judge)",
        setup: &[&["import", "{sessions}"]],
        job: &[
            "sessions",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
        ],
        points: &[
            "sessions.started",
            "sessions.after-audit",
            "sessions.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE kind = 'narrative'",
    },
    Scenario {
        name: "insights (offline judge)",
        setup: &[&["import", "{narratives}"], EMBED],
        job: &[
            "insights",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
            "--lookback-days",
            "30",
            "--similarity",
            "0.3",
        ],
        points: &[
            "insights.started",
            "insights.after-audit",
            "insights.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE kind = 'learning_pattern'",
    },
    Scenario {
        name: "distill (offline judge)",
        setup: &[
            &["import", "{episodes}"],
            EMBED,
            &["entities", "--embedder", "hash"],
        ],
        job: &[
            "distill",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
            "--similarity",
            "0.5",
        ],
        points: &[
            "distill.started",
            "distill.after-audit",
            "distill.after-facts",
            "distill.after-links",
            "distill.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE archived_at IS NOT NULL",
    },
    Scenario {
        name: "anchor",
        setup: &[&["import", "{narratives}"], EMBED],
        job: &["anchor", "--now", "2025-09-01T00:00:00Z"],
        points: &["anchor.started", "anchor.after-audit", "anchor.finishing"],
        witness: "SELECT COUNT(*) AS n FROM anchors",
    },
    Scenario {
        name: "prune",
        // Links and entity rows to the stale memories, which prune exports and deletes.
        setup: &[IMPORT, EMBED, LINK, &["entities", "--embedder", "hash"]],
        job: &["prune", "--now", "2025-09-01T00:00:00Z"],
        points: &[
            "prune.started",
            "prune.after-export",
            "prune.after-audit",
            "prune.after-archive",
            "prune.after-unlink",
            "prune.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'PRUNE' \
                  AND classification = 'DELETE'",
    },
    Scenario {
        name: "describe",
        setup: &[IMPORT, &["entities", "--embedder", "hash"]],
        job: &["describe", "--embedder", "hash"],
        points: &[
            "describe.started",
            "describe.after-audit",
            "describe.after-entities",
            "describe.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'DESCRIBE'",
    },
    Scenario {
        name: "integrate (online, offline judge)",
        setup: &[IMPORT, EMBED],
        job: INTEGRATE,
        points: &[
            "integrate.started",
            "integrate.after-audit",
            "integrate.after-links",
            "integrate.after-review",
            "integrate.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE superseded_by IS NOT NULL",
    },
    Scenario {
        name: "review expire",
        // The integrate run leaves one merge in the queue; expiring it keeps the fact.
        setup: &[IMPORT, EMBED, INTEGRATE],
        job: &[
            "--config",
            "{config}",
            "review",
            "expire",
            "--embedder",
            "hash",
            "--now",
            "2025-12-01T00:00:00Z",
        ],
        points: &[
            "review.started",
            "review.after-audit",
            "review.after-links",
            "review.after-review",
            "review.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM review_queue WHERE status = 'expired'",
    },
    Scenario {
        name: "undo (an integrate run)",
        setup: &[IMPORT, EMBED, INTEGRATE],
        job: &["undo", "--last", "integrate", "--embedder", "hash"],
        points: &[
            "undo.started",
            "undo.after-audit",
            "undo.after-links",
            "undo.after-restore",
            "undo.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'UNDO'",
    },
    Scenario {
        name: "undo (a consolidate run, from the tables' versions)",
        setup: &[IMPORT, EMBED, LINK, CLUSTER, CONSOLIDATE],
        job: &["undo", "--last", "consolidate"],
        points: &[
            "undo.started",
            "undo.after-audit",
            "undo.after-memories",
            "undo.after-links",
            "undo.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'UNDO'",
    },
    Scenario {
        name: "undo (a scores run, from the tables' versions)",
        setup: &[IMPORT, SCORES],
        job: &["undo", "--last", "scores"],
        points: &[
            "undo.started",
            "undo.after-audit",
            "undo.after-memories",
            "undo.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'UNDO'",
    },
    Scenario {
        name: "optimize (every version older than now removed)",
        setup: &[IMPORT, EMBED, SCORES],
        job: &["optimize", "--keep-versions-days", "0"],
        points: &[
            "optimize.started",
            "optimize.after-audit",
            "optimize.after-compact",
            "optimize.before-prune",
            "optimize.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'PRUNE_VERSIONS'",
    },
    Scenario {
        name: "optimize --light (the small fragments embed's commits left, merged; every \
               version older than now removed)",
        // As for the full run: `audit_log` has versions to remove whether or not a killed
        // run's own audit commit added one.
        setup: &[IMPORT, EMBED, SCORES],
        job: &["optimize", "--light", "--keep-versions-days", "0"],
        points: &[
            "optimize.started",
            "optimize.after-audit",
            "optimize.after-compact",
            "optimize.before-prune",
            "optimize.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM runs WHERE job = 'optimize' AND status = 'done'",
    },
    Scenario {
        name: "recall (activation)",
        setup: &[IMPORT, EMBED],
        job: &[
            "recall",
            "Noor drinks milk in her coffee",
            "--user",
            "noor",
            "--embedder",
            "hash",
            "--now",
            "2025-09-01T00:00:00Z",
        ],
        points: &["recall.after-audit", "recall.after-activation"],
        witness: "SELECT COUNT(*) AS n FROM activations WHERE recalled_at = '2025-09-01T00:00:00Z'",
    },
    Scenario {
        name: "traverse (heal-on-read)",
        setup: &[IMPORT, DEAD_LINKS],
        job: &["traverse", "noor-0", "--depth", "2"],
        points: &["traverse.after-audit"],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'HEAL'",
    },
];
const LINK: &[&str] = &["link", "--min-score", "0.2"];
/// Links whose other end is not a memory, for traversal's heal-on-read.
const DEAD_LINKS: &[&str] = &["import", "--table", "links", "{links}"];

fn links() -> String {
    [
        ("noor-0", "noor-1", "related_to"),
        ("noor-0", "gone-a", "related_to"),
        ("gone-b", "noor-1", "causes"),
    ]
    .iter()
    .map(|(s, t, ty)| {
        format!(r#"{{"source_id":"{s}","target_id":"{t}","user_id":"noor","link_type":"{ty}"}}"#)
            + "\n"
    })
    .collect()
}
/// New facts for `integrate`: with the offline judge, a duplicate (touched), a supersession,
/// a merge too unsure to apply (queued for review), an addition and its repetition.
const FACTS: &str = r#"{"user_id":"noor","text":"Noor runs along the canal on Saturday mornings","created_at":"2025-03-01T09:00:00Z"}
{"user_id":"noor","text":"Noor now drinks soy milk in her coffee instead of almond milk","created_at":"2025-03-02T09:00:00Z"}
{"user_id":"noor","text":"Noor is training for the Rotterdam half marathon with her running club in April","created_at":"2025-03-03T09:00:00Z"}
{"user_id":"omar","text":"Omar adopted a grey kitten called Pixel","created_at":"2025-03-01T09:00:00Z"}
{"user_id":"omar","text":"Omar adopted a grey kitten called Pixel","created_at":"2025-03-05T09:00:00Z"}
"#;
/// Two users' ended sessions for `sessions`.
const SESSIONS: &str = r#"{"id":"s1","user_id":"noor","session_id":"a","kind":"episode","text":"Noor asked about trains to Ghent.","created_at":"2025-03-01T09:00:00Z"}
{"id":"s2","user_id":"noor","session_id":"a","kind":"episode","text":"Noor booked the 9:12 train. Is there a bike carriage?","created_at":"2025-03-01T09:05:00Z"}
{"id":"s3","user_id":"omar","session_id":"b","kind":"episode","text":"Omar planned a dinner for six.","created_at":"2025-03-02T19:00:00Z"}
{"id":"s4","user_id":"omar","session_id":"b","kind":"fact","text":"Omar's guests are vegetarian.","created_at":"2025-03-02T19:04:00Z"}
"#;
/// Three narratives of noor's alike enough to be one cluster, for `insights` and `anchor`.
const NARRATIVES: &str = r#"{"id":"n1","user_id":"noor","kind":"narrative","text":"Noor took the train to Ghent for work and asked about the bike carriage.","created_at":"2025-08-20T09:00:00Z"}
{"id":"n2","user_id":"noor","kind":"narrative","text":"Noor took the train to Ghent for work again and the bike carriage was full.","created_at":"2025-08-22T09:00:00Z"}
{"id":"n3","user_id":"noor","kind":"narrative","text":"Noor took the train to Ghent for work and found the bike carriage full.","created_at":"2025-08-25T09:00:00Z"}
"#;
/// Old, fading episodes of noor's alike enough to be one group, for `distill`.
const EPISODES: &str = r#"{"id":"d1","user_id":"noor","kind":"episode","text":"Noor took the train to Ghent for work.","created_at":"2025-07-05T08:00:00Z","salience":0.1}
{"id":"d2","user_id":"noor","kind":"episode","text":"Noor took the train to Ghent for work and the bike carriage was full.","created_at":"2025-07-12T08:00:00Z","salience":0.1}
{"id":"d3","user_id":"noor","kind":"episode","text":"Noor took the early train to Ghent for work again.","created_at":"2025-07-19T08:00:00Z","salience":0.1}
"#;
const INTEGRATE: &[&str] = &[
    "--config",
    "{config}",
    "integrate",
    "{facts}",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
];
/// In batch mode at a lower `--min-confidence`, so the offline judge's merge (0.65) is
/// applied and the poll goes through both rounds.
const INTEGRATE_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "integrate",
    "{facts}",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--llm",
    "providers",
    "--mode",
    "batch",
    "--min-confidence",
    "0.6",
];
const CLUSTER: &[&str] = &["cluster", "--mode", "full", "--threshold", "0.5"];
const CONSOLIDATE: &[&str] = &[
    "consolidate",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
];
const SCORES: &[&str] = &["scores", "--now", "2025-09-01T00:00:00Z"];

const BATCH_SUBMIT: &[&str] = &[
    "--config",
    "{config}",
    "link",
    "--llm",
    "providers",
    "--mode",
    "batch",
    "--min-score",
    "0.2",
];
const POLL: &[&str] = &[
    "--config",
    "{config}",
    "batches",
    "poll",
    "--lease-secs",
    "0",
    "--embedder",
    "hash",
];
const CONSOLIDATE_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "consolidate",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const REFINE_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "refine",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const SESSIONS_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "sessions",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const INSIGHTS_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "insights",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--lookback-days",
    "30",
    "--similarity",
    "0.3",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const DISTILL_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "distill",
    "--embedder",
    "hash",
    "--now",
    "2025-09-01T00:00:00Z",
    "--similarity",
    "0.5",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const ENTITIES_BATCH: &[&str] = &[
    "--config",
    "{config}",
    "entities",
    "--embedder",
    "hash",
    "--extractor",
    "llm",
    "--llm",
    "providers",
    "--mode",
    "batch",
];
const POLL_POINTS: &[&str] = &[
    "batches.poll.started",
    "batches.poll.before-claim",
    "batches.poll.after-download",
    "batches.poll.applying",
    "batches.poll.after-apply",
    "batches.poll.finishing",
];

/// `batches retry` against a mock whose batches all fail: the retried batch is resubmitted
/// (and fails again remotely, which the next poll would see).
const RETRY_SCENARIOS: &[Scenario] = &[Scenario {
    name: "batches retry",
    setup: &[IMPORT, EMBED, BATCH_SUBMIT, POLL],
    job: &[
        "--config",
        "{config}",
        "batches",
        "retry",
        "--stuck-after-secs",
        "0",
    ],
    points: &[
        "batches.retry.started",
        "batches.retry.after-take",
        "batches.retry.after-send",
        "batches.retry.finishing",
    ],
    witness: "SELECT COUNT(*) AS n FROM llm_batches WHERE attempts = 2",
}];

/// The Batch API path through `memlife mock-llm`: submission, then the poll that applies
/// (a poll killed after its claim is taken over at once: `--lease-secs 0`), then cleanup.
const BATCH_SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "link (batch submission)",
        setup: &[IMPORT, EMBED],
        job: BATCH_SUBMIT,
        points: &["link.started", "link.finishing"],
        witness: "SELECT COUNT(*) AS n FROM llm_batches WHERE status = 'submitted'",
    },
    Scenario {
        name: "batches poll",
        setup: &[IMPORT, EMBED, BATCH_SUBMIT],
        job: POLL,
        points: POLL_POINTS,
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'LINK'",
    },
    Scenario {
        name: "consolidate (batch: pass 1 submitted)",
        setup: &[IMPORT, EMBED, LINK, CLUSTER],
        job: CONSOLIDATE_BATCH,
        points: &["consolidate.started", "consolidate.finishing"],
        witness: "SELECT COUNT(*) AS n FROM llm_batches WHERE task = 'consolidate.propose'",
    },
    Scenario {
        name: "batches poll (consolidate: pass 1 applied, pass 2 submitted and applied)",
        setup: &[IMPORT, EMBED, LINK, CLUSTER, CONSOLIDATE_BATCH],
        job: POLL,
        points: &[
            "batches.poll.before-claim",
            "batches.poll.after-download",
            "consolidate.batch.after-proposals",
            "batches.poll.after-apply",
            "consolidate.after-audit",
            "consolidate.after-memory",
            "consolidate.after-links",
            "batches.poll.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE source = 'consolidate'",
    },
    Scenario {
        name: "batches poll (refine)",
        setup: &[IMPORT, EMBED, REFINE_BATCH],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "refine.after-audit",
            "refine.after-memories",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE source = 'refine'",
    },
    Scenario {
        name: "batches poll (sessions)",
        setup: &[&["import", "{sessions}"], SESSIONS_BATCH],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "sessions.after-audit",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE kind = 'narrative'",
    },
    Scenario {
        name: "batches poll (insights)",
        setup: &[&["import", "{narratives}"], EMBED, INSIGHTS_BATCH],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "insights.after-audit",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE kind = 'learning_pattern'",
    },
    Scenario {
        name: "batches poll (distill)",
        setup: &[
            &["import", "{episodes}"],
            EMBED,
            &["entities", "--embedder", "hash"],
            DISTILL_BATCH,
        ],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "distill.after-audit",
            "distill.after-facts",
            "distill.after-links",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE archived_at IS NOT NULL",
    },
    Scenario {
        name: "entities (batch submission)",
        setup: &[IMPORT],
        job: ENTITIES_BATCH,
        points: &["entities.started", "entities.finishing"],
        witness: "SELECT COUNT(*) AS n FROM llm_batches WHERE task = 'entities.extract'",
    },
    Scenario {
        name: "batches poll (entities)",
        setup: &[IMPORT, ENTITIES_BATCH],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "entities.after-unlink",
            "entities.after-entities",
            "entities.after-links",
            "entities.batch.after-readings",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'EXTRACT'",
    },
    Scenario {
        name: "integrate (batch submission)",
        setup: &[IMPORT, EMBED],
        job: INTEGRATE_BATCH,
        points: &[
            "integrate.started",
            "integrate.after-audit",
            "integrate.after-submit-rows",
            "integrate.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM llm_batches WHERE task = 'integrate.classify'",
    },
    Scenario {
        name: "batches poll (integrate)",
        setup: &[IMPORT, EMBED, INTEGRATE_BATCH],
        job: POLL,
        points: &[
            "batches.poll.after-download",
            "integrate.batch.after-judgements",
            "integrate.after-audit",
            "integrate.after-links",
            "integrate.after-review",
            "integrate.batch.after-merge-texts",
            "batches.poll.after-apply",
        ],
        witness: "SELECT COUNT(*) AS n FROM memories WHERE superseded_by IS NOT NULL",
    },
    Scenario {
        name: "batches cleanup",
        setup: &[IMPORT, EMBED, BATCH_SUBMIT, POLL],
        job: &[
            "--config",
            "{config}",
            "batches",
            "cleanup",
            "--older-than-days",
            "0",
        ],
        points: &[
            "batches.cleanup.started",
            "batches.cleanup.after-audit",
            "batches.cleanup.finishing",
        ],
        witness: "SELECT COUNT(*) AS n FROM audit_log WHERE operation = 'BATCH_CLEANUP'",
    },
];

fn run(db: &TestDb, args: &[&str], fault: Option<&str>) -> std::process::Output {
    let file = db.path("memories.jsonl");
    let config = db.path("memlife.toml");
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.replace("{memories}", &file)
                .replace("{config}", &config)
                .replace("{links}", &db.path("links.jsonl"))
                .replace("{facts}", &db.path("facts.jsonl"))
                .replace("{entities}", &db.path("entities.jsonl"))
                .replace("{memory_entities}", &db.path("memory_entities.jsonl"))
                .replace("{sessions}", &db.path("sessions.jsonl"))
                .replace("{narratives}", &db.path("narratives.jsonl"))
                .replace("{episodes}", &db.path("episodes.jsonl"))
        })
        .collect();
    let mut command = memlife_command();
    command.arg("--db").arg(&db.uri).args(&args);
    if let Some(point) = fault {
        command.env(memlife::crash::FAULT_VARIABLE, point);
    }
    command.output().expect("memlife runs")
}

fn prepared(scenario: &Scenario, mock_url: Option<&str>) -> TestDb {
    let db = TestDb::new();
    std::fs::write(db.path("memories.jsonl"), memories()).unwrap();
    std::fs::write(db.path("links.jsonl"), links()).unwrap();
    std::fs::write(db.path("facts.jsonl"), FACTS).unwrap();
    std::fs::write(db.path("sessions.jsonl"), SESSIONS).unwrap();
    std::fs::write(db.path("narratives.jsonl"), NARRATIVES).unwrap();
    std::fs::write(db.path("episodes.jsonl"), EPISODES).unwrap();
    std::fs::write(
        db.path("entities.jsonl"),
        r#"{"id":"e-dr-lina","user_id":"noor","name":"Dr. Lina","entity_type":"person"}"#,
    )
    .unwrap();
    std::fs::write(
        db.path("memory_entities.jsonl"),
        r#"{"memory_id":"noor-5","entity_id":"e-dr-lina","user_id":"noor"}"#,
    )
    .unwrap();
    // Refine looks at every memory of the fixture (short, new, never accessed).
    let refine = "[refine]\nverbose_threshold_chars = 40\nmin_access_count = 0\nmin_age_days = 0\n\
                  [thresholds.\"hash-lexical-v1\"]\nintegrate = 0.3\n";
    let config = match mock_url {
        Some(url) => {
            let provider = crate::llm::mock_provider("mock", url, "");
            format!("{provider}\n[roles]\nfast = [\"mock\"]\nreasoning = [\"mock\"]\n{refine}")
        }
        None => refine.to_string(),
    };
    std::fs::write(db.path("memlife.toml"), config).unwrap();
    for step in scenario.setup {
        let out = run(&db, step, None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "setup {step:?}: {}",
            stderr(&out)
        );
    }
    db
}

fn query(db: &TestDb, sql: &str) -> String {
    let out = db.run(&["sql", sql, "--format", "jsonl"]);
    assert_eq!(out.status.code(), Some(0), "{sql}: {}", stderr(&out));
    stdout(&out)
}

/// What a job leaves that must not depend on whether it was interrupted. (The `runs` log is
/// not compared: a killed run is recorded as `abandoned`, which `check` verifies.)
fn state(db: &TestDb) -> String {
    [
        "SELECT id, text, state, tier, ROUND(salience, 6) AS salience, ROUND(importance, 6) AS importance, \
         archived_at, embedding_model, embedding IS NOT NULL AS embedded, \
         refinement_rejection_count, last_refined_at, updated_at, valid_until, superseded_by, \
         supersession_chain_id, access_count, recall_frequency, last_accessed_at FROM memories \
         ORDER BY id",
        "SELECT memory_id, recall_id, recalled_at, activation FROM activations ORDER BY memory_id",
        "SELECT fact_id, candidate_id, classification, status FROM review_queue ORDER BY fact_id",
        "SELECT source_id, target_id, link_type, confidence FROM links \
         ORDER BY source_id, target_id, link_type",
        // Batch keys are random per database: a cleanup row is compared by its count. Each
        // optimize attempt logs the versions it is about to remove, so a killed attempt's row
        // stays beside its rerun's: what must hold is that each table has one.
        "SELECT operation, CASE WHEN operation = 'BATCH_CLEANUP' THEN 'a batch' ELSE target_id END \
         AS target, classification, \
         CASE WHEN operation = 'PRUNE_VERSIONS' THEN 1 ELSE COUNT(*) END AS copies FROM audit_log \
         GROUP BY operation, target, classification ORDER BY operation, target, classification",
        "SELECT status, request_count, attempts FROM llm_batches ORDER BY status, request_count",
        "SELECT user_id, name, entity_type, aliases, description, is_dirty, archived_at FROM entities \
         ORDER BY user_id, name, entity_type",
        "SELECT memory_id, entity_id FROM memory_entities ORDER BY memory_id, entity_id",
        "SELECT memory_id, text_hash, entity_count FROM entity_scans ORDER BY memory_id",
        // Clusters of the latest finished cluster run (what consolidate reads); a killed
        // run's rows stay behind under its abandoned run id.
        "SELECT user_id, seed_id, member_ids, confidence FROM clusters WHERE run_id = \
         (SELECT run_id FROM runs WHERE job = 'cluster' AND status = 'done' \
         ORDER BY started_at DESC LIMIT 1) ORDER BY user_id, seed_id",
    ]
    .iter()
    .map(|sql| query(db, sql))
    .collect::<Vec<_>>()
    .join("--\n")
}

fn assert_check_holds(db: &TestDb, context: &str) {
    let out = db.run(&["--json", "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{context}: memlife check: {}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn every_job_killed_at_every_crash_point_converges_on_rerun() {
    let mock = crate::llm::Mock::start(&[]);
    let failing = crate::llm::Mock::start(&["--fail-batches", "1000000"]);
    let all: Vec<(&Scenario, Option<&str>)> = SCENARIOS
        .iter()
        .map(|s| (s, None))
        .chain(BATCH_SCENARIOS.iter().map(|s| (s, Some(mock.url.as_str()))))
        .chain(
            RETRY_SCENARIOS
                .iter()
                .map(|s| (s, Some(failing.url.as_str()))),
        )
        .collect();
    // Each scenario on its own databases, so the scenarios run on as many threads as the
    // machine has cores (a scenario is a sequence of memlife processes, one at a time); the
    // table keeps their order. After a failure no further scenario starts.
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let rows: Vec<Mutex<Vec<String>>> = all.iter().map(|_| Mutex::new(Vec::new())).collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|threads| {
        for _ in 0..workers {
            threads.spawn(|| {
                let _stop = StopOnPanic(&failed);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&(scenario, mock_url)) = all.get(i) else {
                        break;
                    };
                    if failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let found = converges(scenario, mock_url);
                    *rows[i].lock().unwrap() = found;
                }
            });
        }
    });
    let table: Vec<String> = rows
        .into_iter()
        .flat_map(|r| r.into_inner().unwrap())
        .collect();
    // RELIABILITY.md's table: `UPDATE_RELIABILITY=1 cargo test --test it crash` rewrites it.
    let text = format!(
        "| job | crash point | outcome after rerun | runs marked abandoned |\n| --- | --- | --- | --- |\n{}\n",
        table.join("\n")
    );
    crate::common::replace_marked_section("RELIABILITY.md", "crash-table", &text);
}

/// Tells the other workers to stop when this one's scenario fails.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// One scenario: a clean run for reference, then for each crash point a fresh store killed
/// there and run again, which must pass `check` and equal the reference. Its table rows.
fn converges(scenario: &Scenario, mock_url: Option<&str>) -> Vec<String> {
    let mut table = Vec::new();
    let reference = prepared(scenario, mock_url);
    let out = run(&reference, scenario.job, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: {}",
        scenario.name,
        stderr(&out)
    );
    assert_check_holds(&reference, scenario.name);
    let witness = reference.scalar(scenario.witness);
    assert_ne!(witness, "0", "{}: {}", scenario.name, scenario.witness);
    let expected = state(&reference);
    for point in scenario.points {
        let db = prepared(scenario, mock_url);
        let killed = run(&db, scenario.job, Some(point));
        assert_eq!(
            killed.status.code(),
            None,
            "{} at {point}: the process must die by a signal: {}",
            scenario.name,
            stderr(&killed)
        );
        assert!(
            stderr(&killed).contains(&format!("injected crash at {point}")),
            "{} never reached {point}: {}",
            scenario.name,
            stderr(&killed)
        );
        let rerun = run(&db, scenario.job, None);
        assert_eq!(
            rerun.status.code(),
            Some(0),
            "{} rerun after {point}: {}",
            scenario.name,
            stderr(&rerun)
        );
        assert_check_holds(&db, &format!("{} after {point}", scenario.name));
        assert_eq!(
            state(&db),
            expected,
            "{} killed at {point} then rerun differs from one clean run",
            scenario.name
        );
        let abandoned = db.scalar("SELECT COUNT(*) AS n FROM runs WHERE status = 'abandoned'");
        table.push(format!(
            "| {} | {point} | killed, rerun exit 0, check holds, tables equal ({} = {witness}) | {abandoned} |",
            scenario.name, scenario.witness
        ));
    }
    table
}

#[test]
fn check_reports_a_killed_run_until_the_next_run_takes_over() {
    let scenario = &SCENARIOS[0];
    let db = prepared(scenario, None);
    let killed = run(&db, scenario.job, Some("import.after-commit"));
    assert_eq!(killed.status.code(), None);
    let out = db.run(&["--json", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["violations"][0]["invariant"], "runs: every running run has a live process",
        "{report}"
    );
    let rerun = run(&db, scenario.job, None);
    assert_eq!(rerun.status.code(), Some(0), "{}", stderr(&rerun));
    assert_check_holds(&db, "after the rerun");
    assert_eq!(
        query(&db, "SELECT status FROM runs WHERE status = 'abandoned'").trim(),
        r#"{"status":"abandoned"}"#
    );
}
