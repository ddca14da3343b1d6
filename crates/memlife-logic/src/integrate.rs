//! New-fact integration (seed 003): which operation a new fact becomes, from the judge's
//! answers about its candidates, and how a MERGE combines the two memories' metadata.
//!
//! Pure: answers and values in, a decision out.
//!
//! The judge (`integrate.classify`) is asked about the fact against each candidate (the
//! user's current memories at least as similar as the threshold, most similar first, at most
//! `top_k`), all at once. The decision:
//! 1. answers at or above `min_confidence` that change something (DUPLICATE, SUPERSEDE,
//!    MERGE; SUPERSEDE and MERGE only when enabled) decide, in that order of precedence, the
//!    most similar candidate first among equals: a fact that restates one memory is not also
//!    a change of another;
//! 2. otherwise, a change-making answer below `min_confidence` sends the fact to the review
//!    queue with that answer (the most precedent one);
//! 3. otherwise the fact is added (COEXIST) with a `related_to` link to the most similar
//!    candidate the judge called COEXIST, or to none when every answer failed: a failed or
//!    unparsable answer never changes a memory (the safe choice), and says why.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::rows::{AuditRow, LinkRow, MemoryRow, ReviewItem, derived_id, format_timestamp};

/// `[integrate]` in memlife.toml.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IntegrateParams {
    /// Candidates asked about per fact (seed 003: K = 5).
    pub top_k: usize,
    /// Answers below this confidence go to the review queue instead of being applied.
    pub min_confidence: f64,
    pub enable_merge: bool,
    pub enable_supersede: bool,
    /// Off by default: when on, a superseded memory is also archived (never erased).
    pub enable_delete: bool,
    /// Days a review item waits before it expires (then the fact is kept beside the memory,
    /// as COEXIST: the safe choice).
    pub review_ttl_days: i64,
}

impl Default for IntegrateParams {
    fn default() -> Self {
        IntegrateParams {
            top_k: 5,
            min_confidence: 0.8,
            enable_merge: true,
            enable_supersede: true,
            enable_delete: false,
            review_ttl_days: 14,
        }
    }
}

/// The judge's classes (seed 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Class {
    Duplicate,
    Supersede,
    Merge,
    Coexist,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Duplicate => "DUPLICATE",
            Class::Supersede => "SUPERSEDE",
            Class::Merge => "MERGE",
            Class::Coexist => "COEXIST",
        }
    }

    pub fn parse(text: &str) -> Option<Class> {
        match text {
            "DUPLICATE" => Some(Class::Duplicate),
            "SUPERSEDE" => Some(Class::Supersede),
            "MERGE" => Some(Class::Merge),
            "COEXIST" => Some(Class::Coexist),
            _ => None,
        }
    }

    /// Whether applying it changes an existing memory.
    pub fn changes_memory(self) -> bool {
        self != Class::Coexist
    }
}

/// The judge's answer about the fact and one candidate (`None` class: the call failed).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// Index of the candidate, most similar first.
    pub candidate: usize,
    pub class: Option<Class>,
    pub confidence: f64,
    pub reasoning: String,
}

/// What becomes of a fact.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No candidate: a new memory.
    Add,
    /// Applied against `candidate` (its index).
    Apply {
        class: Class,
        candidate: usize,
        confidence: f64,
        reasoning: String,
    },
    /// Unsure: queued for a person with the judge's answer about `candidate`.
    Review {
        class: Class,
        candidate: usize,
        confidence: f64,
        reasoning: String,
    },
    /// Added beside the candidates; `related` is the candidate it is linked to.
    Coexist {
        related: Option<usize>,
        confidence: f64,
        reasoning: String,
    },
}

impl Decision {
    /// The audit operation the decision is logged as.
    pub fn operation(&self) -> &'static str {
        match self {
            Decision::Add | Decision::Coexist { .. } => "ADD",
            Decision::Review { .. } => "REVIEW",
            Decision::Apply { class, .. } => match class {
                Class::Duplicate => "NOOP",
                Class::Supersede => "SUPERSEDE",
                Class::Merge => "MERGE",
                Class::Coexist => "ADD",
            },
        }
    }

    /// The classification as the audit log and reports name it.
    pub fn classification(&self) -> &'static str {
        match self {
            Decision::Add => "NEW",
            Decision::Coexist { .. } => "COEXIST",
            Decision::Apply { class, .. } | Decision::Review { class, .. } => class.as_str(),
        }
    }

    /// The judge's confidence and reasoning behind the decision (none for an ADD: no judge
    /// was asked).
    pub fn judgement(&self) -> Option<(f64, &str)> {
        match self {
            Decision::Add => None,
            Decision::Apply {
                confidence,
                reasoning,
                ..
            }
            | Decision::Review {
                confidence,
                reasoning,
                ..
            }
            | Decision::Coexist {
                confidence,
                reasoning,
                ..
            } => Some((*confidence, reasoning)),
        }
    }

    /// The candidate the decision names (by position): the one applied to, the one under
    /// review, or the one a kept fact is related to.
    pub fn candidate(&self) -> Option<usize> {
        match self {
            Decision::Apply { candidate, .. }
            | Decision::Review { candidate, .. }
            | Decision::Coexist {
                related: Some(candidate),
                ..
            } => Some(*candidate),
            _ => None,
        }
    }
}

