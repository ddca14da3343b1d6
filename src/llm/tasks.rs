//! The catalogue of LLM tasks: for each, its versioned prompt template and JSON schema (files
//! in `src/llm/prompts/`), the typed reply, strict parsing and validation of what a model
//! sends back, and the safe choice when a reply cannot be trusted.
//!
//! Pure: text in, typed values out. No HTTP.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

pub use crate::logic::recall::{ReasonedAnswer as AnswerReply, TemporalReference};

/// A task of the LLM layer. Its name is how config, reports and batch records refer to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Task {
    #[serde(rename = "consolidate.propose")]
    ConsolidatePropose,
    #[serde(rename = "consolidate.verify")]
    ConsolidateVerify,
    #[serde(rename = "link.classify")]
    LinkClassify,
    #[serde(rename = "integrate.classify")]
    IntegrateClassify,
    #[serde(rename = "integrate.merge")]
    IntegrateMerge,
    #[serde(rename = "refine")]
    Refine,
    #[serde(rename = "summarize")]
    Summarize,
    #[serde(rename = "entity.describe")]
    EntityDescribe,
    #[serde(rename = "entities.extract")]
    EntitiesExtract,
    #[serde(rename = "recall.answer")]
    RecallAnswer,
    #[serde(rename = "session.narrate")]
    SessionNarrate,
    #[serde(rename = "insight.extract")]
    InsightExtract,
    #[serde(rename = "semantic.distill")]
    SemanticDistill,
}

pub const ALL_TASKS: &[Task] = &[
    Task::ConsolidatePropose,
    Task::ConsolidateVerify,
    Task::LinkClassify,
    Task::IntegrateClassify,
    Task::IntegrateMerge,
    Task::Refine,
    Task::Summarize,
    Task::EntityDescribe,
    Task::EntitiesExtract,
    Task::RecallAnswer,
    Task::SessionNarrate,
    Task::InsightExtract,
    Task::SemanticDistill,
];

/// Bumped whenever a template or schema changes, and recorded with every call.
pub const PROMPT_VERSION: &str = "v1";

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::ConsolidatePropose => "consolidate.propose",
            Task::ConsolidateVerify => "consolidate.verify",
            Task::LinkClassify => "link.classify",
            Task::IntegrateClassify => "integrate.classify",
            Task::IntegrateMerge => "integrate.merge",
            Task::Refine => "refine",
            Task::Summarize => "summarize",
            Task::EntityDescribe => "entity.describe",
            Task::EntitiesExtract => "entities.extract",
            Task::RecallAnswer => "recall.answer",
            Task::SessionNarrate => "session.narrate",
            Task::InsightExtract => "insight.extract",
            Task::SemanticDistill => "semantic.distill",
        }
    }

    pub fn from_name(name: &str) -> Option<Task> {
        ALL_TASKS.iter().copied().find(|t| t.name() == name)
    }

    fn template(self) -> &'static str {
        match self {
            Task::ConsolidatePropose => include_str!("prompts/consolidate.propose.v2.txt"),
            Task::ConsolidateVerify => include_str!("prompts/consolidate.verify.v1.txt"),
            Task::LinkClassify => include_str!("prompts/link.classify.v1.txt"),
            Task::IntegrateClassify => include_str!("prompts/integrate.classify.v1.txt"),
            Task::IntegrateMerge => include_str!("prompts/integrate.merge.v1.txt"),
            Task::Refine => include_str!("prompts/refine.v1.txt"),
            Task::Summarize => include_str!("prompts/summarize.v1.txt"),
            Task::EntityDescribe => include_str!("prompts/entity.describe.v1.txt"),
            Task::EntitiesExtract => include_str!("prompts/entities.extract.v1.txt"),
            Task::RecallAnswer => include_str!("prompts/recall.answer.v1.txt"),
            Task::SessionNarrate => include_str!("prompts/session.narrate.v1.txt"),
            Task::InsightExtract => include_str!("prompts/insight.extract.v1.txt"),
            Task::SemanticDistill => include_str!("prompts/semantic.distill.v1.txt"),
        }
    }

    pub fn schema(self) -> &'static str {
        match self {
            Task::ConsolidatePropose => include_str!("prompts/consolidate.propose.v1.schema.json"),
            Task::ConsolidateVerify => include_str!("prompts/consolidate.verify.v1.schema.json"),
            Task::LinkClassify => include_str!("prompts/link.classify.v1.schema.json"),
            Task::IntegrateClassify => include_str!("prompts/integrate.classify.v1.schema.json"),
            Task::IntegrateMerge => include_str!("prompts/integrate.merge.v1.schema.json"),
            Task::Refine => include_str!("prompts/refine.v1.schema.json"),
            Task::Summarize => include_str!("prompts/summarize.v1.schema.json"),
            Task::EntityDescribe => include_str!("prompts/entity.describe.v1.schema.json"),
            Task::EntitiesExtract => include_str!("prompts/entities.extract.v1.schema.json"),
            Task::RecallAnswer => include_str!("prompts/recall.answer.v1.schema.json"),
            Task::SessionNarrate => include_str!("prompts/session.narrate.v1.schema.json"),
            Task::InsightExtract => include_str!("prompts/insight.extract.v1.schema.json"),
            Task::SemanticDistill => include_str!("prompts/semantic.distill.v1.schema.json"),
        }
    }

    /// How many memories the task takes: (at least, at most).
    fn arity(self) -> (usize, usize) {
        match self {
            Task::LinkClassify | Task::IntegrateClassify => (2, 2),
            Task::Refine => (1, 1),
            Task::IntegrateMerge
            | Task::ConsolidatePropose
            | Task::ConsolidateVerify
            | Task::InsightExtract
            | Task::SemanticDistill => (2, usize::MAX),
            Task::Summarize | Task::EntityDescribe | Task::RecallAnswer | Task::SessionNarrate => {
                (1, usize::MAX)
            }
            Task::EntitiesExtract => (1, EXTRACT_BATCH),
        }
    }
}

