//! Recall's rules (seed 001 RetrievalMode, seed 002 salience on retrieval): which tiers a mode
//! searches and how candidates are ranked. Pure.
//!
//! - reflexive: hot memories only; standard (the default): hot and warm; deep: hot, warm and
//!   cold; exhaustive: every tier, archived memories included.
//! - rank = a weighted sum of signals within [0, 1] (`RecallParams`, `parts`): the cosine of
//!   the query and the memory (and of the focused query); the query's words it holds, weighed by
//!   their rarity among the candidates (`rare_overlap`); the share of the
//!   entities the query names that it names; a time the query names overlapping a date it is
//!   about; salience (importance when a memory has none) and recency exp(-days since last
//!   access, else creation, / 30), weighted per mode; crowding taken off, the episode added.
//!   Ties go to the newer memory, then the
//!   smaller id.
//! - Reasoned answers offline (`answer_offline`): a date question ("when did", "what date",
//!   "what day", "how long ago") is answered from the first recalled memory, in rank order,
//!   whose text names a time (resolved against when it was written, `logic::temporal`); with
//!   none, from the day the best memory was written, marked as needing inference and at low
//!   confidence.

/// How far a recall searches.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Reflexive,
    Standard,
    Deep,
    Exhaustive,
}

impl Mode {
    /// The tiers searched.
    pub fn tiers(self) -> &'static [&'static str] {
        match self {
            Mode::Reflexive => &["hot"],
            Mode::Standard => &["hot", "warm"],
            Mode::Deep => &["hot", "warm", "cold"],
            Mode::Exhaustive => &["hot", "warm", "cold", "archived"],
        }
    }

    /// Whether archived memories are searched.
    pub fn archived(self) -> bool {
        self == Mode::Exhaustive
    }
}

/// The ranking's weights and the candidate pool (`[recall]` in memlife.toml). Each default was
/// chosen by `memlife eval recall` on the LoCoMo dev split (EVALUATION.md, "Recall on real
/// conversations"), which names the figure behind each.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecallParams {
    /// Weight of the cosine of the query and the memory.
    pub similarity: f64,
    /// Weight of the cosine of the focused query and the memory: the query without the names
    /// most candidates carry (`focused_query`), such as the person a one-person store is
    /// about, whose name tells every memory of theirs alike and outweighs, in the query's
    /// vector, the words that tell which memory answers. Equal to the cosine when the query
    /// names no such name.
    pub focused: f64,
    /// A name counts as common (left out of the focused query) when at least this share of
    /// the candidates' texts carry it.
    pub focused_share: f64,
    /// Weight of the query's words the memory holds, each weighted by its rarity among the
    /// candidates (`rare_overlap`), over the best candidate's.
    pub lexical: f64,
    /// Weight of the share of the people, places and things the query names (through
    /// `entities`) that the memory names (through `memory_entities`).
    pub entity: f64,
    /// Weight of a time the query names overlapping a date the memory is about.
    pub time: f64,
    /// Weight taken off for crowding: the mean cosine of the memory and its
    /// `crowding_neighbours` nearest other candidates. A memory near many of the candidates is
    /// a generic one that resembles every query of its topic; the one that answers stands
    /// apart (the hubness correction of CSLS, Conneau et al. 2018, over the candidate pool).
    pub crowding: f64,
    pub crowding_neighbours: usize,
    /// Weight of the episode: the best score (without episodes) among the `episode_top` best
    /// other candidates from the same session (`session_id`). What a question asks about is
    /// often told over several memories of one conversation; one of them found lifts its
    /// neighbours. 0 for memories without a session.
    pub episode: f64,
    pub episode_top: usize,
    /// Weight of the stored salience (importance when none), per mode: reflexive, standard,
    /// deep, exhaustive.
    pub salience: [f64; 4],
    /// Weight of recency, exp(-days since last access, else creation / recency_days), per mode.
    pub recency: [f64; 4],
    pub recency_days: f64,
    /// Candidates read from each source (vector and full-text search) per result asked.
    pub pool_per_result: usize,
    /// Candidates read from each source, at least.
    pub pool_min: usize,
    /// IVF partitions the vector search probes when `memories` has a vector index (`memlife
    /// index`); 0 leaves it to Lance's adaptive probing, which on a store without clear
    /// neighbourhoods probes far more partitions (BENCHMARKS.md, recall at 100k: p95 73-78 ms
    /// adaptive, 48-54 ms at 20, on one store). Without an index every search is exact and this is unused.
    pub nprobes: usize,
    /// Standard mode searches cold memories too when the nearest cold one is within this
    /// cosine of the k-th nearest hot or warm one: a near tie is no evidence that the warmer
    /// match is the better (a fact folded into one warm memory leaves its old tellings cold).
    pub cold_margin: f64,
}