fn precedence(class: Class) -> u8 {
    match class {
        Class::Duplicate => 0,
        Class::Supersede => 1,
        Class::Merge => 2,
        Class::Coexist => 3,
    }
}

/// The decision for a fact with `candidates` candidates from the judge's `answers` (any
/// order; one per candidate at most).
pub fn decide(candidates: usize, answers: &[Answer], p: &IntegrateParams) -> Decision {
    if candidates == 0 {
        return Decision::Add;
    }
    let allowed = |c: Class| match c {
        Class::Supersede => p.enable_supersede,
        Class::Merge => p.enable_merge,
        _ => true,
    };
    let mut changing: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.class.is_some_and(|c| c.changes_memory() && allowed(c)))
        .filter(|a| a.candidate < candidates)
        .collect();
    changing.sort_by_key(|a| (precedence(a.class.unwrap_or(Class::Coexist)), a.candidate));
    if let Some(a) = changing
        .iter()
        .find(|a| a.confidence >= p.min_confidence)
        .or(changing.first())
    {
        let class = a.class.unwrap_or(Class::Coexist);
        let (candidate, confidence, reasoning) = (a.candidate, a.confidence, a.reasoning.clone());
        return if confidence >= p.min_confidence {
            Decision::Apply {
                class,
                candidate,
                confidence,
                reasoning,
            }
        } else {
            Decision::Review {
                class,
                candidate,
                confidence,
                reasoning,
            }
        };
    }
    let related = answers
        .iter()
        .filter(|a| a.class == Some(Class::Coexist) && a.candidate < candidates)
        .min_by_key(|a| a.candidate);
    match related {
        Some(a) => Decision::Coexist {
            related: Some(a.candidate),
            confidence: a.confidence,
            reasoning: a.reasoning.clone(),
        },
        None => {
            let why: Vec<&str> = answers
                .iter()
                .filter(|a| a.class.is_none())
                .map(|a| a.reasoning.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            Decision::Coexist {
                related: None,
                confidence: 0.0,
                reasoning: if why.is_empty() {
                    "no usable answer from the judge: kept as a new memory".into()
                } else {
                    format!(
                        "no usable answer from the judge ({}): kept as a new memory",
                        why.join("; ")
                    )
                },
            }
        }
    }
}

/// Tags of both memories, trimmed, lower-cased and deduplicated, in first-seen order.
pub fn union_tags(a: &[String], b: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    a.iter()
        .chain(b)
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty() && seen.insert(t.clone()))
        .collect()
}

/// Whether a memory is true at `t` (microseconds): valid_from <= t < valid_until.
pub fn valid_at(valid_from: Option<i64>, valid_until: Option<i64>, t: i64) -> bool {
    valid_from.is_none_or(|f| f <= t) && valid_until.is_none_or(|u| u > t)
}

/// The versions of a supersession chain in order, from `(id, superseded_by)` pairs: starts
/// at the version nobody points to and follows `superseded_by`. Errors name what breaks the
/// chain (a fork, a cycle, a missing successor, a version not reached).
pub fn chain_order(versions: &[(String, Option<String>)]) -> Result<Vec<String>, String> {
    use std::collections::BTreeMap;
    let ids: BTreeSet<&str> = versions.iter().map(|(id, _)| id.as_str()).collect();
    let mut next: BTreeMap<&str, &str> = BTreeMap::new();
    let mut has_predecessor: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, successor) in versions {
        let Some(s) = successor.as_deref() else {
            continue;
        };
        if !ids.contains(s) {
            return Err(format!(
                "{id} is superseded by {s}, which is not in the chain"
            ));
        }
        if let Some(other) = has_predecessor.insert(s, id) {
            return Err(format!("{s} supersedes both {other} and {id}"));
        }
        next.insert(id, s);
    }
    let heads: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !has_predecessor.contains_key(id))
        .collect();
    let [head] = heads.as_slice() else {
        return Err(if heads.is_empty() {
            "the chain is a cycle".to_string()
        } else {
            format!(
                "the chain has {} first versions: {}",
                heads.len(),
                heads.join(", ")
            )
        });
    };
    let mut order = vec![head.to_string()];
    let mut at = *head;
    while let Some(n) = next.get(at) {
        if order.len() > versions.len() {
            return Err("the chain is a cycle".into());
        }
        order.push(n.to_string());
        at = n;
    }
    if order.len() != ids.len() {
        return Err(format!(
            "{} of {} versions are not reached from {head}",
            ids.len() - order.len(),
            ids.len()
        ));
    }
    Ok(order)
}