/// Memories per `entities.extract` request.
pub const EXTRACT_BATCH: usize = 8;

/// A memory as a prompt shows it: with its timestamps, so the model can reason about time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryView {
    pub id: String,
    pub kind: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub happens_at: Option<String>,
    pub text: String,
    /// The dates the text names, resolved against when it was written (`logic::temporal`),
    /// as "expression: date or interval" (recall.answer only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dates: Vec<String>,
    /// The cluster it came from, when one consolidate.propose request holds several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<usize>,
}

impl MemoryView {
    /// A memory as a prompt shows it from its id, kind, creation time (microseconds) and text.
    pub fn of(id: &str, kind: &str, created_at: i64, text: &str) -> MemoryView {
        MemoryView {
            id: id.to_string(),
            kind: kind.to_string(),
            created_at: crate::model::encoding::format_timestamp(created_at),
            happens_at: None,
            text: text.to_string(),
            dates: Vec::new(),
            cluster: None,
        }
    }

    /// From a `memories` row read as JSON (`store::json_rows`: timestamps as RFC 3339 text).
    /// The view of a memory read as a typed row.
    pub fn from_shown(row: crate::model::typed::ShownMemory) -> MemoryView {
        use crate::model::encoding::format_timestamp;
        MemoryView {
            id: row.id,
            kind: row.kind,
            created_at: format_timestamp(row.created_at),
            happens_at: row.happens_at.map(format_timestamp),
            text: row.text,
            dates: Vec::new(),
            cluster: None,
        }
    }

    /// The view of a whole memory row.
    pub fn from_memory(row: &crate::model::typed::MemoryRow) -> MemoryView {
        use crate::model::encoding::format_timestamp;
        MemoryView {
            id: row.id.clone(),
            kind: row.kind.clone(),
            created_at: format_timestamp(row.created_at),
            happens_at: row.happens_at.map(format_timestamp),
            text: row.text.clone(),
            dates: Vec::new(),
            cluster: None,
        }
    }
}

/// Everything one call needs; serialisable so batch submissions can be replayed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskInput {
    pub task: Task,
    pub memories: Vec<MemoryView>,
    /// The consolidated text under review (consolidate.verify only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<String>,
    /// The run's clock, RFC 3339.
    pub now: String,
    /// The user's question (recall.answer only), on one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

impl TaskInput {
    pub fn check_arity(&self) -> Result<(), String> {
        let (least, most) = self.task.arity();
        let n = self.memories.len();
        if n < least || n > most {
            return Err(format!(
                "{} takes {least}..{most} memories, got {n}",
                self.task.name()
            ));
        }
        if self.task == Task::ConsolidateVerify && self.proposal.is_none() {
            return Err("consolidate.verify needs a proposal".into());
        }
        if self.task == Task::RecallAnswer
            && self.question.as_deref().is_none_or(|q| q.trim().is_empty())
        {
            return Err("recall.answer needs a question".into());
        }
        Ok(())
    }

    /// The prompt: the task's template with the memories (as JSON), the time and the schema.
    pub fn render(&self) -> String {
        let memories =
            serde_json::to_string_pretty(&self.memories).expect("memory views serialise");
        self.task
            .template()
            .replace("{{now}}", &self.now)
            .replace("{{proposal}}", self.proposal.as_deref().unwrap_or(""))
            .replace(
                "{{question}}",
                &self
                    .question
                    .as_deref()
                    .unwrap_or("")
                    .replace(['\n', '\r'], " "),
            )
            .replace("{{schema}}", self.task.schema().trim())
            .replace("{{memories}}", &memories)
    }