/// Why standard mode searches cold memories too, if it does: the query names a time (what it
/// asks about may have cooled since), the nearest cold memory is nearer than the nearest hot
/// or warm one, or nearer than (or within `cold_margin` of) the k-th nearest hot or warm one,
/// so it would compete for the k results, or no hot or warm memory reaches `widen_below`.
/// Cosines of the nearest cold and hot-or-warm memories and of the k-th nearest hot-or-warm
/// one (`f64::MIN` when there is none: fewer than k hot or warm memories widens).
pub fn widen_reason(
    names_a_time: bool,
    (best_warm, kth_warm): (f64, f64),
    best_cold: f64,
    widen_below: f64,
    cold_margin: f64,
) -> Option<String> {
    if names_a_time {
        Some("the query names a time".to_string())
    } else if best_cold > best_warm {
        Some(format!(
            "a cold memory is nearer than any hot or warm one (cosine {:.2} against {:.2})",
            best_cold,
            best_warm.max(0.0)
        ))
    } else if best_cold + cold_margin > kth_warm {
        Some(format!(
            "a cold memory is nearer than (or within {cold_margin} of) the k-th nearest hot or warm one, so it competes for the results (cosine {best_cold:.2} against {:.2})",
            kth_warm.max(0.0)
        ))
    } else if best_warm < widen_below {
        Some(format!(
            "no hot or warm memory reaches cosine {:.2} (best {:.2})",
            widen_below,
            best_warm.max(0.0)
        ))
    } else {
        None
    }
}

impl Default for RecallParams {
    fn default() -> Self {
        RecallParams {
            similarity: 0.5,
            focused: 0.5,
            focused_share: 0.35,
            lexical: 0.15,
            entity: 0.0,
            time: 0.2,
            crowding: 0.5,
            crowding_neighbours: 10,
            episode: 0.1,
            episode_top: 5,
            salience: [0.0; 4],
            recency: [0.0; 4],
            recency_days: 30.0,
            pool_per_result: 2,
            pool_min: 50,
            nprobes: 20,
            cold_margin: 0.02,
        }
    }
}

impl RecallParams {
    fn mode_index(mode: Mode) -> usize {
        match mode {
            Mode::Reflexive => 0,
            Mode::Standard => 1,
            Mode::Deep => 2,
            Mode::Exhaustive => 3,
        }
    }

    /// Candidates to read from each source for `k` results.
    pub fn pool(&self, k: usize) -> usize {
        (k * self.pool_per_result).max(self.pool_min).max(k)
    }

    pub fn validate(&self) -> Result<(), String> {
        let all = [
            self.similarity,
            self.focused,
            self.episode,
            self.lexical,
            self.entity,
            self.time,
            self.crowding,
        ]
        .into_iter()
        .chain(self.salience)
        .chain(self.recency);
        if all.into_iter().any(|w| !w.is_finite() || w < 0.0) {
            return Err("[recall] weights must be finite and not negative".into());
        }
        if !self.recency_days.is_finite() || self.recency_days <= 0.0 {
            return Err("[recall] recency_days must be above 0".into());
        }
        if !(0.0..=1.0).contains(&self.cold_margin) {
            return Err("[recall] cold_margin must be 0 to 1".into());
        }
        if !(self.focused_share > 0.0 && self.focused_share <= 1.0) {
            return Err("[recall] focused_share must be above 0 and at most 1".into());
        }
        if self.episode_top == 0 {
            return Err("[recall] episode_top must be at least 1".into());
        }
        if self.crowding_neighbours == 0 {
            return Err("[recall] crowding_neighbours must be at least 1".into());
        }
        if self.pool_per_result == 0 {
            return Err("[recall] pool_per_result must be at least 1".into());
        }
        Ok(())
    }
}

