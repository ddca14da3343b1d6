//! Deterministic synthetic memories with ground truth, for tests, benchmarks and evaluation of
//! the maintenance jobs. Each user gets groups of memories built on purpose: paraphrased
//! duplicates, complementary facts to merge, supersession chains with rising timestamps,
//! verbose multi-topic memories to split, and episodes grouped into sessions; the truth file
//! lists every group. A fact is used by at most one group per user, so the truth is exact:
//! once a user's facts run out, the rest of their memories are distinct episodes.
//!
//! Pure: the generator owns its random number generator, so a seed gives the same bytes on
//! every machine and every version of the dependencies.

mod vocab;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::hash::fnv1a;

use vocab::*;

/// SplitMix64: small, fast, and stable forever (unlike a library generator's stream).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// `k` distinct indices of `0..n`, in random order.
    pub fn distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = i + self.below(n - i);
            all.swap(i, j);
        }
        all.truncate(k.min(n));
        all
    }
}

#[derive(Clone, Debug)]
pub struct SynthConfig {
    pub users: usize,
    pub memories: usize,
    pub seed: u64,
    /// Microseconds since the epoch of the first day memories may be created.
    pub start_micros: i64,
    pub span_days: i64,
}

/// One generated memory: the columns synth sets; import gives the rest their defaults.
#[derive(Clone, Debug)]
pub struct SynthMemory {
    pub id: String,
    pub user_id: String,
    pub text: String,
    pub kind: &'static str,
    pub session_id: String,
    pub created_at: i64,
    pub happens_at: Option<i64>,
    pub tags: Vec<String>,
    pub access_count: i64,
    pub last_accessed_at: Option<i64>,
    pub last_recall_interval_days: f64,
    pub importance: f64,
    pub confidence: f64,
    pub emotional_salience: f64,
    pub state: &'static str,
}

#[derive(Debug, Serialize)]
pub struct DuplicateGroup {
    pub user_id: String,
    pub memory_ids: Vec<String>,
    pub fact: String,
    /// `fact`: one fact restated in other words at different times; `episode`: one event
    /// told again the same day in the same words (synth's episodes repeat by chance; the
    /// retelling's text names the date or the clock time to stay unique).
    pub kind: &'static str,
}

#[derive(Debug, Serialize)]
pub struct MergeGroup {
    pub user_id: String,
    pub memory_ids: Vec<String>,
    pub merged_text: String,
}

#[derive(Debug, Serialize)]
pub struct SupersessionChain {
    pub user_id: String,
    pub topic: String,
    /// Oldest first; the last one is current.
    pub memory_ids: Vec<String>,
    pub values: Vec<String>,
    pub current_id: String,
}

#[derive(Debug, Serialize)]
pub struct VerboseMemory {
    pub user_id: String,
    pub memory_id: String,
    pub parts: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct EntityTruth {
    pub user_id: String,
    pub name: String,
    pub entity_type: String,
    pub memory_ids: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SessionTruth {
    pub user_id: String,
    pub session_id: String,
    pub memory_ids: Vec<String>,
}

/// An episode whose text says when it happened relative to when it was told.
#[derive(Debug, Serialize)]
pub struct RelativeTime {
    pub memory_id: String,
    pub phrase: String,
    pub happened_on: String,
}

#[derive(Debug, Serialize)]
pub struct Truth {
    pub seed: u64,
    pub users: usize,
    pub memories: usize,
    pub duplicate_groups: Vec<DuplicateGroup>,
    pub merge_groups: Vec<MergeGroup>,
    pub supersession_chains: Vec<SupersessionChain>,
    pub verbose: Vec<VerboseMemory>,
    pub entities: Vec<EntityTruth>,
    pub sessions: Vec<SessionTruth>,
    pub relative_times: Vec<RelativeTime>,
}

const DAY: i64 = 86_400_000_000;
const MINUTE: i64 = 60_000_000;

/// A fact a group can be built from, claimed once per user.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum FactKey {
    Topic(usize),
    Statement(usize),
    Pet(usize),
    Person(usize),
    Project(usize),
}

struct UserGen<'a> {
    config: &'a SynthConfig,
    rng: Rng,
    user_id: String,
    next_number: usize,
    next_session: usize,
    claimed: HashSet<FactKey>,
    texts: HashSet<String>,
    /// Episodes told so far by (text before any date was added, day of the event): the first
    /// telling's id, and the duplicate group its retellings went into, if any.
    told: HashMap<(String, i64), (String, Option<usize>)>,
    memories: Vec<SynthMemory>,
    entities: BTreeMap<String, (&'static str, Vec<String>)>,
    truth: &'a mut Truth,
}

impl UserGen<'_> {
    fn end_micros(&self) -> i64 {
        self.config.start_micros + self.config.span_days * DAY
    }