    /// Recovers the input from a rendered prompt (the mock server answers with it).
    pub fn from_prompt(prompt: &str) -> Option<TaskInput> {
        let header = prompt.lines().find_map(|l| l.strip_prefix("TASK: "))?;
        let task = Task::from_name(header.split_whitespace().next()?)?;
        let now = prompt
            .lines()
            .find_map(|l| l.strip_prefix("Current time: "))?
            .trim()
            .to_string();
        let proposal = prompt
            .lines()
            .find_map(|l| l.strip_prefix("PROPOSED TEXT: "))
            .map(str::to_string);
        let question = prompt
            .lines()
            .find_map(|l| l.strip_prefix("QUESTION: "))
            .map(str::to_string);
        let after = prompt.split_once("MEMORIES (JSON")?.1;
        let start = after.find('[')?;
        let mut stream =
            serde_json::Deserializer::from_str(&after[start..]).into_iter::<Vec<MemoryView>>();
        let memories = stream.next()?.ok()?;
        Some(TaskInput {
            task,
            memories,
            proposal,
            now,
            question,
        })
    }

    fn ids(&self) -> BTreeSet<&str> {
        self.memories.iter().map(|m| m.id.as_str()).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Classification {
    Duplicate,
    Supersede,
    Merge,
    Coexist,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkType {
    Conflicts,
    Supersedes,
    Causes,
    InstanceOf,
    InvalidatedBy,
    MotivatedBy,
    Null,
}

impl LinkType {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkType::Conflicts => "conflicts",
            LinkType::Supersedes => "supersedes",
            LinkType::Causes => "causes",
            LinkType::InstanceOf => "instance_of",
            LinkType::InvalidatedBy => "invalidated_by",
            LinkType::MotivatedBy => "motivated_by",
            LinkType::Null => "null",
        }
    }
}

pub use crate::logic::refine::RefineAction;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifyReply {
    pub classification: Classification,
    pub confidence: f64,
    pub reasoning: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkReply {
    pub link_type: LinkType,
    pub confidence: f64,
    pub reasoning: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeReply {
    pub text: String,
    pub confidence: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefineReply {
    pub action: RefineAction,
    pub parts: Vec<String>,
    pub confidence: f64,
    pub reasoning: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedGroup {
    pub memory_ids: Vec<String>,
    pub text: String,
    pub confidence: f64,
    pub reasoning: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposeReply {
    pub groups: Vec<ProposedGroup>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyReply {
    pub approve: bool,
    pub confidence: f64,
    pub reasoning: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryReply {
    pub summary: String,
    pub confidence: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescribeReply {
    pub description: String,
    pub confidence: f64,
}

/// One semantic fact distilled from episodes (`semantic.distill`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistilledFactReply {
    pub text: String,
    pub source_ids: Vec<String>,
}

/// Episodes distilled into facts (`semantic.distill`): none says nothing generalises.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistillReply {
    pub facts: Vec<DistilledFactReply>,
    pub confidence: f64,
}

/// The pattern recurring across narratives (`insight.extract`): an empty `pattern` (with no
/// evidence) says none recurs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternReply {
    pub pattern: String,
    pub category: String,
    pub confidence: f64,
    pub evidence_ids: Vec<String>,
}

/// A session told as a narrative (`session.narrate`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NarrateReply {
    pub summary: String,
    pub key_interactions: Vec<String>,
    pub emotional_arc: String,
    pub unresolved_threads: Vec<String>,
    pub confidence: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractedEntity {
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractedMemory {
    pub id: String,
    pub entities: Vec<ExtractedEntity>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractReply {
    pub memories: Vec<ExtractedMemory>,
}

/// A validated reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", content = "reply")]
pub enum Reply {
    #[serde(rename = "integrate.classify")]
    Classify(ClassifyReply),
    #[serde(rename = "link.classify")]
    Link(LinkReply),
    #[serde(rename = "integrate.merge")]
    Merge(MergeReply),
    #[serde(rename = "refine")]
    Refine(RefineReply),
    #[serde(rename = "consolidate.propose")]
    Propose(ProposeReply),
    #[serde(rename = "consolidate.verify")]
    Verify(VerifyReply),
    #[serde(rename = "summarize")]
    Summary(SummaryReply),
    #[serde(rename = "entity.describe")]
    Describe(DescribeReply),
    #[serde(rename = "entities.extract")]
    Extract(ExtractReply),
    #[serde(rename = "recall.answer")]
    Answer(AnswerReply),
    #[serde(rename = "session.narrate")]
    Narrate(NarrateReply),
    #[serde(rename = "insight.extract")]
    Pattern(PatternReply),
    #[serde(rename = "semantic.distill")]
    Distill(DistillReply),
}

impl Reply {
    /// The reply as the JSON object a model would send.
    pub fn to_model_json(&self) -> String {
        let value = match self {
            Reply::Classify(r) => serde_json::to_string(r),
            Reply::Link(r) => serde_json::to_string(r),
            Reply::Merge(r) => serde_json::to_string(r),
            Reply::Refine(r) => serde_json::to_string(r),
            Reply::Propose(r) => serde_json::to_string(r),
            Reply::Verify(r) => serde_json::to_string(r),
            Reply::Summary(r) => serde_json::to_string(r),
            Reply::Narrate(r) => serde_json::to_string(r),
            Reply::Pattern(r) => serde_json::to_string(r),
            Reply::Distill(r) => serde_json::to_string(r),
            Reply::Describe(r) => serde_json::to_string(r),
            Reply::Extract(r) => serde_json::to_string(r),
            Reply::Answer(r) => serde_json::to_string(r),
        };
        value.expect("replies serialise")
    }
}

/// The JSON object inside a model's text: the whole text, or the body of a ```json fence, or
/// the first balanced `{...}` after leading prose. Strings are respected when balancing.
pub fn extract_json_object(text: &str) -> Option<&str> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') && trimmed.ends_with('}') {
        return Some(trimmed);
    }
    if let Some(start) = trimmed.find("```") {
        let body = &trimmed[start + 3..];
        let body = body.strip_prefix("json").unwrap_or(body);
        if let Some(end) = body.find("```") {
            let inner = body[..end].trim();
            if inner.starts_with('{') && inner.ends_with('}') {
                return Some(inner);
            }
        }
    }
    let start = trimmed.find('{')?;
    let bytes = trimmed.as_bytes();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&trimmed[start..=i]);
                }
            }
            _ => {}
        }
    }
    None
}