/// What ranking reads of one candidate, each signal within [0, 1] (crowding within [-1, 1]);
/// as parts of a score (`parts`), weight x signal, crowding's taken off.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Signals {
    pub similarity: f64,
    pub focused: f64,
    pub lexical: f64,
    pub entity: f64,
    pub time: f64,
    pub crowding: f64,
    pub episode: f64,
    pub salience: f64,
    pub recency: f64,
}

impl Signals {
    pub fn sum(&self) -> f64 {
        self.similarity
            + self.focused
            + self.episode
            + self.lexical
            + self.entity
            + self.time
            + self.crowding
            + self.salience
            + self.recency
    }
}

/// A candidate as ranking reads it.
#[derive(Clone, Debug)]
pub struct RecallCandidate {
    pub similarity: f64,
    /// The cosine of the focused query (`focused_query`) and the memory; the cosine itself
    /// when the query has no common name.
    pub focused: f64,
    /// BM25 over the query's best BM25 (0 when the full-text search did not find it).
    pub lexical: f64,
    /// Share of the query's named entities the memory names.
    pub entity: f64,
    /// 1 when a time the query names overlaps a date the memory is about.
    pub time: f64,
    /// The mean cosine of the memory and its nearest other candidates (`crowding_of`).
    pub crowding: f64,
    /// The best score of the other top candidates from its session (`fill_episodes`).
    pub episode: f64,
    /// The conversation the memory came from (`session_id`), if any.
    pub session: Option<String>,
    pub salience: f64,
    /// Days since last access (else creation) at the recall's clock.
    pub age_days: f64,
    /// For ties: created_at (microseconds) and id.
    pub created_at: i64,
    pub id: String,
}

/// Each signal's part in the candidate's score (weight x signal); their sum is the score.
pub fn parts(p: &RecallParams, mode: Mode, c: &RecallCandidate) -> Signals {
    let m = RecallParams::mode_index(mode);
    let recency = (-c.age_days.max(0.0) / p.recency_days).exp();
    Signals {
        similarity: p.similarity * c.similarity,
        focused: p.focused * c.focused,
        lexical: p.lexical * c.lexical.clamp(0.0, 1.0),
        entity: p.entity * c.entity.clamp(0.0, 1.0),
        time: p.time * c.time.clamp(0.0, 1.0),
        crowding: -p.crowding * c.crowding.clamp(-1.0, 1.0),
        episode: p.episode * c.episode.clamp(0.0, 1.0),
        salience: p.salience[m] * c.salience.clamp(0.0, 1.0),
        recency: p.recency[m] * recency,
    }
}

pub fn rank_score(p: &RecallParams, mode: Mode, c: &RecallCandidate) -> f64 {
    parts(p, mode, c).sum()
}

/// Each candidate's crowding: the mean cosine of its vector and its `neighbours` nearest
/// other candidates' (0 for a candidate without a vector, or alone). `vectors` are unit
/// length or empty.
pub fn crowding_of(vectors: &[&[f32]], neighbours: usize) -> Vec<f64> {
    let n = vectors.len();
    (0..n)
        .map(|i| {
            if vectors[i].is_empty() {
                return 0.0;
            }
            let mut sims: Vec<f64> = (0..n)
                .filter(|&j| j != i && !vectors[j].is_empty())
                .map(|j| f64::from(crate::similarity::dot(vectors[i], vectors[j])))
                .collect();
            if sims.is_empty() {
                return 0.0;
            }
            let take = neighbours.min(sims.len());
            sims.select_nth_unstable_by(take - 1, |a, b| b.total_cmp(a));
            sims[..take].iter().sum::<f64>() / take as f64
        })
        .collect()
}