/// One decision, ready to log and apply: its audit rows (the decision's own last) and what
/// applying it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct FactPlan {
    pub audit: Vec<AuditRow>,
    /// Memory rows to upsert (their vectors are the writer's: known, or embedded then).
    pub memories: Vec<MemoryRow>,
    pub links: Vec<LinkRow>,
    pub review: Option<ReviewItem>,
}

/// What a decision writes, as the audit row's `after_state`.
/// The fact is kept in every decision's row, so a DUPLICATE or NOOP (which store nothing of
/// it) can still be read, explained and recovered.
fn after_state(
    fact: &MemoryRow,
    memories: &[MemoryRow],
    links: &[LinkRow],
    review: Option<&ReviewItem>,
) -> String {
    let review = review.map(ReviewItem::to_json);
    let memories: Vec<Value> = memories.iter().map(MemoryRow::to_json).collect();
    let links: Vec<Value> = links.iter().map(LinkRow::to_json).collect();
    json!({"fact": fact.to_json(), "memories": memories, "links": links, "review": review})
        .to_string()
}

/// The review item of a fact the judge was unsure about: the fact, its candidate, the
/// judge's class and confidence, pending until `review_ttl_days` from `now`.
fn review_item(
    run_id: &str,
    fact: &MemoryRow,
    c: &MemoryRow,
    (class, confidence, reasoning): (Class, f64, &str),
    p: &IntegrateParams,
    now: i64,
) -> ReviewItem {
    ReviewItem {
        id: derived_id(&format!("review|{}", fact.id)),
        run_id: run_id.to_string(),
        user_id: fact.user_id.clone(),
        fact_id: fact.id.clone(),
        fact: fact.to_json().to_string(),
        candidate_id: c.id.clone(),
        candidate_text: c.text.clone(),
        classification: class.as_str().to_string(),
        confidence: confidence.clamp(0.0, 1.0),
        reasoning: Some(reasoning.to_string()),
        status: "pending".into(),
        created_at: now,
        expires_at: Some(now + p.review_ttl_days * 86_400_000_000),
        decided_at: None,
        decided_by_run: None,
    }
}

/// A SUPERSEDE: the candidate `c` closed (valid until the fact's start, superseded by it, in
/// its chain; archived too, with a DELETE audit row, when `enable_delete`), the fact joins the
/// chain, and a `supersedes` link from the fact. Returns the memories, links and the DELETE row.
fn superseding(
    run_id: &str,
    (fact, c, mut new_row): (&MemoryRow, &MemoryRow, MemoryRow),
    (confidence, reasoning, judged): (f64, &str, Option<f64>),
    before: Option<String>,
    p: &IntegrateParams,
    now: i64,
) -> (Vec<MemoryRow>, Vec<LinkRow>, Option<AuditRow>) {
    let now_text = format_timestamp(now);
    let mut old = c.clone();
    let mut delete = None;
    let until = fact.valid_from.max(c.valid_from);
    let chain = c
        .supersession_chain_id
        .clone()
        .unwrap_or_else(|| c.id.clone());
    old.valid_until = Some(until);
    old.superseded_by = Some(fact.id.clone());
    old.supersession_chain_id = Some(chain.clone());
    old.updated_at = now;
    if p.enable_delete {
        old.archived_at = Some(now);
        old.state = "archived".into();
        old.tier = "archived".into();
        let mut d = AuditRow::new(run_id, "DELETE", "", now);
        d.id = derived_id(&format!("integrate-delete|{}", fact.id));
        d.user_id = Some(fact.user_id.clone());
        d.source_ids = vec![fact.id.clone()];
        d.target_id = Some(c.id.clone());
        d.classification = Some("SUPERSEDE".into());
        d.confidence = judged;
        d.reasoning = Some("superseded, archived (enable_delete): never erased".into());
        d.before_state = before;
        d.after_state = Some(json!({"archived_at": now_text}).to_string());
        delete = Some(d);
    }
    new_row.supersession_chain_id = Some(chain);
    let ends = (fact.id.as_str(), c.id.as_str(), fact.user_id.as_str());
    let links = vec![LinkRow::judged(
        ends,
        "supersedes",
        confidence,
        reasoning,
        now,
    )];
    (vec![old, new_row], links, delete)
}