fn unit(name: &str, value: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(format!("{name} {value} is outside [0, 1]"))
    }
}

fn parse_as<T: for<'de> Deserialize<'de>>(json: &str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| format!("reply does not match the schema: {e}"))
}

/// Parses and validates a model's text for `input`. The error says what was wrong; it never
/// quotes the prompt.
/// A refine reply's action agrees with its parts: keep has none, trim one, split two or
/// more, and no part is empty.
fn check_refine(r: &RefineReply) -> Result<(), String> {
    unit("confidence", r.confidence)?;
    match r.action {
        RefineAction::Keep if !r.parts.is_empty() => {
            return Err("keep must come with no parts".into());
        }
        RefineAction::Trim if r.parts.len() != 1 => {
            return Err(format!(
                "trim needs exactly one part, got {}",
                r.parts.len()
            ));
        }
        RefineAction::Split if r.parts.len() < 2 => {
            return Err(format!(
                "split needs two or more parts, got {}",
                r.parts.len()
            ));
        }
        _ => {}
    }
    if r.parts.iter().any(|p| p.trim().is_empty()) {
        return Err("a part is empty".into());
    }
    Ok(())
}

/// A proposal's groups: two or more memory ids each, every id from the request and in one
/// group only, a text each.
fn check_propose(r: &ProposeReply, ids: &BTreeSet<&str>) -> Result<(), String> {
    let mut used = BTreeSet::new();
    for group in &r.groups {
        unit("confidence", group.confidence)?;
        if group.memory_ids.len() < 2 {
            return Err("a group needs two or more memory ids".into());
        }
        for id in &group.memory_ids {
            if !ids.contains(id.as_str()) {
                return Err(format!("memory id {id:?} was not in the request"));
            }
            if !used.insert(id.clone()) {
                return Err(format!("memory id {id:?} is in two groups"));
            }
        }
        if group.text.trim().is_empty() {
            return Err("a group's text is empty".into());
        }
    }
    Ok(())
}

/// An extraction answers every memory of the request once, with names written in the memory
/// and types of the schema.
fn check_extract(r: &ExtractReply, input: &TaskInput) -> Result<(), String> {
    let texts: std::collections::BTreeMap<&str, String> = input
        .memories
        .iter()
        .map(|m| (m.id.as_str(), m.text.to_lowercase()))
        .collect();
    let mut seen = BTreeSet::new();
    for m in &r.memories {
        let Some(text) = texts.get(m.id.as_str()) else {
            return Err(format!("memory id {:?} was not in the request", m.id));
        };
        if !seen.insert(m.id.as_str()) {
            return Err(format!("memory id {:?} is listed twice", m.id));
        }
        for e in &m.entities {
            let name = e.name.trim();
            if name.is_empty() {
                return Err(format!("an entity of {:?} has an empty name", m.id));
            }
            if !crate::model::schema::ENTITY_TYPES.contains(&e.entity_type.as_str()) {
                return Err(format!(
                    "entity type {:?} is not one of the schema's",
                    e.entity_type
                ));
            }
            // A name the memory does not contain is invented: the reply is not trusted.
            if !text.contains(&name.to_lowercase()) {
                return Err(format!("{name:?} is not written in memory {:?}", m.id));
            }
        }
    }
    if seen.len() != texts.len() {
        return Err(format!(
            "{} of {} memories answered",
            seen.len(),
            texts.len()
        ));
    }
    Ok(())
}