/// Fills each candidate's `episode`: the best score, episodes left out, among the
/// `episode_top` best other candidates of its session (0 without a session or a mate there).
pub fn fill_episodes(p: &RecallParams, mode: Mode, candidates: &mut [RecallCandidate]) {
    for c in candidates.iter_mut() {
        c.episode = 0.0;
    }
    if p.episode == 0.0 {
        return;
    }
    let scores: Vec<f64> = candidates.iter().map(|c| rank_score(p, mode, c)).collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(p.episode_top);
    let episodes: Vec<f64> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| match &c.session {
            None => 0.0,
            Some(session) => order
                .iter()
                .filter(|&&j| j != i && candidates[j].session.as_ref() == Some(session))
                .map(|&j| scores[j].max(0.0))
                .fold(0.0, f64::max),
        })
        .collect();
    for (c, e) in candidates.iter_mut().zip(episodes) {
        c.episode = e;
    }
}

/// How much of the query each text holds, by the words that tell the candidates apart: the
/// sum over the query's content words (`reading::content_words`: stemmed, stop words out) that
/// the text holds of ln((n + 1) / (df + 0.5)), df the number of the `n` texts holding the word,
/// divided by the best text's sum (all 0 when no text holds a query word). A word most
/// candidates share (the name of the person they are all about, the topic the search found
/// them by) weighs little; the word only the answer holds weighs most. BM25 weighs words by
/// their rarity in the whole table instead, where such a name is rare.
pub fn rare_overlap(query: &str, texts: &[&str]) -> Vec<f64> {
    let asked = crate::reading::content_words(query);
    let held: Vec<std::collections::BTreeSet<String>> = texts
        .iter()
        .map(|t| {
            crate::reading::content_words(t)
                .intersection(&asked)
                .cloned()
                .collect()
        })
        .collect();
    let n = texts.len() as f64;
    let mut df: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for words in &held {
        for w in words {
            *df.entry(w.as_str()).or_default() += 1;
        }
    }
    let sums: Vec<f64> = held
        .iter()
        .map(|words| {
            words
                .iter()
                .map(|w| ((n + 1.0) / (df[w.as_str()] as f64 + 0.5)).ln())
                .sum()
        })
        .collect();
    let best = sums.iter().copied().fold(0.0, f64::max);
    sums.iter()
        .map(|s| if best > 0.0 { s / best } else { 0.0 })
        .collect()
}

/// The query without the names most candidates carry: a capitalised word (possessive
/// `'s` included) that occurs, as a whole word in any case, in at least `share` of `texts`
/// is left out, its punctuation kept. `None` when no word is left out, or fewer than two
/// words would remain.
pub fn focused_query(query: &str, texts: &[&str], share: f64) -> Option<String> {
    if texts.is_empty() {
        return None;
    }
    let words_of = |t: &str| -> std::collections::HashSet<String> {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let sets: Vec<std::collections::HashSet<String>> = texts.iter().map(|t| words_of(t)).collect();
    let mut kept: Vec<String> = Vec::new();
    let mut dropped = false;
    for word in query.split_whitespace() {
        let bare = word.trim_end_matches(|c: char| !c.is_alphanumeric());
        let core = bare
            .strip_suffix("'s")
            .or_else(|| bare.strip_suffix("\u{2019}s"))
            .unwrap_or(bare);
        let common = core.chars().count() >= 2
            && core.chars().next().is_some_and(char::is_uppercase)
            && core.chars().all(char::is_alphabetic)
            && {
                let lower = core.to_lowercase();
                let with = sets.iter().filter(|s| s.contains(&lower)).count();
                with as f64 >= share * texts.len() as f64
            };
        if common {
            dropped = true;
            let tail = &word[bare.len()..];
            if !tail.is_empty() {
                kept.push(tail.to_string());
            }
        } else {
            kept.push(word.to_string());
        }
    }
    let remaining = kept
        .iter()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .count();
    (dropped && remaining >= 2).then(|| kept.join(" "))
}

/// The indexes of the `k` best candidates, best first.
pub fn rank(p: &RecallParams, mode: Mode, candidates: &[RecallCandidate], k: usize) -> Vec<usize> {
    let scores: Vec<f64> = candidates.iter().map(|c| rank_score(p, mode, c)).collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&candidates[a], &candidates[b]);
        scores[b]
            .total_cmp(&scores[a])
            .then(y.created_at.cmp(&x.created_at))
            .then(x.id.cmp(&y.id))
    });
    order.truncate(k);
    order
}

