//! `memlife synth`: writes generated memories in any import format, and their ground truth as
//! JSON beside them (`<stem>.truth.json`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::exit::ExitStatus;
use crate::formats::{BatchWriter, Format, open_output};
use crate::logic::hash_embedding::{HASH_MODEL_NAME, hash_embed};
use crate::logic::synth::{SynthConfig, SynthMemory, generate_each_user, placeholder_embedding};
use crate::model::clock::Clock;
use crate::model::encoding::Cell;
use crate::model::rows::RowBuilder;
use crate::model::schema::MEMORIES;

/// The columns synth sets; import gives every other column its default.
const COLUMNS: &[&str] = &[
    "id",
    "user_id",
    "text",
    "kind",
    "session_id",
    "source",
    "embedding",
    "embedding_model",
    "importance",
    "confidence",
    "emotional_salience",
    "state",
    "access_count",
    "recall_frequency",
    "last_accessed_at",
    "last_recall_interval_days",
    "created_at",
    "happens_at",
    "tags",
];

const BATCH_ROWS: usize = 8192;

/// The model name placeholder vectors carry, so `embed` never mixes them with real ones.
pub const PLACEHOLDER_MODEL: &str = "synth-placeholder";

#[derive(Debug, Serialize)]
pub struct SynthSummary {
    pub output: PathBuf,
    pub truth: PathBuf,
    pub memories: usize,
    pub users: usize,
    pub duplicate_groups: usize,
    pub merge_groups: usize,
    pub supersession_chains: usize,
    pub verbose: usize,
    pub sessions: usize,
    pub entities: usize,
}

impl SynthSummary {
    pub fn print(&self, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
        if json {
            serde_json::to_writer_pretty(&mut *out, self)?;
            return writeln!(out);
        }
        writeln!(
            out,
            "wrote {} memories of {} users to {} (truth: {}): {} duplicate groups, {} merge groups, \
             {} supersession chains, {} verbose memories, {} sessions, {} entities",
            self.memories,
            self.users,
            self.output.display(),
            self.truth.display(),
            self.duplicate_groups,
            self.merge_groups,
            self.supersession_chains,
            self.verbose,
            self.sessions,
            self.entities
        )
    }
}

/// `data/sample.jsonl` gives `data/sample.truth.json`.
pub fn truth_path(output: &Path) -> PathBuf {
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "synth".to_string());
    output.with_file_name(format!("{stem}.truth.json"))
}

/// What fills the embedding column when `--dim` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthVectors {
    /// Pseudo-random unit vectors: no structure at all.
    Random,
    /// The lexical hash embedder's vectors of each text: shared words make neighbours.
    Hash,
}

/// Generate deterministic synthetic memories and their ground truth.
#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    #[arg(long, default_value_t = 4)]
    pub users: usize,
    #[arg(long, default_value_t = 1000)]
    pub memories: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output file; the truth goes beside it as <stem>.truth.json.
    #[arg(short, long)]
    pub output: PathBuf,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Add embeddings of this width (0: none). For load tests: see --vectors.
    #[arg(long, default_value_t = 0)]
    pub dim: usize,
    /// What the embeddings are: random unit vectors, or lexical hash vectors of the texts.
    #[arg(long, value_enum, default_value = "random")]
    pub vectors: SynthVectors,
    /// First day memories may be created on (UTC).
    #[arg(long, default_value = "2025-01-01")]
    pub start: Clock,
    /// Number of days memories are spread over.
    #[arg(long, default_value_t = 365)]
    pub days: i64,
}

/// `memlife synth`: generates the file and prints what it holds.
pub fn command(json: bool, args: &SynthArgs, out: &mut dyn Write) -> Result<ExitStatus> {
    let start_micros = args.start.micros();
    let config = SynthConfig {
        users: args.users,
        memories: args.memories,
        seed: args.seed,
        start_micros,
        span_days: args.days.max(1),
    };
    let format = match args.format {
        Some(format) => format,
        None => Format::from_path(&args.output)?,
    };
    let summary = run(&config, args.dim, args.vectors, &args.output, format)?;
    summary.print(json, out)?;
    Ok(ExitStatus::Success)
}