/// An answer cites only memories it was shown, and each temporal resolution names an
/// expression written in its memory.
fn check_answer(r: &AnswerReply, input: &TaskInput, ids: &BTreeSet<&str>) -> Result<(), String> {
    unit("confidence", r.confidence)?;
    if r.answer.trim().is_empty() {
        return Err("answer is empty".into());
    }
    for id in &r.source_memory_ids {
        if !ids.contains(id.as_str()) {
            return Err(format!("source memory id {id:?} was not in the request"));
        }
    }
    let texts: std::collections::BTreeMap<&str, String> = input
        .memories
        .iter()
        .map(|m| (m.id.as_str(), m.text.to_lowercase()))
        .collect();
    for t in &r.temporal_resolutions {
        let Some(text) = texts.get(t.memory_id.as_str()) else {
            return Err(format!(
                "temporal resolution of memory {:?}, which was not in the request",
                t.memory_id
            ));
        };
        // An expression the memory does not contain was invented.
        let expression = t.expression.trim().to_lowercase();
        if expression.is_empty() || !text.contains(&expression) {
            return Err(format!(
                "{:?} is not written in memory {:?}",
                t.expression, t.memory_id
            ));
        }
        if t.resolved.trim().is_empty() {
            return Err(format!("{:?} resolved to nothing", t.expression));
        }
    }
    Ok(())
}

pub fn parse_reply(input: &TaskInput, text: &str) -> Result<Reply, String> {
    let json = extract_json_object(text).ok_or_else(|| {
        format!(
            "no JSON object in the reply ({} chars)",
            text.chars().count()
        )
    })?;
    let ids = input.ids();
    let reply = match input.task {
        Task::IntegrateClassify => {
            let r: ClassifyReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            Reply::Classify(r)
        }
        Task::LinkClassify => {
            let r: LinkReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            Reply::Link(r)
        }
        Task::IntegrateMerge => {
            let r: MergeReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            if r.text.trim().is_empty() {
                return Err("merged text is empty".into());
            }
            Reply::Merge(r)
        }
        Task::Refine => {
            let r: RefineReply = parse_as(json)?;
            check_refine(&r)?;
            Reply::Refine(r)
        }
        Task::ConsolidatePropose => {
            let r: ProposeReply = parse_as(json)?;
            check_propose(&r, &ids)?;
            Reply::Propose(r)
        }
        Task::ConsolidateVerify => {
            let r: VerifyReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            Reply::Verify(r)
        }
        Task::Summarize => {
            let r: SummaryReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            if r.summary.trim().is_empty() {
                return Err("summary is empty".into());
            }
            Reply::Summary(r)
        }
        Task::SessionNarrate => {
            let r: NarrateReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            check_narrate(&r)?;
            Reply::Narrate(r)
        }
        Task::InsightExtract => {
            let r: PatternReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            check_pattern(&r, &ids)?;
            Reply::Pattern(r)
        }
        Task::SemanticDistill => {
            let r: DistillReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            check_distill(&r, &ids)?;
            Reply::Distill(r)
        }
        Task::EntityDescribe => {
            let r: DescribeReply = parse_as(json)?;
            unit("confidence", r.confidence)?;
            let length = r.description.trim().chars().count();
            if length == 0 {
                return Err("description is empty".into());
            }
            if length > 400 {
                return Err(format!("description is {length} characters (at most 400)"));
            }
            Reply::Describe(r)
        }
        Task::EntitiesExtract => {
            let r: ExtractReply = parse_as(json)?;
            check_extract(&r, input)?;
            Reply::Extract(r)
        }
        Task::RecallAnswer => {
            let r: AnswerReply = parse_as(json)?;
            check_answer(&r, input, &ids)?;
            Reply::Answer(r)
        }
    };
    Ok(reply)
}