/// The entities a query names: the indexes of `names` (each an entity's name or alias, any
/// case) that occur in the query as whole words. A one-word name of three letters or fewer
/// counts only written with a capital, so "Al" names someone and "al" does not.
pub fn named_in(query: &str, names: &[&str]) -> Vec<usize> {
    let words: Vec<&str> = query
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .map(|w| w.trim_end_matches("'s").trim_matches('\''))
        .filter(|w| !w.is_empty())
        .collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let parts: Vec<String> = name
            .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        if parts.is_empty() || parts.len() > lower.len() {
            continue;
        }
        let short = parts.len() == 1 && parts[0].chars().count() <= 3;
        let found = (0..=lower.len() - parts.len()).any(|at| {
            lower[at..at + parts.len()] == parts[..]
                && (!short || words[at].chars().next().is_some_and(char::is_uppercase))
        });
        if found {
            out.push(i);
        }
    }
    out
}

/// Questions about a time, which recall answers with a `ReasonedAnswer` by itself.
pub fn is_date_question(question: &str) -> bool {
    let q = question.to_lowercase();
    [
        "when did",
        "when was",
        "when were",
        "when is",
        "when will",
        "what date",
        "what day",
        "which day",
        "how long ago",
        "in which month",
        "what month",
        "what year",
    ]
    .iter()
    .any(|m| q.contains(m))
}

/// seed 001's TemporalReference: a time expression of a memory and what it means.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporalReference {
    pub memory_id: String,
    /// The words of the memory, as written.
    pub expression: String,
    /// What they mean, counted from when the memory was written: a date (YYYY-MM-DD) or an
    /// interval.
    pub resolved: String,
}

/// seed 001's ReasonedAnswer (also the reply of the `recall.answer` LLM task).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonedAnswer {
    pub answer: String,
    pub confidence: f64,
    pub reasoning: String,
    pub temporal_resolutions: Vec<TemporalReference>,
    pub source_memory_ids: Vec<String>,
    pub requires_inference: bool,
}

/// A recalled memory as the offline answer reads it.
pub struct Evidence<'a> {
    pub id: &'a str,
    pub text: &'a str,
    pub written: chrono::NaiveDate,
}