/// A MERGE: the candidate `c` takes the merged text (the higher importance, the earlier
/// creation, both sets of tags, the fact among its sources); the fact is kept, archived, so
/// its own words stay recoverable; a `merged_into` link from the fact.
fn merging(
    (fact, c, mut new_row): (&MemoryRow, &MemoryRow, MemoryRow),
    merged: Option<&str>,
    confidence: f64,
    now: i64,
) -> (Vec<MemoryRow>, Vec<LinkRow>) {
    let mut old = c.clone();
    old.text = merged.unwrap_or("").to_string();
    old.importance = c.importance.max(fact.importance);
    old.created_at = c.created_at.min(fact.created_at);
    old.updated_at = now;
    old.tags = union_tags(&c.tags, &fact.tags);
    old.consolidates_memory_ids.push(fact.id.clone());
    // The fact is kept, archived, so its own words stay recoverable.
    new_row.archived_at = Some(now);
    new_row.state = "archived".into();
    new_row.tier = "archived".into();
    let ends = (fact.id.as_str(), c.id.as_str(), fact.user_id.as_str());
    let why = "merged into the target (integrate: MERGE)";
    let links = vec![LinkRow::judged(ends, "merged_into", confidence, why, now)];
    (vec![old, new_row], links)
}

/// What the decision about `fact` writes and logs. `candidate` is the full current row of the
/// memory it was judged against (when it has one); `merged` the merge's text (MERGE only).
/// `decision_row_id` is the decision's audit row id (`jobs::integrate::decision_id`).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    run_id: &str,
    decision_row_id: &str,
    fact: &MemoryRow,
    decision: &Decision,
    candidate: Option<&MemoryRow>,
    merged: Option<&str>,
    p: &IntegrateParams,
    now: i64,
) -> FactPlan {
    let mut new_row = fact.clone();
    new_row.embedding_model = None;
    new_row.updated_at = now;
    if new_row.source.is_none() {
        new_row.source = Some("integrate".into());
    }
    let mut row = AuditRow::new(run_id, decision.operation(), "", now);
    row.id = decision_row_id.to_string();
    row.user_id = Some(fact.user_id.clone());
    row.source_ids = vec![fact.id.clone()];
    row.classification = Some(decision.classification().to_string());
    if let Some((confidence, reasoning)) = decision.judgement() {
        row.confidence = Some(confidence.clamp(0.0, 1.0));
        row.reasoning = Some(reasoning.to_string());
    }
    let before = candidate.map(|c| c.to_json().to_string());
    let mut audit = Vec::new();
    let (memories, links, review, target) = match decision {
        Decision::Add => (vec![new_row], vec![], None, fact.id.clone()),
        Decision::Coexist {
            related,
            confidence,
            ..
        } => {
            let links = match (related, candidate) {
                (Some(_), Some(c)) => vec![LinkRow::judged(
                    (&fact.id, &c.id, &fact.user_id),
                    "related_to",
                    *confidence,
                    "related but distinct (integrate: COEXIST)",
                    now,
                )],
                _ => vec![],
            };
            (vec![new_row], links, None, fact.id.clone())
        }
        Decision::Review {
            class,
            confidence,
            reasoning,
            ..
        } => {
            let c = candidate.expect("a review has a candidate");
            let review = review_item(run_id, fact, c, (*class, *confidence, reasoning), p, now);
            (vec![], vec![], Some(review), c.id.clone())
        }
        Decision::Apply {
            class,
            confidence,
            reasoning,
            ..
        } => {
            let c = candidate.expect("an applied decision has a candidate");
            match class {
                Class::Duplicate => {
                    if fact.created_at > c.created_at {
                        row.operation = "UPDATE";
                        let mut old = c.clone();
                        old.updated_at = now;
                        (vec![old], vec![], None, c.id.clone())
                    } else {
                        row.operation = "NOOP";
                        (vec![], vec![], None, c.id.clone())
                    }
                }
                Class::Supersede => {
                    let (memories, links, delete) = superseding(
                        run_id,
                        (fact, c, new_row),
                        (*confidence, reasoning, row.confidence),
                        before.clone(),
                        p,
                        now,
                    );
                    audit.extend(delete);
                    (memories, links, None, fact.id.clone())
                }
                Class::Merge => {
                    let (memories, links) = merging((fact, c, new_row), merged, *confidence, now);
                    (memories, links, None, c.id.clone())
                }
                Class::Coexist => unreachable!("COEXIST is Decision::Coexist"),
            }
        }
    };
    row.target_id = Some(target);
    row.before_state = before;
    row.after_state = Some(after_state(fact, &memories, &links, review.as_ref()));
    audit.push(row);
    FactPlan {
        audit,
        memories,
        links,
        review,
    }
}