/// Distilled facts within the schema's bounds: at most five, each non-empty and at most 600
/// characters, resting on episodes of the request only.
fn check_distill(r: &DistillReply, ids: &BTreeSet<&str>) -> Result<(), String> {
    if r.facts.len() > 5 {
        return Err(format!("{} facts (at most 5)", r.facts.len()));
    }
    for (i, f) in r.facts.iter().enumerate() {
        let length = f.text.trim().chars().count();
        if length == 0 || length > 600 {
            return Err(format!("fact {i} is {length} characters (1 to 600)"));
        }
        if f.source_ids.is_empty() {
            return Err(format!("fact {i} names no episode"));
        }
        if let Some(id) = f.source_ids.iter().find(|id| !ids.contains(id.as_str())) {
            return Err(format!(
                "fact {i}: episode id {id:?} was not in the request"
            ));
        }
    }
    Ok(())
}

/// A pattern within the schema's bounds: at most 400 characters, a known category, evidence
/// from the request only; no pattern, no evidence.
fn check_pattern(r: &PatternReply, ids: &BTreeSet<&str>) -> Result<(), String> {
    let length = r.pattern.trim().chars().count();
    if length > 400 {
        return Err(format!("pattern is {length} characters (at most 400)"));
    }
    if !crate::logic::insights::CATEGORIES.contains(&r.category.as_str()) {
        return Err(format!(
            "category {:?} is not one of the schema's",
            r.category
        ));
    }
    if length == 0 && !r.evidence_ids.is_empty() {
        return Err("evidence for an empty pattern".into());
    }
    if let Some(id) = r.evidence_ids.iter().find(|id| !ids.contains(id.as_str())) {
        return Err(format!("evidence id {id:?} was not in the request"));
    }
    Ok(())
}

/// A narrative within the schema's bounds: a summary, at most 2000 characters; at most 12
/// interactions and threads of at most 300 characters each; an arc of at most 300.
fn check_narrate(r: &NarrateReply) -> Result<(), String> {
    let length = r.summary.trim().chars().count();
    if length == 0 {
        return Err("summary is empty".into());
    }
    if length > 2000 {
        return Err(format!("summary is {length} characters (at most 2000)"));
    }
    for (name, list) in [
        ("key_interactions", &r.key_interactions),
        ("unresolved_threads", &r.unresolved_threads),
    ] {
        if list.len() > 12 {
            return Err(format!("{name} has {} items (at most 12)", list.len()));
        }
        if let Some(long) = list.iter().find(|s| s.chars().count() > 300) {
            return Err(format!(
                "an item of {name} is {} characters (at most 300)",
                long.chars().count()
            ));
        }
    }
    if r.emotional_arc.chars().count() > 300 {
        return Err("emotional_arc is over 300 characters".into());
    }
    Ok(())
}