pub fn run(
    config: &SynthConfig,
    dim: usize,
    vectors: SynthVectors,
    output: &Path,
    format: Format,
) -> Result<SynthSummary> {
    let columns: Vec<&str> = COLUMNS
        .iter()
        .copied()
        .filter(|c| dim > 0 || !c.starts_with("embedding"))
        .collect();
    let mut builder = RowBuilder::new(&MEMORIES, dim.max(1), 0);
    let full_schema = builder.schema();
    let indices: Vec<usize> = columns
        .iter()
        .map(|c| full_schema.index_of(c).expect("synth column exists"))
        .collect();
    let schema = std::sync::Arc::new(full_schema.project(&indices)?);
    let mut writer = BatchWriter::new(format, open_output(Some(output))?, schema)?;
    let mut written = 0usize;
    let mut failure: Option<anyhow::Error> = None;
    // Each user's memories are written as soon as they exist: memory stays flat at any size.
    let truth = generate_each_user(config, |memories| {
        if failure.is_none() {
            written += memories.len();
            let output = Output {
                seed: config.seed,
                dim,
                vectors,
                indices: &indices,
            };
            failure = output.write(&memories, &mut builder, &mut writer).err();
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    writer.finish()?;
    let truth_file = truth_path(output);
    let file = std::fs::File::create(&truth_file)
        .with_context(|| format!("cannot create {}", truth_file.display()))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &truth)?;
    writeln!(out)?;
    out.flush()?;
    Ok(SynthSummary {
        output: output.to_path_buf(),
        truth: truth_file,
        memories: written,
        users: config.users,
        duplicate_groups: truth.duplicate_groups.len(),
        merge_groups: truth.merge_groups.len(),
        supersession_chains: truth.supersession_chains.len(),
        verbose: truth.verbose.len(),
        sessions: truth.sessions.len(),
        entities: truth.entities.len(),
    })
}

/// What every batch of the output shares.
struct Output<'a> {
    seed: u64,
    dim: usize,
    vectors: SynthVectors,
    indices: &'a [usize],
}

impl Output<'_> {
    /// Appends one user's memories, a batch at a time.
    fn write(
        &self,
        memories: &[SynthMemory],
        builder: &mut RowBuilder,
        writer: &mut BatchWriter,
    ) -> Result<()> {
        let dim = self.dim;
        let mut embedding = Vec::with_capacity(dim);
        for chunk in memories.chunks(BATCH_ROWS) {
            for memory in chunk {
                if dim > 0 {
                    match self.vectors {
                        SynthVectors::Random => {
                            placeholder_embedding(self.seed, &memory.id, dim, &mut embedding)
                        }
                        SynthVectors::Hash => embedding = hash_embed(&memory.text, dim),
                    }
                }
                let model = match self.vectors {
                    SynthVectors::Random => PLACEHOLDER_MODEL,
                    SynthVectors::Hash => HASH_MODEL_NAME,
                };
                let tags: Vec<Option<&str>> =
                    memory.tags.iter().map(|t| Some(t.as_str())).collect();
                builder
                    .append(|_, name| match name {
                        "id" => Cell::Text(&memory.id),
                        "user_id" => Cell::Text(&memory.user_id),
                        "text" => Cell::Text(&memory.text),
                        "kind" => Cell::Text(memory.kind),
                        "session_id" => Cell::Text(&memory.session_id),
                        "source" => Cell::Text("synth"),
                        "embedding" if dim > 0 => Cell::Floats(&embedding),
                        "embedding_model" if dim > 0 => Cell::Text(model),
                        "importance" => Cell::F64(memory.importance),
                        "confidence" => Cell::F64(memory.confidence),
                        "emotional_salience" => Cell::F64(memory.emotional_salience),
                        "state" => Cell::Text(memory.state),
                        "access_count" => Cell::I64(memory.access_count),
                        "recall_frequency" => Cell::I64(memory.access_count),
                        "last_accessed_at" => {
                            memory.last_accessed_at.map_or(Cell::Null, Cell::Timestamp)
                        }
                        "last_recall_interval_days" => Cell::F64(memory.last_recall_interval_days),
                        "created_at" => Cell::Timestamp(memory.created_at),
                        "happens_at" => memory.happens_at.map_or(Cell::Null, Cell::Timestamp),
                        "tags" => Cell::StrList(tags.clone()),
                        _ => Cell::Missing,
                    })
                    .map_err(|e| anyhow::anyhow!("synth row {}: {e}", memory.id))?;
            }
            let batch = builder.finish()?.project(self.indices)?;
            writer.write(&batch)?;
        }
        Ok(())
    }
}