    fn random_time(&mut self) -> i64 {
        let span = self.config.span_days * DAY / 1_000_000;
        self.config.start_micros + (self.rng.unit() * span as f64) as i64 * 1_000_000
    }

    /// `n` times in increasing order, at least a week apart when the span allows.
    fn rising_times(&mut self, n: usize) -> Vec<i64> {
        let mut times: Vec<i64> = (0..n).map(|_| self.random_time()).collect();
        times.sort_unstable();
        for i in 1..n {
            if times[i] < times[i - 1] + 7 * DAY {
                times[i] =
                    (times[i - 1] + 7 * DAY).min(self.end_micros() - (n - i) as i64 * MINUTE);
                times[i] = times[i].max(times[i - 1] + MINUTE);
            }
        }
        times
    }

    fn claim(&mut self, candidates: impl Fn(usize) -> FactKey, count: usize) -> Option<usize> {
        let start = self.rng.below(count);
        (0..count)
            .map(|i| (start + i) % count)
            .find(|&i| self.claimed.insert(candidates(i)))
    }

    fn new_session(&mut self) -> String {
        self.next_session += 1;
        format!("{}-s{:05}", self.user_id, self.next_session)
    }

    fn note_entity(&mut self, name: &str, entity_type: &'static str, memory_id: &str) {
        let entry = self
            .entities
            .entry(name.to_string())
            .or_insert_with(|| (entity_type, Vec::new()));
        entry.1.push(memory_id.to_string());
    }