/// What one of a user's facts can reach when it is judged: the store's memories it could have
/// as candidates (every one at or above the threshold, not only the top k) and the other facts
/// of the file it resembles as much (either way: resemblance is symmetric). Input of
/// [`rounds_by_dependency`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FactReach {
    /// Positions (in the user's memories) of the memories at or above the threshold.
    pub memories: Vec<usize>,
    /// Positions (in the user's facts, file order) of the other facts at or above it.
    pub facts: Vec<usize>,
}

/// The round of each of one user's facts (file order). A fact's judgement can only depend on
/// an earlier fact that it resembles (that one may become its candidate) or that can reach a
/// memory it can reach too, or a fact earlier than both (that one may change or remove it
/// first); a fact waits
/// one round after the latest such fact and shares a round with the others. So every fact is
/// judged against exactly what the file order leaves it, in as few rounds as the dependencies
/// allow (one per fact of the longest chain, instead of one per fact).
pub fn rounds_by_dependency(reach: &[FactReach]) -> Vec<usize> {
    let shares = |a: &[usize], b: &[usize]| a.iter().any(|x| b.contains(x));
    let mut rounds: Vec<usize> = Vec::with_capacity(reach.len());
    for (i, r) in reach.iter().enumerate() {
        let round = (0..i)
            .filter(|&j| {
                let q = &reach[j];
                r.facts.contains(&j)
                    || shares(&r.memories, &q.memories)
                    || r.facts.iter().any(|&g| g < j && q.facts.contains(&g))
            })
            .map(|j| rounds[j] + 1)
            .max()
            .unwrap_or(0);
        rounds.push(round);
    }
    rounds
}

#[cfg(test)]
mod tests {

    const DAY: i64 = 86_400_000_000;

    fn reach(memories: &[usize], facts: &[usize]) -> FactReach {
        FactReach {
            memories: memories.to_vec(),
            facts: facts.to_vec(),
        }
    }

    #[test]
    fn facts_that_cannot_touch_each_other_share_a_round() {
        // Three unrelated facts: one round, not three.
        let r = [reach(&[0], &[]), reach(&[1], &[]), reach(&[], &[])];
        assert_eq!(rounds_by_dependency(&r), vec![0, 0, 0]);
    }

    #[test]
    fn a_fact_waits_for_every_earlier_fact_it_depends_on() {
        let r = [
            // 0 and 2 resemble each other: 2 may find 0 as its candidate.
            reach(&[], &[2]),
            // 1 and 3 can reach memory 5: 1 may change it before 3 is judged.
            reach(&[5], &[]),
            reach(&[], &[0, 4]),
            reach(&[5, 6], &[]),
            // 4 resembles 2 only, which is in round 1: 4 goes after it.
            reach(&[], &[2]),
            // 5 and 6 resemble 7, a later fact, and not each other: neither can see 7 when
            // it is judged, so they share a round, and 7 follows both.
            reach(&[], &[7]),
            reach(&[], &[7]),
            reach(&[], &[5, 6]),
            // 9 and 10 both resemble 8, an earlier one: whichever runs first may change 8
            // (supersede it, merge into it) before the other sees it.
            reach(&[], &[9, 10]),
            reach(&[], &[8]),
            reach(&[], &[8]),
        ];
        assert_eq!(
            rounds_by_dependency(&r),
            vec![0, 0, 1, 1, 2, 0, 0, 1, 0, 1, 2]
        );
    }

    #[test]
    fn a_chain_of_facts_keeps_one_round_each_in_file_order() {
        let r = [reach(&[3], &[]), reach(&[3], &[]), reach(&[3], &[])];
        assert_eq!(rounds_by_dependency(&r), vec![0, 1, 2]);
    }

    fn memory(id: &str, text: &str, created_at: i64) -> MemoryRow {
        MemoryRow {
            id: id.into(),
            user_id: "u1".into(),
            text: text.into(),
            kind: "fact".into(),
            importance: 0.5,
            state: "active".into(),
            tier: "hot".into(),
            created_at,
            updated_at: created_at,
            valid_from: created_at,
            embedding_model: Some("m".into()),
            ..MemoryRow::default()
        }
    }