/// What a caller does when no trustworthy reply exists: keep both memories, make no link,
/// merge nothing, keep the memory whole, consolidate nothing, reject the proposal.
pub fn safe_default(task: Task) -> Option<Reply> {
    let reasoning = "safe default: no valid reply".to_string();
    match task {
        Task::IntegrateClassify => Some(Reply::Classify(ClassifyReply {
            classification: Classification::Coexist,
            confidence: 0.0,
            reasoning,
        })),
        Task::LinkClassify => Some(Reply::Link(LinkReply {
            link_type: LinkType::Null,
            confidence: 0.0,
            reasoning,
        })),
        Task::Refine => Some(Reply::Refine(RefineReply {
            action: RefineAction::Keep,
            parts: Vec::new(),
            confidence: 0.0,
            reasoning,
        })),
        Task::ConsolidatePropose => Some(Reply::Propose(ProposeReply { groups: Vec::new() })),
        Task::ConsolidateVerify => Some(Reply::Verify(VerifyReply {
            approve: false,
            confidence: 0.0,
            reasoning,
        })),
        // No merged text, summary or description: the caller writes nothing.
        // No entities read by the model: the caller reads them with its rules.
        // No answer: recall answers from the resolved dates (the offline rules) and says so.
        Task::IntegrateMerge
        | Task::Summarize
        | Task::EntityDescribe
        | Task::EntitiesExtract
        | Task::RecallAnswer
        | Task::SessionNarrate
        | Task::InsightExtract
        | Task::SemanticDistill => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `memlife eval judge` reports per label (`logic::eval`, which cannot name this module):
    /// every answer a reply may give must have its label, and every label be an answer.
    /// A new variant fails to compile here until it is counted and given a label.
    #[test]
    fn the_eval_labels_are_exactly_the_answers_a_reply_may_give() {
        fn link_position(t: LinkType) -> usize {
            match t {
                LinkType::Conflicts => 0,
                LinkType::Supersedes => 1,
                LinkType::Causes => 2,
                LinkType::InstanceOf => 3,
                LinkType::InvalidatedBy => 4,
                LinkType::MotivatedBy => 5,
                LinkType::Null => 6,
            }
        }
        fn classification_position(c: Classification) -> usize {
            match c {
                Classification::Duplicate => 0,
                Classification::Supersede => 1,
                Classification::Merge => 2,
                Classification::Coexist => 3,
            }
        }
        fn refine_position(a: RefineAction) -> usize {
            match a {
                RefineAction::Split => 0,
                RefineAction::Trim => 1,
                RefineAction::Keep => 2,
            }
        }
        fn parse<T: for<'de> Deserialize<'de>>(label: &str) -> T {
            serde_json::from_value(serde_json::Value::String(label.to_string()))
                .unwrap_or_else(|e| panic!("label {label:?} is no answer: {e}"))
        }
        use crate::logic::eval::{INTEGRATE_LABELS, LINK_LABELS, REFINE_LABELS};
        assert_eq!(LINK_LABELS.len(), 7);
        for (i, label) in LINK_LABELS.iter().enumerate() {
            let t: LinkType = parse(label);
            assert_eq!((link_position(t), t.as_str()), (i, *label));
        }
        assert_eq!(INTEGRATE_LABELS.len(), 4);
        for (i, label) in INTEGRATE_LABELS.iter().enumerate() {
            assert_eq!(classification_position(parse(label)), i, "{label}");
        }
        assert_eq!(REFINE_LABELS.len(), 3);
        for (i, label) in REFINE_LABELS.iter().enumerate() {
            assert_eq!(refine_position(parse(&label.to_lowercase())), i, "{label}");
        }
    }

    fn input(task: Task, n: usize) -> TaskInput {
        TaskInput {
            task,
            memories: (0..n)
                .map(|i| MemoryView {
                    id: format!("m{i}"),
                    kind: "fact".into(),
                    created_at: format!("2025-0{}-01T00:00:00Z", i + 1),
                    happens_at: None,
                    text: format!("User fact number {i} with \"quotes\" and {{braces}}"),
                    dates: Vec::new(),
                    cluster: None,
                })
                .collect(),
            proposal: (task == Task::ConsolidateVerify).then(|| "merged".to_string()),
            question: (task == Task::RecallAnswer).then(|| "When did it happen?".to_string()),
            now: "2025-12-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn every_prompt_renders_and_round_trips() {
        for &task in ALL_TASKS {
            let input = input(task, task.arity().0.max(2).min(task.arity().1));
            input.check_arity().unwrap();
            let prompt = input.render();
            assert!(!prompt.contains("{{"), "{} left a placeholder", task.name());
            assert!(
                prompt.contains("2025-01-01T00:00:00Z"),
                "timestamps are in the prompt"
            );
            assert_eq!(TaskInput::from_prompt(&prompt).as_ref(), Some(&input));
            serde_json::from_str::<serde_json::Value>(task.schema()).unwrap();
        }
    }

    #[test]
    fn a_recall_prompt_carries_the_question_and_the_resolved_dates() {
        let mut input = input(Task::RecallAnswer, 1);
        input.question = Some("When did\nit happen?".into());
        input.memories[0].dates = vec!["yesterday: 2025-05-09".into()];
        let prompt = input.render();
        assert!(prompt.contains("QUESTION: When did it happen?"), "{prompt}");
        assert!(prompt.contains("yesterday: 2025-05-09"), "{prompt}");
        input.question = Some("When did it happen?".into());
        assert_eq!(TaskInput::from_prompt(&input.render()), Some(input.clone()));
        input.question = None;
        assert!(input.check_arity().is_err(), "no question, no call");
    }

    #[test]
    fn an_answer_may_cite_only_what_it_was_shown() {
        let mut input = input(Task::RecallAnswer, 2);
        input.memories[0].text = "User moved to Lyon last week".into();
        let reply = |sources: &str, expression: &str, memory: &str| {
            format!(
                r#"{{"answer":"late April","confidence":0.8,"reasoning":"r","temporal_resolutions":[{{"memory_id":"{memory}","expression":"{expression}","resolved":"2025-04-21/2025-04-27"}}],"source_memory_ids":[{sources}],"requires_inference":true}}"#
            )
        };
        assert!(parse_reply(&input, &reply(r#""m0""#, "last week", "m0")).is_ok());
        assert!(parse_reply(&input, &reply(r#""m0""#, "Last Week", "m0")).is_ok());
        let wrong = [
            (reply(r#""m7""#, "last week", "m0"), "not in the request"),
            (
                reply(r#""m0""#, "last month", "m0"),
                "is not written in memory",
            ),
            (
                reply(r#""m0""#, "last week", "m1"),
                "is not written in memory",
            ),
            (reply(r#""m0""#, "last week", "m9"), "not in the request"),
        ];
        for (text, why) in wrong {
            let err = parse_reply(&input, &text).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        assert_eq!(safe_default(Task::RecallAnswer), None);
    }

    #[test]
    fn json_is_found_in_fences_and_after_prose() {
        let cases = [
            (r#"{"a":1}"#, Some(r#"{"a":1}"#)),
            ("```json\n{\"a\":1}\n```", Some(r#"{"a":1}"#)),
            (
                "Sure! Here it is: {\"a\":\"}{\"} and more",
                Some(r#"{"a":"}{"}"#),
            ),
            ("no json here", None),
            ("{\"a\":", None),
        ];
        for (text, expected) in cases {
            assert_eq!(extract_json_object(text), expected, "{text}");
        }
    }

    #[test]
    fn replies_are_validated_strictly() {
        let classify = input(Task::IntegrateClassify, 2);
        let propose = input(Task::ConsolidatePropose, 3);
        let refine = input(Task::Refine, 1);
        let cases: &[(&TaskInput, &str, Result<(), &str>)] = &[
            (
                &classify,
                r#"{"classification":"SUPERSEDE","confidence":0.9,"reasoning":"moved"}"#,
                Ok(()),
            ),
            (
                &classify,
                r#"{"classification":"REPLACE","confidence":0.9,"reasoning":""}"#,
                Err("unknown variant"),
            ),
            (
                &classify,
                r#"{"classification":"MERGE","confidence":1.5,"reasoning":""}"#,
                Err("outside [0, 1]"),
            ),
            (
                &classify,
                r#"{"classification":"MERGE","confidence":0.5}"#,
                Err("missing field"),
            ),
            (
                &classify,
                r#"{"classification":"MERGE","confidence":0.5,"reasoning":"","extra":1}"#,
                Err("unknown field"),
            ),
            (
                &propose,
                r#"{"groups":[{"memory_ids":["m0","m9"],"text":"t","confidence":0.8,"reasoning":""}]}"#,
                Err("\"m9\" was not in the request"),
            ),
            (
                &propose,
                r#"{"groups":[{"memory_ids":["m0","m1"],"text":"t","confidence":0.8,"reasoning":""}]}"#,
                Ok(()),
            ),
            (&propose, r#"{"groups":[]}"#, Ok(())),
            (
                &refine,
                r#"{"action":"split","parts":["one"],"confidence":0.8,"reasoning":""}"#,
                Err("two or more parts"),
            ),
            (
                &refine,
                r#"{"action":"keep","parts":[],"confidence":0.8,"reasoning":""}"#,
                Ok(()),
            ),
            (&refine, "I cannot help with that.", Err("no JSON object")),
        ];
        for (input, text, expected) in cases {
            let got = parse_reply(input, text);
            match (expected, &got) {
                (Ok(()), Ok(_)) => {}
                (Err(want), Err(e)) => assert!(e.contains(want), "{text}: {e}"),
                _ => panic!("{text}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn safe_defaults_keep_everything() {
        assert!(matches!(
            safe_default(Task::IntegrateClassify),
            Some(Reply::Classify(ClassifyReply {
                classification: Classification::Coexist,
                ..
            }))
        ));
        assert!(matches!(
            safe_default(Task::ConsolidateVerify),
            Some(Reply::Verify(VerifyReply { approve: false, .. }))
        ));
        assert_eq!(safe_default(Task::IntegrateMerge), None);
    }

    #[test]
    fn an_extraction_that_invents_names_or_drops_memories_is_refused() {
        let mut request = input(Task::EntitiesExtract, 2);
        request.memories[0].text = "Ana took Pickle to the vet in Leeds".into();
        request.memories[1].text = "Tobias called".into();
        let reply = |body: &str| parse_reply(&request, body);
        let good = r#"{"memories":[{"id":"m0","entities":[{"name":"Pickle","type":"pet"},
            {"name":"leeds","type":"place"}]},{"id":"m1","entities":[{"name":"Tobias","type":"person"}]}]}"#;
        assert!(matches!(reply(good), Ok(Reply::Extract(r)) if r.memories.len() == 2));
        for (bad, why) in [
            (
                r#"{"memories":[{"id":"m0","entities":[{"name":"Paris","type":"place"}]},{"id":"m1","entities":[]}]}"#,
                "not written",
            ),
            (
                r#"{"memories":[{"id":"m0","entities":[]}]}"#,
                "1 of 2 memories",
            ),
            (
                r#"{"memories":[{"id":"m9","entities":[]},{"id":"m1","entities":[]}]}"#,
                "not in the request",
            ),
            (
                r#"{"memories":[{"id":"m0","entities":[{"name":"Ana","type":"friend"}]},{"id":"m1","entities":[]}]}"#,
                "not one of",
            ),
        ] {
            let error = reply(bad).unwrap_err();
            assert!(error.contains(why), "{why}: {error}");
        }
        assert_eq!(safe_default(Task::EntitiesExtract), None);
    }
}