    /// Adds one memory; access history and scores are drawn here so every kind gets them.
    fn push(
        &mut self,
        text: String,
        kind: &'static str,
        session_id: String,
        created_at: i64,
        tag: &str,
        entities: &[(&str, &'static str)],
    ) -> String {
        self.next_number += 1;
        let id = format!("{}-{:06}", self.user_id, self.next_number);
        let roll = self.rng.unit();
        let access_count = if roll < 0.5 {
            0
        } else if roll < 0.8 {
            1 + self.rng.below(5) as i64
        } else if roll < 0.95 {
            6 + self.rng.below(10) as i64
        } else {
            16 + self.rng.below(45) as i64
        };
        let last_accessed_at = (access_count > 0).then(|| {
            let room = (self.end_micros() - created_at).max(0) / 1_000_000;
            created_at + (self.rng.unit() * room as f64) as i64 * 1_000_000
        });
        let state = match access_count {
            0 => "candidate",
            1..=9 => "active",
            _ => "core",
        };
        let round = |v: f64| (v * 100.0).round() / 100.0;
        let memory = SynthMemory {
            id: id.clone(),
            user_id: self.user_id.clone(),
            text: text.clone(),
            kind,
            session_id,
            created_at,
            happens_at: None,
            tags: vec![tag.to_string()],
            access_count,
            last_accessed_at,
            last_recall_interval_days: if access_count > 1 {
                round(1.0 + self.rng.unit() * 29.0)
            } else {
                0.0
            },
            importance: round(0.2 + self.rng.unit() * 0.7),
            confidence: round(0.5 + self.rng.unit() * 0.5),
            emotional_salience: if kind == "episode" {
                round(self.rng.unit() * 0.8)
            } else {
                round(self.rng.unit() * 0.3)
            },
            state,
        };
        self.texts.insert(text);
        self.memories.push(memory);
        for (name, entity_type) in entities {
            self.note_entity(name, entity_type, &id);
        }
        id
    }

    fn duplicate_group(&mut self) -> bool {
        let use_topic = self.rng.chance(0.5);
        let (paraphrases, fact, tag, entity): (
            Vec<String>,
            String,
            &str,
            Option<(String, &'static str)>,
        ) = if use_topic {
            let Some(t) = self.claim(FactKey::Topic, TOPICS.len()) else {
                return false;
            };
            let topic = &TOPICS[t];
            let value = *self.rng.pick(topic.values);
            let texts = topic
                .paraphrases
                .iter()
                .map(|p| p.replace("{v}", value))
                .collect::<Vec<_>>();
            let fact = texts[0].clone();
            (
                texts,
                fact,
                topic.tag,
                Some((value.to_string(), topic.entity_type)),
            )
        } else {
            let Some(s) = self.claim(FactKey::Statement, STATEMENTS.len()) else {
                return false;
            };
            let (tag, texts) = STATEMENTS[s];
            (
                texts.iter().map(|t| t.to_string()).collect(),
                texts[0].to_string(),
                tag,
                None,
            )
        };
        let size = (2 + self.rng.below(3)).min(paraphrases.len());
        let chosen = self.rng.distinct(paraphrases.len(), size);
        let mut times = self.rising_times(size);
        times.sort_unstable();
        let mut ids = Vec::new();
        for (index, time) in chosen.into_iter().zip(times) {
            let session = self.new_session();
            let entities: Vec<(&str, &'static str)> =
                entity.iter().map(|(n, t)| (n.as_str(), *t)).collect();
            ids.push(self.push(
                paraphrases[index].clone(),
                "fact",
                session,
                time,
                tag,
                &entities,
            ));
        }
        self.truth.duplicate_groups.push(DuplicateGroup {
            user_id: self.user_id.clone(),
            memory_ids: ids,
            fact,
            kind: "fact",
        });
        true
    }

    fn merge_group(&mut self) -> bool {
        let choice = self.rng.below(3);
        let (first, second, merged, tag, entities): (
            String,
            String,
            String,
            &str,
            Vec<(String, &'static str)>,
        ) = match choice {
            0 => {
                let Some(p) = self.claim(FactKey::Pet, PET_KINDS.len()) else {
                    return false;
                };
                let kind = PET_KINDS[p];
                let name = *self.rng.pick(PET_NAMES);
                (
                    format!("User has a {kind}."),
                    format!("User's {kind} is named {name}."),
                    format!("User has a {kind} named {name}."),
                    "pets",
                    vec![(name.to_string(), "pet")],
                )
            }
            1 => {
                let Some(p) = self.claim(FactKey::Person, PEOPLE.len()) else {
                    return false;
                };
                let name = PEOPLE[p];
                let relation = *self.rng.pick(RELATIONS);
                let role = *self.rng.pick(ROLES);
                (
                    format!("User's {relation} is called {name}."),
                    format!("{name}, user's {relation}, works as a {role}."),
                    format!("User's {relation} {name} works as a {role}."),
                    "people",
                    vec![(name.to_string(), "person")],
                )
            }
            _ => {
                let Some(p) = self.claim(FactKey::Project, PROJECTS.len()) else {
                    return false;
                };
                let (name, description) = PROJECTS[p];
                let language = *self.rng.pick(TOPICS[2].values);
                (
                    format!("User is building {name}, {description}."),
                    format!("User is writing {name} in {language}."),
                    format!("User is building {name}, {description}, in {language}."),
                    "projects",
                    vec![
                        (name.to_string(), "project"),
                        (language.to_string(), "tool"),
                    ],
                )
            }
        };
        let times = self.rising_times(2);
        let entity_refs: Vec<(&str, &'static str)> =
            entities.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let s1 = self.new_session();
        let a = self.push(first, "fact", s1, times[0], tag, &entity_refs);
        let s2 = self.new_session();
        let b = self.push(second, "fact", s2, times[1], tag, &entity_refs);
        self.truth.merge_groups.push(MergeGroup {
            user_id: self.user_id.clone(),
            memory_ids: vec![a, b],
            merged_text: merged,
        });
        true
    }

    /// A fact replaced over time: a topic's value, a side project's stage, or where a person
    /// lives. Versions get rising timestamps; later ones carry cue words ("now", "moved").
    fn supersession_chain(&mut self) -> bool {
        match self.rng.below(3) {
            0 => self.topic_chain(),
            1 => self.project_chain(),
            _ => self.person_chain(),
        }
    }

    fn record_chain(&mut self, topic: &str, ids: Vec<String>, values: Vec<String>) {
        self.truth.supersession_chains.push(SupersessionChain {
            user_id: self.user_id.clone(),
            topic: topic.to_string(),
            current_id: ids.last().cloned().unwrap_or_default(),
            memory_ids: ids,
            values,
        });
    }

    fn topic_chain(&mut self) -> bool {
        let Some(t) = self.claim(FactKey::Topic, TOPICS.len()) else {
            return false;
        };
        let topic = &TOPICS[t];
        let length = 2 + self.rng.below(2);
        let values: Vec<&str> = self
            .rng
            .distinct(topic.values.len(), length)
            .into_iter()
            .map(|i| topic.values[i])
            .collect();
        let times = self.rising_times(values.len());
        let mut ids = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let text = if i == 0 {
                self.rng.pick(topic.paraphrases).replace("{v}", value)
            } else {
                self.rng
                    .pick(topic.updates)
                    .replace("{old}", values[i - 1])
                    .replace("{new}", value)
            };
            let session = self.new_session();
            let mut entities = vec![(*value, topic.entity_type)];
            if i > 0 {
                entities.push((values[i - 1], topic.entity_type));
            }
            ids.push(self.push(text, "fact", session, times[i], topic.tag, &entities));
        }
        let values = values.iter().map(|v| v.to_string()).collect();
        self.record_chain(topic.name, ids, values);
        true
    }

    fn project_chain(&mut self) -> bool {
        let Some(p) = self.claim(FactKey::Project, PROJECTS.len()) else {
            return false;
        };
        let (name, description) = PROJECTS[p];
        let length = 2 + self.rng.below(2);
        let first = self.rng.below(PROJECT_STAGES.len() + 1 - length);
        let stages = &PROJECT_STAGES[first..first + length];
        let times = self.rising_times(length);
        let mut ids = Vec::new();
        for (i, stage) in stages.iter().enumerate() {
            let text = if i == 0 {
                format!("User's side project {name}, {description}, {stage}.")
            } else {
                self.rng
                    .pick(PROJECT_UPDATES)
                    .replace("{name}", name)
                    .replace("{stage}", stage)
            };
            let session = self.new_session();
            ids.push(self.push(
                text,
                "fact",
                session,
                times[i],
                "projects",
                &[(name, "project")],
            ));
        }
        let values = stages.iter().map(|v| v.to_string()).collect();
        self.record_chain("project_stage", ids, values);
        true
    }

    fn person_chain(&mut self) -> bool {
        let Some(p) = self.claim(FactKey::Person, PEOPLE.len()) else {
            return false;
        };
        let name = PEOPLE[p];
        let relation = *self.rng.pick(RELATIONS);
        let cities = TOPICS[4].values;
        let length = 2 + self.rng.below(2);
        let values: Vec<&str> = self
            .rng
            .distinct(cities.len(), length)
            .into_iter()
            .map(|i| cities[i])
            .collect();
        let times = self.rising_times(length);
        let mut ids = Vec::new();
        for (i, city) in values.iter().enumerate() {
            let text = if i == 0 {
                format!("User's {relation} {name} lives in {city}.")
            } else {
                self.rng
                    .pick(PERSON_MOVES)
                    .replace("{relation}", relation)
                    .replace("{name}", name)
                    .replace("{old}", values[i - 1])
                    .replace("{new}", city)
            };
            let session = self.new_session();
            let entities = [(name, "person"), (*city, "place")];
            ids.push(self.push(text, "fact", session, times[i], "people", &entities));
        }
        let values = values.iter().map(|v| v.to_string()).collect();
        self.record_chain("person_city", ids, values);
        true
    }

    fn verbose_memory(&mut self) -> bool {
        let wanted = 3 + self.rng.below(2);
        let mut parts = Vec::new();
        let mut entities: Vec<(String, &'static str)> = Vec::new();
        for _ in 0..wanted {
            if self.rng.chance(0.5) {
                if let Some(s) = self.claim(FactKey::Statement, STATEMENTS.len()) {
                    parts.push(STATEMENTS[s].1[0].to_string());
                }
            } else if let Some(t) = self.claim(FactKey::Topic, TOPICS.len()) {
                let topic = &TOPICS[t];
                let value = *self.rng.pick(topic.values);
                parts.push(topic.paraphrases[0].replace("{v}", value));
                entities.push((value.to_string(), topic.entity_type));
            }
        }
        if parts.len() < 2 {
            return false;
        }
        let mut text = self.rng.pick(VERBOSE_OPENERS).to_string();
        for (i, part) in parts.iter().enumerate() {
            text.push(' ');
            if i == 0 {
                text.push_str(part);
            } else {
                let joiner = self.rng.pick(VERBOSE_JOINERS).to_string();
                text.push_str(&joiner);
                text.push(' ');
                text.push_str(&lower_first(part));
            }
        }
        let time = self.random_time();
        let session = self.new_session();
        let refs: Vec<(&str, &'static str)> =
            entities.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let id = self.push(text, "fact", session, time, "mixed", &refs);
        self.truth.verbose.push(VerboseMemory {
            user_id: self.user_id.clone(),
            memory_id: id,
            parts,
        });
        true
    }

    fn singleton(&mut self) -> bool {
        match self.rng.below(3) {
            0 => {
                let Some(s) = self.claim(FactKey::Statement, STATEMENTS.len()) else {
                    return false;
                };
                let (tag, texts) = STATEMENTS[s];
                let text = self.rng.pick(texts).to_string();
                let (time, session) = (self.random_time(), self.new_session());
                self.push(text, "fact", session, time, tag, &[]);
            }
            1 => {
                let Some(p) = self.claim(FactKey::Person, PEOPLE.len()) else {
                    return false;
                };
                let name = PEOPLE[p];
                let relation = *self.rng.pick(RELATIONS);
                let city = *self.rng.pick(TOPICS[4].values);
                let text = format!("User's {relation} {name} lives in {city}.");
                let (time, session) = (self.random_time(), self.new_session());
                self.push(
                    text,
                    "fact",
                    session,
                    time,
                    "people",
                    &[(name, "person"), (city, "place")],
                );
            }
            _ => {
                let Some(p) = self.claim(FactKey::Project, PROJECTS.len()) else {
                    return false;
                };
                let (name, description) = PROJECTS[p];
                let stage = *self.rng.pick(PROJECT_STAGES);
                let text = format!("User's side project {name}, {description}, {stage}.");
                let (time, session) = (self.random_time(), self.new_session());
                self.push(
                    text,
                    "fact",
                    session,
                    time,
                    "projects",
                    &[(name, "project")],
                );
            }
        }
        true
    }

    /// Records an episode's telling; the same event (the same words, leaving out when)
    /// about the same day as an earlier telling is one event told twice: a duplicate group
    /// of the truth.
    fn note_telling(&mut self, told_as: (String, i64), id: &str) {
        let Some((first, group)) = self.told.get_mut(&told_as) else {
            self.told.insert(told_as, (id.to_string(), None));
            return;
        };
        match group {
            Some(index) => self.truth.duplicate_groups[*index]
                .memory_ids
                .push(id.to_string()),
            None => {
                *group = Some(self.truth.duplicate_groups.len());
                let fact = told_as.0.clone();
                self.truth.duplicate_groups.push(DuplicateGroup {
                    user_id: self.user_id.clone(),
                    memory_ids: vec![first.clone(), id.to_string()],
                    fact,
                    kind: "episode",
                });
            }
        }
    }

    /// A session of 1 to `max` episodes on one day; texts are made unique by naming the date.
    fn session(&mut self, max: usize) {
        let size = 1 + self.rng.below(max.clamp(1, 5));
        let session = self.new_session();
        let day_start = self.random_time();
        let mut ids = Vec::new();
        for i in 0..size {
            let created_at = day_start + (i as i64) * (5 + self.rng.below(20) as i64) * MINUTE;
            let template = *self.rng.pick(EPISODES);
            let name = *self.rng.pick(PEOPLE);
            let place = *self.rng.pick(PLACES);
            let tool = *self.rng.pick(TOPICS[0].values);
            let (project, _) = *self.rng.pick(PROJECTS);
            let pet = *self.rng.pick(PET_NAMES);
            let mut text = template
                .replace("{name}", name)
                .replace("{place}", place)
                .replace("{tool}", tool)
                .replace("{project}", project)
                .replace("{pet}", pet);
            // What happened, before any word of when: two tellings of it about one day are
            // one event, whether or not one of them says "this morning".
            let what = text.trim_end_matches('.').to_string();
            let mut happens_at = None;
            let mut relative = None;
            if self.rng.chance(0.3) {
                let (phrase, days) = *self.rng.pick(RELATIVE_TIMES);
                text = format!("{} {phrase}.", text.trim_end_matches('.'));
                happens_at = Some(created_at - days * DAY);
                relative = Some(phrase);
            }
            let told_as = (what, happens_at.unwrap_or(created_at).div_euclid(DAY));
            // A repeated episode is told apart by its date, then by its time of day.
            for format in ["%-d %B %Y", "%-d %B %Y at %H:%M"] {
                if !self.texts.contains(&text) {
                    break;
                }
                let when =
                    chrono::DateTime::from_timestamp_micros(happens_at.unwrap_or(created_at))
                        .map(|d| d.format(format).to_string())
                        .unwrap_or_default();
                let base = text
                    .split(" (on ")
                    .next()
                    .unwrap_or(&text)
                    .trim_end_matches('.');
                text = format!("{base} (on {when}).");
            }
            if self.texts.contains(&text) {
                continue;
            }
            let mut entities: Vec<(&str, &'static str)> = Vec::new();
            if template.contains("{name}") {
                entities.push((name, "person"));
            }
            if template.contains("{place}") {
                entities.push((place, "place"));
            }
            if template.contains("{tool}") {
                entities.push((tool, "tool"));
            }
            if template.contains("{project}") {
                entities.push((project, "project"));
            }
            if template.contains("{pet}") {
                entities.push((pet, "pet"));
            }
            let id = self.push(
                text,
                "episode",
                session.clone(),
                created_at,
                "episodes",
                &entities,
            );
            if let Some(last) = self.memories.last_mut() {
                last.happens_at = happens_at;
            }
            self.note_telling(told_as, &id);
            if let (Some(phrase), Some(at)) = (relative, happens_at) {
                let happened_on = chrono::DateTime::from_timestamp_micros(at)
                    .map(|d| d.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                self.truth.relative_times.push(RelativeTime {
                    memory_id: id.clone(),
                    phrase: phrase.to_string(),
                    happened_on,
                });
            }
            ids.push(id);
        }
        if !ids.is_empty() {
            self.truth.sessions.push(SessionTruth {
                user_id: self.user_id.clone(),
                session_id: session,
                memory_ids: ids,
            });
        }
    }
}

fn lower_first(text: &str) -> String {
    match text.strip_prefix("User") {
        Some(rest) => format!("user{rest}"),
        None => text.to_string(),
    }
}

/// Generates the memories (sorted by user, then creation time, then id) and their truth.
pub fn generate(config: &SynthConfig) -> (Vec<SynthMemory>, Truth) {
    let mut all = Vec::with_capacity(config.memories);
    let truth = generate_each_user(config, |memories| all.extend(memories));
    (all, truth)
}

/// Generates user by user, handing each user's memories (sorted by creation time, then id)
/// to `sink` as soon as they exist, so a million memories never sit in memory at once.
pub fn generate_each_user(config: &SynthConfig, mut sink: impl FnMut(Vec<SynthMemory>)) -> Truth {
    let mut truth = Truth {
        seed: config.seed,
        users: config.users,
        memories: config.memories,
        duplicate_groups: Vec::new(),
        merge_groups: Vec::new(),
        supersession_chains: Vec::new(),
        verbose: Vec::new(),
        entities: Vec::new(),
        sessions: Vec::new(),
        relative_times: Vec::new(),
    };
    let users = config.users.max(1);
    let width = users.to_string().len().max(2);
    for user in 0..users {
        let budget = config.memories / users + usize::from(user < config.memories % users);
        let user_id = format!("user-{:0width$}", user + 1);
        let mut generator = UserGen {
            config,
            rng: Rng::new(config.seed ^ fnv1a(&[&user_id])),
            user_id,
            next_number: 0,
            next_session: 0,
            claimed: HashSet::new(),
            texts: HashSet::new(),
            told: HashMap::new(),
            memories: Vec::with_capacity(budget),
            entities: BTreeMap::new(),
            truth: &mut truth,
        };
        // Facts are claimed once; after many misses in a row the user's facts are used up.
        let mut facts_left = true;
        let mut misses = 0;
        while generator.memories.len() < budget {
            let remaining = budget - generator.memories.len();
            if facts_left {
                let roll = generator.rng.unit();
                if roll < 0.80 {
                    let made = if roll < 0.25 && remaining >= 4 {
                        generator.duplicate_group()
                    } else if roll < 0.40 && remaining >= 2 {
                        generator.merge_group()
                    } else if roll < 0.55 && remaining >= 3 {
                        generator.supersession_chain()
                    } else if roll < 0.65 {
                        generator.verbose_memory()
                    } else {
                        generator.singleton()
                    };
                    if made {
                        misses = 0;
                    } else {
                        misses += 1;
                        facts_left = misses < 40;
                    }
                    continue;
                }
            }
            generator.session(remaining);
        }
        for (name, (entity_type, ids)) in std::mem::take(&mut generator.entities) {
            generator.truth.entities.push(EntityTruth {
                user_id: generator.user_id.clone(),
                name,
                entity_type: entity_type.to_string(),
                memory_ids: ids,
            });
        }
        let mut memories = generator.memories;
        memories.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        sink(memories);
    }
    truth
}

/// A pseudo-random unit vector for a memory: load-test filler, not a semantic embedding.
pub fn placeholder_embedding(seed: u64, id: &str, dim: usize, out: &mut Vec<f32>) {
    let mut rng = Rng::new(seed ^ fnv1a(&[id]));
    out.clear();
    out.extend((0..dim).map(|_| (rng.unit() * 2.0 - 1.0) as f32));
    let norm = out
        .iter()
        .map(|v| v * v)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    out.iter_mut().for_each(|v| *v /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(users: usize, memories: usize, seed: u64) -> SynthConfig {
        SynthConfig {
            users,
            memories,
            seed,
            start_micros: 1_735_689_600_000_000,
            span_days: 365,
        }
    }

    #[test]
    fn exact_count_and_unique_ids() {
        let (memories, truth) = generate(&config(3, 500, 7));
        assert_eq!(memories.len(), 500);
        let ids: HashSet<&str> = memories.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids.len(), 500);
        assert!(!truth.duplicate_groups.is_empty());
        assert!(!truth.merge_groups.is_empty());
        assert!(!truth.supersession_chains.is_empty());
        assert!(!truth.verbose.is_empty());
        assert!(!truth.sessions.is_empty());
        assert!(!truth.relative_times.is_empty());
    }

    #[test]
    fn chains_rise_in_time_and_groups_reference_real_memories() {
        let (memories, truth) = generate(&config(2, 400, 11));
        let by_id: std::collections::HashMap<&str, &SynthMemory> =
            memories.iter().map(|m| (m.id.as_str(), m)).collect();
        for chain in &truth.supersession_chains {
            let times: Vec<i64> = chain
                .memory_ids
                .iter()
                .map(|id| by_id[id.as_str()].created_at)
                .collect();
            assert!(times.windows(2).all(|w| w[0] < w[1]), "{chain:?}");
            assert_eq!(chain.current_id, *chain.memory_ids.last().unwrap());
        }
        for group in &truth.duplicate_groups {
            assert!(group.memory_ids.len() >= 2);
            let texts: HashSet<&str> = group
                .memory_ids
                .iter()
                .map(|id| by_id[id.as_str()].text.as_str())
                .collect();
            assert_eq!(texts.len(), group.memory_ids.len(), "paraphrases differ");
        }
        for verbose in &truth.verbose {
            let text = &by_id[verbose.memory_id.as_str()].text;
            assert!(verbose.parts.len() >= 2 && text.len() > 80, "{text}");
        }
    }

    #[test]
    fn no_unlabelled_exact_repeats_within_a_user() {
        let (memories, _) = generate(&config(2, 3000, 5));
        let mut seen = HashSet::new();
        for memory in &memories {
            assert!(
                seen.insert((&memory.user_id, &memory.text)),
                "{}",
                memory.text
            );
        }
    }

    #[test]
    fn an_episode_told_again_the_same_day_is_a_duplicate_group_of_the_truth() {
        let (memories, truth) = generate(&config(2, 4000, 9));
        let phrases: HashMap<&str, &str> = truth
            .relative_times
            .iter()
            .map(|r| (r.memory_id.as_str(), r.phrase.as_str()))
            .collect();
        // Recomputed from the output: episodes by user, what happened (the words without
        // the date synth adds to keep texts unique and without the relative phrase) and the
        // day of the event.
        let mut tellings: HashMap<(String, String, i64), Vec<String>> = HashMap::new();
        for m in memories.iter().filter(|m| m.kind == "episode") {
            let mut words = m.text.split(" (on ").next().unwrap_or(&m.text);
            words = words.trim_end_matches('.');
            if let Some(phrase) = phrases.get(m.id.as_str()) {
                words = words.strip_suffix(phrase).unwrap().trim_end();
            }
            let day = m.happens_at.unwrap_or(m.created_at).div_euclid(DAY);
            tellings
                .entry((m.user_id.clone(), words.to_string(), day))
                .or_default()
                .push(m.id.clone());
        }
        let mut expected: Vec<Vec<String>> = tellings
            .into_values()
            .filter(|ids| ids.len() > 1)
            .map(|mut ids| {
                ids.sort();
                ids
            })
            .collect();
        expected.sort();
        let mut listed: Vec<Vec<String>> = truth
            .duplicate_groups
            .iter()
            .filter(|g| g.kind == "episode")
            .map(|g| {
                let mut ids = g.memory_ids.clone();
                ids.sort();
                ids
            })
            .collect();
        listed.sort();
        assert!(!expected.is_empty(), "4000 memories repeat some episode");
        assert_eq!(listed, expected);
    }

    #[test]
    fn same_seed_same_output_other_seed_other_output() {
        let a = generate(&config(2, 300, 42)).0;
        let b = generate(&config(2, 300, 42)).0;
        let c = generate(&config(2, 300, 43)).0;
        let texts = |m: &[SynthMemory]| m.iter().map(|x| x.text.clone()).collect::<Vec<_>>();
        assert_eq!(texts(&a), texts(&b));
        assert_ne!(texts(&a), texts(&c));
    }

    #[test]
    fn placeholder_embeddings_are_unit_length_and_stable() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        placeholder_embedding(1, "m1", 384, &mut a);
        placeholder_embedding(1, "m1", 384, &mut b);
        assert_eq!(a, b);
        let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