    fn apply(class: Class) -> Decision {
        Decision::Apply {
            class,
            candidate: 0,
            confidence: 0.93,
            reasoning: "judged".into(),
        }
    }

    fn after(plan: &FactPlan) -> Value {
        let row = plan.audit.last().expect("the decision's own row");
        serde_json::from_str(row.after_state.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn a_supersession_closes_the_old_memory_and_chains_the_new_one() {
        let old = memory("old", "Ana lives in Lisbon.", 10 * DAY);
        let fact = memory("new", "Ana lives in Porto.", 20 * DAY);
        let p = IntegrateParams::default();
        let now = 30 * DAY;
        let plan = planned(&fact, &apply(Class::Supersede), Some(&old), None, &p);
        let [closed, joined] = plan.memories.as_slice() else {
            panic!("two rows: {:?}", plan.memories)
        };
        assert_eq!(closed.id, "old");
        assert_eq!(closed.valid_until, Some(20 * DAY));
        assert_eq!(closed.superseded_by.as_deref(), Some("new"));
        assert_eq!(closed.supersession_chain_id.as_deref(), Some("old"));
        assert_eq!(closed.updated_at, now);
        assert_eq!(closed.archived_at, None, "archived only with enable_delete");
        assert_eq!(joined.id, "new");
        assert_eq!(joined.supersession_chain_id.as_deref(), Some("old"));
        assert_eq!(
            joined.embedding_model, None,
            "the writer sets the model it embeds with"
        );
        assert_eq!(joined.source.as_deref(), Some("integrate"));
        assert_eq!(plan.links.len(), 1);
        assert_eq!(plan.links[0].link_type, "supersedes");
        assert_eq!(plan.links[0].source_id, "new");
        let decision = plan.audit.last().unwrap();
        assert_eq!(
            (decision.id.as_str(), decision.operation),
            ("d1", "SUPERSEDE")
        );
        assert_eq!(decision.target_id.as_deref(), Some("new"));
        let before: Value =
            serde_json::from_str(decision.before_state.as_deref().unwrap()).unwrap();
        assert_eq!(before["text"], "Ana lives in Lisbon.");
        let logged = after(&plan);
        assert_eq!(logged["fact"]["id"], "new");
        assert_eq!(
            logged["memories"][0]["valid_until"],
            format_timestamp(20 * DAY)
        );

        let deleting = IntegrateParams {
            enable_delete: true,
            ..p
        };
        let plan = planned(&fact, &apply(Class::Supersede), Some(&old), None, &deleting);
        assert_eq!(plan.audit.len(), 2, "the DELETE row before the decision's");
        assert_eq!(plan.audit[0].operation, "DELETE");
        assert_eq!(plan.audit[0].target_id.as_deref(), Some("old"));
        assert_eq!(plan.memories[0].archived_at, Some(now));
        assert_eq!(plan.memories[0].state, "archived");
    }

    /// The plan of `fact` at day 30 (run r1, decision row d1).
    fn planned(
        fact: &MemoryRow,
        decision: &Decision,
        candidate: Option<&MemoryRow>,
        merged: Option<&str>,
        p: &IntegrateParams,
    ) -> FactPlan {
        super::plan("r1", "d1", fact, decision, candidate, merged, p, 30 * DAY)
    }

    #[test]
    fn a_merge_rewrites_the_candidate_and_keeps_the_fact_archived() {
        let mut old = memory("old", "Ana likes tea.", 10 * DAY);
        old.tags = vec!["drinks".into()];
        old.consolidates_memory_ids = vec!["older".into()];
        let mut fact = memory("new", "Ana likes green tea.", 5 * DAY);
        fact.importance = 0.9;
        fact.tags = vec!["tea".into()];
        let p = IntegrateParams::default();
        let merged = "Ana likes tea, green tea most.";
        let plan = planned(&fact, &apply(Class::Merge), Some(&old), Some(merged), &p);
        let [target, kept] = plan.memories.as_slice() else {
            panic!("two rows")
        };
        assert_eq!(target.text, merged);
        assert_eq!(target.importance, 0.9);
        assert_eq!(target.created_at, 5 * DAY, "the earlier creation");
        assert_eq!(target.tags, union_tags(&old.tags, &fact.tags));
        assert_eq!(target.consolidates_memory_ids, ["older", "new"]);
        assert_eq!(kept.id, "new");
        assert_eq!(
            (kept.state.as_str(), kept.archived_at),
            ("archived", Some(30 * DAY))
        );
        assert_eq!(plan.links[0].link_type, "merged_into");
        assert_eq!(plan.audit.last().unwrap().target_id.as_deref(), Some("old"));
    }

    #[test]
    fn a_duplicate_touches_the_memory_only_when_the_fact_is_newer() {
        let old = memory("old", "Ana has a cat.", 10 * DAY);
        let p = IntegrateParams::default();
        let newer = memory("new", "Ana has a cat.", 20 * DAY);
        let plan = planned(&newer, &apply(Class::Duplicate), Some(&old), None, &p);
        assert_eq!(plan.audit.last().unwrap().operation, "UPDATE");
        assert_eq!(plan.memories.len(), 1);
        assert_eq!(
            (plan.memories[0].id.as_str(), plan.memories[0].updated_at),
            ("old", 30 * DAY)
        );
        let older = memory("new", "Ana has a cat.", 5 * DAY);
        let plan = planned(&older, &apply(Class::Duplicate), Some(&old), None, &p);
        assert_eq!(plan.audit.last().unwrap().operation, "NOOP");
        assert!(plan.memories.is_empty() && plan.links.is_empty());
        assert_eq!(
            after(&plan)["fact"]["text"],
            "Ana has a cat.",
            "the fact stays readable"
        );
    }

    #[test]
    fn an_unsure_judge_queues_the_fact_and_writes_no_memory() {
        let old = memory("old", "Ana works at Acme.", 10 * DAY);
        let fact = memory("new", "Ana left Acme.", 20 * DAY);
        let p = IntegrateParams::default();
        let review = Decision::Review {
            class: Class::Supersede,
            candidate: 0,
            confidence: 0.6,
            reasoning: "maybe".into(),
        };
        let now = 30 * DAY;
        let plan = planned(&fact, &review, Some(&old), None, &p);
        assert!(plan.memories.is_empty());
        let item = plan.review.as_ref().expect("a review item");
        assert_eq!(item.status, "pending");
        assert_eq!(item.candidate_id, "old");
        assert_eq!(item.expires_at, Some(now + p.review_ttl_days * DAY));
        let queued: Value = serde_json::from_str(&item.fact).unwrap();
        assert_eq!(queued["id"], "new");
        assert_eq!(item.id, derived_id("review|new"));
        assert_eq!(
            after(&plan)["review"]["status"],
            "pending",
            "the decision logs it"
        );
        assert_eq!(plan.audit.last().unwrap().operation, "REVIEW");
    }

    #[test]
    fn a_kept_fact_is_linked_to_the_memory_it_resembles() {
        let old = memory("old", "Ana plays chess.", 10 * DAY);
        let fact = memory("new", "Ana plays go.", 20 * DAY);
        let p = IntegrateParams::default();
        let coexist = Decision::Coexist {
            related: Some(0),
            confidence: 1.4,
            reasoning: "distinct".into(),
        };
        let plan = planned(&fact, &coexist, Some(&old), None, &p);
        assert_eq!(plan.memories.len(), 1);
        assert_eq!(plan.memories[0].id, "new");
        assert_eq!(plan.links[0].link_type, "related_to");
        assert_eq!(plan.links[0].confidence, 1.0, "clamped");
        let row = plan.audit.last().unwrap();
        assert_eq!(
            (row.operation, row.classification.as_deref()),
            ("ADD", Some("COEXIST"))
        );
        assert_eq!(row.confidence, Some(1.0), "the judge's confidence, clamped");
        assert_eq!(row.reasoning.as_deref(), Some("distinct"));
        let added = planned(&fact, &Decision::Add, None, None, &p);
        let row = added.audit.last().unwrap();
        assert_eq!(
            (row.confidence, row.reasoning.as_deref()),
            (None, None),
            "no judge asked"
        );
    }

    #[test]
    fn a_decision_names_its_candidate_only_when_it_has_one() {
        let apply = Decision::Apply {
            class: Class::Merge,
            candidate: 2,
            confidence: 0.9,
            reasoning: String::new(),
        };
        assert_eq!(apply.candidate(), Some(2));
        let beside = Decision::Coexist {
            related: Some(1),
            confidence: 0.5,
            reasoning: String::new(),
        };
        assert_eq!(beside.candidate(), Some(1));
        let alone = Decision::Coexist {
            related: None,
            confidence: 0.0,
            reasoning: String::new(),
        };
        assert_eq!(alone.candidate(), None);
        assert_eq!(Decision::Add.candidate(), None);
    }

    use super::*;

    fn answer(candidate: usize, class: Option<Class>, confidence: f64) -> Answer {
        Answer {
            candidate,
            class,
            confidence,
            reasoning: format!("r{candidate}"),
        }
    }

    #[test]
    fn no_candidate_is_an_add() {
        assert_eq!(decide(0, &[], &IntegrateParams::default()), Decision::Add);
    }

    #[test]
    fn a_confident_duplicate_wins_over_a_more_similar_coexist() {
        let p = IntegrateParams::default();
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Coexist), 0.9),
                answer(1, Some(Class::Duplicate), 0.9),
            ],
            &p,
        );
        assert!(matches!(
            d,
            Decision::Apply {
                class: Class::Duplicate,
                candidate: 1,
                ..
            }
        ));
        assert_eq!(d.operation(), "NOOP");
    }

    #[test]
    fn precedence_is_duplicate_then_supersede_then_merge() {
        let p = IntegrateParams::default();
        let d = decide(
            3,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.9),
                answer(2, Some(Class::Duplicate), 0.85),
            ],
            &p,
        );
        assert_eq!(d.classification(), "DUPLICATE");
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.9),
            ],
            &p,
        );
        assert_eq!(d.operation(), "SUPERSEDE");
    }

    #[test]
    fn a_confident_change_beats_an_unsure_one_and_unsure_alone_goes_to_review() {
        let p = IntegrateParams::default();
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Duplicate), 0.6),
                answer(1, Some(Class::Merge), 0.9),
            ],
            &p,
        );
        assert_eq!(d.operation(), "MERGE");
        let d = decide(1, &[answer(0, Some(Class::Supersede), 0.79)], &p);
        assert!(matches!(
            d,
            Decision::Review {
                class: Class::Supersede,
                candidate: 0,
                ..
            }
        ));
        assert_eq!(d.operation(), "REVIEW");
    }

    #[test]
    fn disabled_operations_are_not_chosen() {
        let p = IntegrateParams {
            enable_merge: false,
            enable_supersede: false,
            ..IntegrateParams::default()
        };
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.95),
            ],
            &p,
        );
        assert_eq!(
            d,
            Decision::Coexist {
                related: None,
                confidence: 0.0,
                reasoning: "no usable answer from the judge: kept as a new memory".into()
            }
        );
    }

    #[test]
    fn failures_never_change_a_memory_and_say_why() {
        let p = IntegrateParams::default();
        let mut failed = answer(0, None, 0.0);
        failed.reasoning = "reply is not JSON".into();
        let d = decide(2, &[failed, answer(1, Some(Class::Coexist), 0.5)], &p);
        assert_eq!(
            d,
            Decision::Coexist {
                related: Some(1),
                confidence: 0.5,
                reasoning: "r1".into()
            }
        );
        let mut failed = answer(0, None, 0.0);
        failed.reasoning = "timeout".into();
        match decide(1, &[failed], &p) {
            Decision::Coexist {
                related: None,
                reasoning,
                ..
            } => assert!(reasoning.contains("timeout"), "{reasoning}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tags_are_united_normalised_and_deduplicated() {
        let a = vec!["Work".to_string(), "pets".to_string()];
        let b = vec!["work ".to_string(), "dogs".to_string(), "".to_string()];
        assert_eq!(union_tags(&a, &b), vec!["work", "pets", "dogs"]);
    }

    #[test]
    fn validity_is_half_open() {
        assert!(valid_at(Some(10), Some(20), 10));
        assert!(valid_at(Some(10), Some(20), 19));
        assert!(!valid_at(Some(10), Some(20), 20));
        assert!(!valid_at(Some(10), Some(20), 9));
        assert!(valid_at(Some(10), None, i64::MAX));
    }

    fn v(id: &str, next: Option<&str>) -> (String, Option<String>) {
        (id.to_string(), next.map(str::to_string))
    }

    #[test]
    fn chains_are_ordered_and_broken_ones_named() {
        let chain = [v("c", None), v("a", Some("b")), v("b", Some("c"))];
        assert_eq!(chain_order(&chain).unwrap(), vec!["a", "b", "c"]);
        let cycle = [v("a", Some("b")), v("b", Some("a"))];
        assert!(chain_order(&cycle).unwrap_err().contains("cycle"));
        let fork = [v("a", Some("c")), v("b", Some("c")), v("c", None)];
        assert!(chain_order(&fork).unwrap_err().contains("supersedes both"));
        let missing = [v("a", Some("z"))];
        assert!(
            chain_order(&missing)
                .unwrap_err()
                .contains("not in the chain")
        );
        let two = [v("a", None), v("b", None)];
        assert!(chain_order(&two).unwrap_err().contains("2 first versions"));
    }
}