/// Answers a date question from recalled memories, best first (see the module doc); `None`
/// when nothing was recalled.
pub fn answer_offline(
    question: &str,
    memories: &[Evidence<'_>],
    today: chrono::NaiveDate,
) -> Option<ReasonedAnswer> {
    let best = memories.first()?;
    let how_long = question.to_lowercase().contains("how long ago");
    let resolved = memories.iter().find_map(|m| {
        let found = crate::temporal::resolve(m.text, m.written);
        let pick = found.iter().find(|r| !r.implied).or(found.first()).cloned();
        pick.map(|r| (m, r))
    });
    Some(match resolved {
        Some((m, r)) => {
            let label = r.label();
            let answer = if how_long {
                let days = (today - r.start).num_days();
                format!("{days} days ago ({label})")
            } else {
                label.clone()
            };
            let confidence = match r.granularity {
                crate::temporal::Granularity::Day => 0.8,
                _ => 0.6,
            };
            ReasonedAnswer {
                answer,
                confidence,
                reasoning: format!(
                    "offline: memory {} (written {}) says \"{}\", which is {label}",
                    m.id, m.written, r.expression
                ),
                temporal_resolutions: vec![TemporalReference {
                    memory_id: m.id.to_string(),
                    expression: r.expression.clone(),
                    resolved: label.clone(),
                }],
                source_memory_ids: vec![m.id.to_string()],
                requires_inference: false,
            }
        }
        None => ReasonedAnswer {
            answer: format!("on or before {}", best.written),
            confidence: 0.3,
            reasoning: format!(
                "offline: no recalled memory names a time; the best match, {}, was written on {}",
                best.id, best.written
            ),
            temporal_resolutions: Vec::new(),
            source_memory_ids: vec![best.id.to_string()],
            requires_inference: true,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, similarity: f64, salience: f64, age_days: f64) -> RecallCandidate {
        RecallCandidate {
            similarity,
            focused: similarity,
            lexical: 0.0,
            entity: 0.0,
            time: 0.0,
            crowding: 0.0,
            episode: 0.0,
            session: None,
            salience,
            age_days,
            created_at: 0,
            id: id.into(),
        }
    }

    #[test]
    fn the_word_only_the_answer_holds_weighs_most() {
        let texts = [
            "Dana walks her dog every morning",
            "Dana adopted a dog from the shelter",
            "Dana's dog is called Biscuit",
            "Dana cooks pasta on Sundays",
        ];
        let s = rare_overlap("What did Dana name her dog?", &texts);
        // "dana" is in all four and "dog" in three; "name" folds with "called" only in the third.
        assert_eq!(s.iter().copied().fold(0.0, f64::max), 1.0);
        assert!(s[2] > s[0] && s[2] > s[1], "{s:?}");
        assert!(s[3] < s[0], "{s:?}");
        // One rare word outweighs two that most candidates hold.
        let pool = [
            "Dana walks the dog",
            "Dana feeds the dog",
            "Dana's dog sleeps a lot",
            "Biscuit sleeps a lot",
        ];
        let s = rare_overlap("Dana dog Biscuit", &pool);
        assert!(s[3] > s[0] && s[3] > s[2], "{s:?}");
        assert_eq!(
            rare_overlap("What about the weather?", &texts),
            vec![0.0; 4]
        );
        assert!(rare_overlap("Dana", &[]).is_empty());
    }

    #[test]
    fn the_focused_query_leaves_out_the_names_most_candidates_carry() {
        let texts = [
            "Dana adopted a grey cat from the shelter.",
            "Dana's sister Ruth lives in Porto.",
            "Dana runs along the river to unwind.",
            "The cat sleeps on Dana's desk.",
            "Ruth visited in March.",
            "A new bakery opened nearby.",
        ];
        // Dana is in four of six texts, Ruth in two: only Dana is common at 0.5.
        assert_eq!(
            focused_query("What does Dana do to unwind?", &texts, 0.5).as_deref(),
            Some("What does do to unwind?")
        );
        assert_eq!(
            focused_query("Where does Dana's sister Ruth live?", &texts, 0.5).as_deref(),
            Some("Where does sister Ruth live?")
        );
        // The possessive with a typographic apostrophe, and a name ending the question.
        assert_eq!(
            focused_query("Which pet is Dana\u{2019}s? Ask Dana?", &texts, 0.5).as_deref(),
            Some("Which pet is ? Ask ?")
        );
        // Nothing common: no focused query; lower-case words never count as names.
        assert_eq!(focused_query("Where does Ruth live?", &texts, 0.5), None);
        assert_eq!(focused_query("what does the cat do", &texts, 0.1), None);
        // Too little would remain.
        assert_eq!(focused_query("Dana?", &texts, 0.5), None);
        assert_eq!(focused_query("Dana runs", &texts, 0.5), None);
        assert_eq!(focused_query("Dana runs", &[], 0.5), None);
    }

    #[test]
    fn a_memory_of_the_best_candidates_session_rises_above_an_equal_one() {
        let p = RecallParams {
            similarity: 1.0,
            focused: 0.0,
            lexical: 0.0,
            crowding: 0.0,
            time: 0.0,
            episode: 0.1,
            episode_top: 2,
            ..RecallParams::default()
        };
        let mut cands = vec![
            c("best", 0.90, 0.0, 0.0),
            c("other-session", 0.60, 0.0, 0.0),
            c("same-session", 0.60, 0.0, 0.0),
            c("no-session", 0.61, 0.0, 0.0),
            c("same-but-far", 0.20, 0.0, 0.0),
        ];
        for (c, s) in cands
            .iter_mut()
            .zip([Some("s1"), Some("s2"), Some("s1"), None, Some("s1")])
        {
            c.session = s.map(String::from);
        }
        fill_episodes(&p, Mode::Standard, &mut cands);
        let episodes: Vec<f64> = cands.iter().map(|c| c.episode).collect();
        // The top two are best (0.90) and no-session (0.61): best's session mates get 0.90;
        // best itself has no other top candidate in s1.
        assert_eq!(episodes, vec![0.0, 0.0, 0.90, 0.0, 0.90]);
        let order = rank(&p, Mode::Standard, &cands, 5);
        assert_eq!(order, vec![0, 2, 3, 1, 4]);
        // Without the weight, nothing is lifted and the equal ones keep their order.
        let off = RecallParams { episode: 0.0, ..p };
        fill_episodes(&off, Mode::Standard, &mut cands);
        assert!(cands.iter().all(|c| c.episode == 0.0));
        assert_eq!(rank(&off, Mode::Standard, &cands, 3), vec![0, 3, 1]);
    }

    #[test]
    fn each_mode_weighs_salience_and_recency_its_own_way() {
        let cands = [
            c("far", 0.40, 1.0, 0.0),
            c("close", 0.90, 0.1, 400.0),
            c("close-fresh", 0.88, 0.6, 1.0),
        ];
        let mut p = RecallParams {
            similarity: 0.7,
            salience: [0.2, 0.0, 0.0, 0.0],
            recency: [0.1, 0.0, 0.0, 0.0],
            ..RecallParams::default()
        };
        assert_eq!(rank(&p, Mode::Reflexive, &cands, 3), vec![2, 1, 0]);
        assert_eq!(rank(&p, Mode::Reflexive, &cands, 1), vec![2]);
        // Standard mode weighs neither: the closest first.
        assert_eq!(rank(&p, Mode::Standard, &cands, 3), vec![1, 2, 0]);
        p.salience[1] = -1.0;
        assert!(p.validate().is_err());
    }

    #[test]
    fn the_parts_add_up_to_the_score() {
        let p = RecallParams {
            similarity: 0.6,
            focused: 0.3,
            lexical: 0.2,
            entity: 0.1,
            time: 0.05,
            crowding: 0.0,
            episode: 0.2,
            salience: [0.05; 4],
            recency: [0.1; 4],
            ..RecallParams::default()
        };
        let mut x = c("x", 0.5, 0.4, 30.0);
        x.lexical = 0.8;
        x.entity = 1.0;
        x.time = 1.0;
        x.crowding = 0.5;
        x.focused = 0.7;
        x.episode = 0.5;
        let s = parts(&p, Mode::Deep, &x);
        let sum = s.similarity
            + s.focused
            + s.lexical
            + s.entity
            + s.time
            + s.episode
            + s.salience
            + s.recency;
        assert!(
            (sum - rank_score(&p, Mode::Deep, &x)).abs() < 1e-12,
            "no crowding weight"
        );
        let q = RecallParams {
            crowding: 0.4,
            ..p.clone()
        };
        let s = parts(&q, Mode::Deep, &x);
        assert!(
            (s.crowding + 0.2).abs() < 1e-12,
            "crowding is taken off: {s:?}"
        );
        assert!((s.sum() - rank_score(&q, Mode::Deep, &x)).abs() < 1e-12);
        assert!((s.lexical - 0.16).abs() < 1e-12 && (s.entity - 0.1).abs() < 1e-12);
        assert!((s.focused - 0.21).abs() < 1e-12 && (s.episode - 0.1).abs() < 1e-12);
        assert!((s.recency - 0.1 * (-1.0f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_memory_among_many_alike_is_crowded_and_one_apart_is_not() {
        let unit = |v: [f32; 3]| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.map(|x| x / n)
        };
        let generic = [
            unit([1.0, 0.1, 0.0]),
            unit([1.0, 0.0, 0.1]),
            unit([1.0, 0.1, 0.1]),
        ];
        let apart = unit([0.0, 0.0, 1.0]);
        let rows: Vec<&[f32]> = vec![&generic[0], &generic[1], &generic[2], &apart, &[]];
        let c = crowding_of(&rows, 2);
        assert!(c[0] > 0.95 && c[1] > 0.95 && c[2] > 0.95, "{c:?}");
        assert!(c[3] < 0.2, "{c:?}");
        assert_eq!(c[4], 0.0, "no vector, no crowding");
        // One neighbour: the nearest alone.
        let c1 = crowding_of(&rows, 1);
        assert!(c1[3] >= c[3]);
    }

    #[test]
    fn a_query_names_entities_as_whole_words() {
        let names = ["Caroline", "Al", "New York", "orchestra"];
        assert_eq!(
            named_in("When did Caroline's mom visit New York?", &names),
            [0, 2]
        );
        assert_eq!(named_in("Did Al paint?", &names), [1]);
        // "al" in lower case is no name of three letters or fewer; "orchestras" is not
        // "orchestra"; a longer name counts in any case.
        assert!(named_in("two orchestras, al fresco", &names).is_empty());
        assert_eq!(named_in("which ORCHESTRA does she like", &names), [3]);
    }

    #[test]
    fn date_questions_are_answered_from_the_first_memory_that_names_a_time() {
        let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        assert!(is_date_question("When did Ana adopt the kitten?"));
        assert!(!is_date_question("What does Ana like?"));
        let mems = [
            Evidence {
                id: "a",
                text: "Ana has a kitten called Miso",
                written: d("2023-05-10"),
            },
            Evidence {
                id: "b",
                text: "Ana adopted a kitten yesterday",
                written: d("2023-05-10"),
            },
        ];
        let a = answer_offline("When did Ana adopt the kitten?", &mems, d("2023-06-01")).unwrap();
        assert_eq!(a.answer, "2023-05-09");
        assert_eq!(a.source_memory_ids, ["b"]);
        assert!(!a.requires_inference);
        let a = answer_offline("How long ago did Ana adopt it?", &mems, d("2023-06-01")).unwrap();
        assert_eq!(a.answer, "23 days ago (2023-05-09)");
        let a = answer_offline("When?", &mems[..1], d("2023-06-01")).unwrap();
        assert!(a.requires_inference && a.confidence < 0.5, "{a:?}");
        assert!(answer_offline("When?", &[], d("2023-06-01")).is_none());
    }

    #[test]
    fn cold_memories_are_searched_when_one_would_compete_or_the_best_is_weak() {
        // The nearest hot or warm memory at 0.9, the k-th at 0.7.
        let why = |time, cold| widen_reason(time, (0.9, 0.7), cold, 0.3, 0.02);
        assert!(why(true, 0.1).unwrap().contains("names a time"));
        assert!(why(false, 0.95).unwrap().contains("nearer than any"));
        assert!(why(false, 0.75).unwrap().contains("k-th nearest"));
        assert!(
            why(false, 0.69).unwrap().contains("within 0.02"),
            "a near tie competes"
        );
        assert_eq!(
            why(false, 0.67),
            None,
            "0.03 behind the k-th: no cold memory makes the k"
        );
        assert!(
            widen_reason(false, (0.25, 0.1), 0.05, 0.3, 0.02)
                .unwrap()
                .contains("reaches cosine 0.30")
        );
        assert_eq!(
            widen_reason(false, (0.8, 0.7), f64::MIN, 0.3, 0.02),
            None,
            "no cold memory"
        );
        assert!(
            widen_reason(false, (0.8, f64::MIN), 0.2, 0.3, 0.02).is_some(),
            "fewer than k hot or warm memories: the cold ones fill the results"
        );
        assert!(
            widen_reason(false, (0.813, 0.7), 0.69, 0.3, 0.0).is_none(),
            "no margin"
        );
    }

    #[test]
    fn modes_widen_the_tiers() {
        assert_eq!(Mode::Reflexive.tiers(), ["hot"]);
        assert_eq!(Mode::Standard.tiers(), ["hot", "warm"]);
        assert!(Mode::Deep.tiers().contains(&"cold") && !Mode::Deep.archived());
        assert!(Mode::Exhaustive.archived());
    }
}
