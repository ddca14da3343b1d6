//! The offline entity extractor: named entities (people, pets, organisations, places, tools
//! and products, projects) found in memory text by documented rules, no model. Pure: text in,
//! mentions out.
//!
//! **Names.** A name is a run of capitalised words ("Lake Bled", "VS Code"), a word with a
//! capital inside ("iPhone", "LanceDB") with any number after it ("iPhone 13"), `of`/`de`/
//! `van`... between capitalised words ("Bank of Lisbon"), and an honorific before it
//! ("Dr. Okafor"). Possessives lose their `'s`. Function words, pronouns, months, weekdays and
//! speaker labels ("User", "Assistant") are never names, and a run starting with one loses it.
//!
//! **Sentence starts.** A capital at the start of a sentence is no evidence: a word found
//! only there ("Painting is fun") is believed to be a name when a type cue marks it (a
//! relation, an honorific, a possessive before a relation word, a person cue such as a verb of
//! saying or feeling after it or a he/she later in the sentence) or when the caller knows the
//! name already: the same user's other memories use it capitalised mid-sentence, or it is an
//! existing entity (`extract` takes those as `known`).
//!
//! **Types**, from the words around the mention (first rule that fires; strong cues outvote
//! weak ones when a user's mentions of one name are combined by `vote`):
//! - person (strong): an honorific; a relation word just before ("my sister Ana", "her boss
//!   Ken") or after in apposition ("Ana, my sister"); a possessive followed by a relation or a
//!   personal word ("Ana's husband", "Ana's birthday").
//! - pet (strong): a pet word just before ("our dog Rex", "a cat named Io"), or the vet after.
//! - organization (strong): a company word as its last word ("Acme Labs", "Oslo University")
//!   or just before ("the startup Fluxo"); (weak) "works at / for", "joined", "hired by".
//! - place (strong): a place word as its first or last word ("Mount X", "X Park"); (weak) after
//!   in, from, near, visited, moved/went/flew/trip to...
//! - project (strong): "project X", "X project".
//! - tool (strong): a capital inside the word or a number after it ("iPhone 13"); (weak) after
//!   uses, using, switched to, installed, prefers, learning, bought, "written in"...; "to"
//!   after migrated, switched, upgraded...; before cluster, server, database, plugin, release...
//! - person (weak): after with, met, told, asked, called, helped, "to" without a motion verb;
//!   or followed by said, told, asked, thinks, feels, believes, values...; or the subject of a
//!   sentence that later says he, she, his, her.
//! - otherwise `other`.

use std::collections::{BTreeMap, BTreeSet};

/// The types an entity may have (`entities.entity_type`), in the order that breaks ties
/// between equally supported types.
pub const ENTITY_TYPES: &[&str] = &[
    "person",
    "place",
    "organization",
    "tool",
    "project",
    "pet",
    "concept",
    "event",
    "other",
];

/// One named entity found in one text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mention {
    /// The name as written (honorific kept: "Dr. Okafor").
    pub name: String,
    /// One of the schema's entity types; `other` when no cue says.
    pub entity_type: &'static str,
    /// Whether the type came from a strong cue (see the module's rules).
    pub strong: bool,
}

#[rustfmt::skip]
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "an", "and", "another", "any", "are", "as",
    "at", "be", "because", "been", "before", "both", "but", "by", "can", "could", "did", "do",
    "does", "during", "each", "either", "even", "every", "few", "for", "from", "had", "has",
    "have", "he", "her", "here", "hers", "him", "his", "how", "however", "i", "if", "in", "into",
    "is", "it", "its", "just", "last", "later", "let", "many", "maybe", "me", "meanwhile", "more",
    "most", "much", "my", "next", "no", "nor", "not", "now", "of", "often", "on", "once", "one",
    "only", "or", "other", "our", "ours", "overall", "perhaps", "recently", "she", "should",
    "since", "so", "some", "sometimes", "soon", "still", "such", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "though", "through", "to", "today",
    "tomorrow", "tonight", "too", "under", "unlike", "until", "upon", "us", "usually", "very",
    "was", "we", "were", "what", "when", "where", "whether", "which", "while", "who", "whom",
    "whose", "why", "will", "with", "within", "without", "would", "yes", "yesterday", "yet", "you",
    "your", "yours", "ok", "okay", "oh", "hi", "hello", "thanks", "dear",
    // Speaker labels of memory stores.
    "user", "assistant", "ai", "bot", "agent", "system",
    // Dates are not entities.
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january",
    "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "christmas", "easter",
];

const CONNECTORS: &[&str] = &["of", "de", "da", "del", "van", "von", "la", "le", "du", "y"];
const HONORIFICS: &[&str] = &["dr", "mr", "mrs", "ms", "miss", "prof", "professor", "sir"];
#[rustfmt::skip]
const RELATIONS: &[&str] = &[
    "friend", "friends", "bestie", "sister", "brother", "sibling", "mother", "mom", "mum", "mommy",
    "dad", "daddy", "father", "parent", "parents", "wife", "husband", "partner", "spouse",
    "boyfriend", "girlfriend", "fiance", "fiancee", "son", "daughter", "kid", "child", "baby",
    "boss", "manager", "colleague", "coworker", "co-worker", "cousin", "aunt", "auntie", "uncle",
    "grandma", "grandmother", "grandpa", "grandfather", "granny", "grandson", "granddaughter",
    "niece", "nephew", "neighbor", "neighbour", "roommate", "flatmate", "housemate", "mentor",
    "mentee", "teacher", "tutor", "student", "doctor", "therapist", "counselor", "counsellor",
    "coach", "trainer", "classmate", "teammate", "landlord", "client", "stepmother", "stepfather",
    "stepson", "stepdaughter", "ex",
];
/// Whether a noun names a person of someone's or an animal ("cousin", "manager", "dog"): a
/// being of its own, never the one it belongs to.
pub fn names_a_being(noun: &str) -> bool {
    let noun = noun.to_lowercase();
    RELATIONS.contains(&noun.as_str()) || PET_WORDS.contains(&noun.as_str())
}

#[rustfmt::skip]
const PERSONAL_AFTER_POSSESSIVE: &[&str] = &[
    "birthday", "wedding", "family", "kids", "children", "baby", "graduation", "funeral", "mom",
    "dad", "parents", "husband", "wife", "partner",
];
#[rustfmt::skip]
const PET_WORDS: &[&str] = &[
    "dog", "dogs", "puppy", "pup", "cat", "cats", "kitten", "kitty", "parrot", "hamster", "rabbit",
    "bunny", "horse", "pony", "turtle", "tortoise", "goldfish", "ferret", "budgie", "lizard",
    "snake", "gecko", "hedgehog", "pet", "pets", "labrador", "retriever", "terrier", "poodle",
    "beagle", "corgi", "spaniel", "husky", "tabby",
];
#[rustfmt::skip]
const ORG_LAST: &[&str] = &[
    "inc", "corp", "corporation", "llc", "ltd", "gmbh", "company", "university", "college",
    "school", "institute", "bank", "hospital", "clinic", "foundation", "group", "labs", "lab",
    "association", "society", "agency", "ministry", "council", "church", "club", "studio",
    "studios", "academy", "airlines", "airways", "systems", "technologies", "partners", "ventures",
    "capital", "consulting", "press", "media", "games", "software",
];
#[rustfmt::skip]
const ORG_BEFORE: &[&str] = &[
    "company", "startup", "firm", "employer", "agency", "nonprofit", "charity", "brand",
    "organisation", "organization", "band", "team", "club",
];
#[rustfmt::skip]
const PLACE_FIRST: &[&str] = &[
    "lake", "mount", "mt", "river", "port", "fort", "cape", "isle", "glen", "lago", "san", "santa",
    "los", "las", "new", "north", "south", "east", "west", "saint", "st",
];
#[rustfmt::skip]
const PLACE_LAST: &[&str] = &[
    "park", "street", "avenue", "road", "lane", "beach", "island", "islands", "bay", "valley",
    "city", "county", "square", "station", "airport", "bridge", "falls", "mountains", "mountain",
    "hills", "canyon", "coast", "harbor", "harbour", "forest", "gardens", "garden", "museum",
    "gallery", "cafe", "café", "restaurant", "bar", "market", "lake", "river", "district",
    "village", "town", "province", "state", "peninsula", "desert", "sea", "ocean",
];
#[rustfmt::skip]
const PLACE_BEFORE: &[&str] = &[
    "in", "from", "near", "visited", "visiting", "visit", "lives", "living", "lived", "born",
    "toured", "explored", "around", "outside", "across", "hometown",
];
#[rustfmt::skip]
const MOTION: &[&str] = &[
    "went", "go", "goes", "going", "moved", "move", "moving", "flew", "fly", "flying", "flight",
    "trip", "travelled", "traveled", "travel", "travelling", "traveling", "drove", "drive",
    "driving", "relocated", "relocating", "headed", "heading", "returned", "back", "road",
    "journey", "vacation", "holiday", "came", "commute", "commutes", "hike", "hiked",
];
#[rustfmt::skip]
const TOOL_BEFORE: &[&str] = &[
    "uses", "use", "using", "used", "switched", "switching", "installed", "installing", "prefers",
    "prefer", "preferred", "bought", "buy", "buying", "learning", "learn", "learned", "learnt",
    "migrated", "migrating", "tried", "trying", "adopted", "upgraded", "upgrading", "subscribed",
    "coding", "programming", "written", "writing", "writes", "wrote", "editor", "app", "laptop",
    "phone", "tool", "library", "framework", "language", "plays", "playing", "deployed",
    "configured", "setting",
];
#[rustfmt::skip]
const MIGRATION: &[&str] = &[
    "migrated", "migrating", "migrate", "switched", "switching", "ported", "porting", "upgraded",
    "upgrading", "converted",
];
#[rustfmt::skip]
const TOOL_AFTER: &[&str] = &[
    "cluster", "server", "database", "instance", "api", "sdk", "plugin", "extension", "config",
    "configuration", "query", "queries", "schema", "container", "image", "release", "update",
];
#[rustfmt::skip]
const TROUBLE: &[&str] = &[
    "problem", "problems", "issue", "issues", "bug", "bugs", "trouble", "error", "errors", "crash",
    "crashes", "glitch", "outage",
];
#[rustfmt::skip]
const TOOL_NOUNS: &[&str] = &[
    "app", "editor", "phone", "laptop", "computer", "language", "tool", "framework", "library",
    "database", "browser", "car", "bike", "camera", "console", "headphones", "watch", "tablet",
    "ide", "os", "software", "platform", "service", "device",
];
#[rustfmt::skip]
const CODE_WORDS: &[&str] = &[
    "written", "writing", "writes", "wrote", "code", "coded", "coding", "programs", "programming",
    "built", "building", "backend", "frontend", "scripts", "service", "server", "api", "apps",
    "notes", "down",
];
#[rustfmt::skip]
const PERSON_BEFORE: &[&str] = &[
    "with", "met", "meet", "meeting", "meets", "told", "tells", "asked", "asks", "called", "calls",
    "texted", "emailed", "helped", "helps", "thanked", "hugged", "invited", "married", "dating",
    "dated", "interviewed", "introduced", "visited", "and", "by", "for", "congratulated",
    "messaged", "phoned", "reassured", "encouraged", "supported", "comforted", "advised",
    "advises", "reminded", "reminds", "taught", "teaches", "thanks", "encourages", "supports",
];
#[rustfmt::skip]
const PERSON_AFTER: &[&str] = &[
    "said", "says", "told", "tells", "asked", "asks", "thinks", "thought", "feels", "felt",
    "wants", "wanted", "believes", "believed", "suggested", "recommended", "mentioned", "shared",
    "explained", "replied", "agreed", "admitted", "hopes", "hoped", "loves", "loved", "enjoys",
    "enjoyed", "plans", "planned", "decided", "admires", "misses", "cried", "laughed", "smiled",
    "expresses", "expressed", "values", "valued", "appreciates", "appreciated", "emphasizes",
    "emphasized", "emphasises", "emphasised", "advises", "remains", "wishes", "dislikes",
    "hates", "worries", "worried", "wonders", "remembers", "remembered", "realized", "realised",
    "struggles", "struggled", "cares", "dreams", "attends", "attended", "celebrated",
];
const ORG_VERBS: &[&str] = &["joined", "join", "joining", "hired", "employed", "interned"];
#[rustfmt::skip]
const WORK_WORDS: &[&str] = &[
    "works", "work", "working", "worked", "job", "internship", "interns",
];

/// A word of a sentence: its text (possessive `'s` removed), whether it was possessive, and
/// whether punctuation (a comma, a colon, a bracket) follows it.
#[derive(Clone, Debug)]
struct Word {
    text: String,
    lower: String,
    possessive: bool,
    break_after: bool,
}

fn in_list(list: &[&str], word: &str) -> bool {
    list.contains(&word)
}

fn is_stopword(lower: &str) -> bool {
    in_list(STOPWORDS, lower)
}

/// A word a name may consist of: a capital first, or a capital inside ("iPhone").
fn capitalised(word: &str) -> bool {
    let mut chars = word.chars();
    match chars.next() {
        Some(c) if c.is_uppercase() => true,
        Some(c) if c.is_lowercase() => chars.any(char::is_uppercase),
        _ => false,
    }
}

/// Whether the word's shape says product or tool: a capital after a lowercase letter inside
/// it ("iPhone", "LanceDB", "PostgreSQL").
fn inner_capital(word: &str) -> bool {
    let chars: Vec<char> = word.chars().collect();
    chars
        .windows(2)
        .any(|w| w[0].is_lowercase() && w[1].is_uppercase())
}

/// Splits a text into sentences of words. A period after an honorific or a single capital
/// letter ends no sentence.
fn sentences(text: &str) -> Vec<Vec<Word>> {
    let mut out: Vec<Vec<Word>> = vec![Vec::new()];
    let mut current = String::new();
    let flush = |current: &mut String, out: &mut Vec<Vec<Word>>, brk: bool| {
        if current.is_empty() {
            if brk && let Some(last) = out.last_mut().and_then(|s| s.last_mut()) {
                last.break_after = true;
            }
            return;
        }
        let mut text = current
            .trim_matches(|c: char| c == '\'' || c == '-')
            .to_string();
        current.clear();
        let mut possessive = false;
        for suffix in ["'s", "’s"] {
            if text.len() > suffix.len() && text.ends_with(suffix) {
                text.truncate(text.len() - suffix.len());
                possessive = true;
            }
        }
        if text.is_empty() {
            return;
        }
        let lower = text.to_lowercase();
        if let Some(sentence) = out.last_mut() {
            sentence.push(Word {
                text,
                lower,
                possessive,
                break_after: brk,
            });
        }
    };
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_alphanumeric() || ((c == '\'' || c == '’' || c == '-') && !current.is_empty()) {
            current.push(c);
            continue;
        }
        let ends = matches!(c, '.' | '!' | '?' | ';')
            && chars
                .get(i + 1)
                .is_none_or(|n| n.is_whitespace() || *n == '"');
        if ends {
            let lower = current.to_lowercase();
            let abbreviation = (c == '.')
                && (in_list(HONORIFICS, &lower)
                    || lower == "st"
                    || lower == "mt"
                    || (current.chars().count() == 1 && current.chars().all(char::is_uppercase)));
            if abbreviation {
                flush(&mut current, &mut out, false);
                continue;
            }
            flush(&mut current, &mut out, true);
            out.push(Vec::new());
            continue;
        }
        let brk = matches!(c, ',' | ':' | '(' | ')' | '"' | '—' | '–' | '/');
        flush(&mut current, &mut out, brk);
    }
    flush(&mut current, &mut out, false);
    out.retain(|s| !s.is_empty());
    out
}

/// The name spans of a sentence: (first word, end exclusive).
fn spans(words: &[Word]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let starts = (capitalised(&w.text) && !is_stopword(&w.lower))
            || (in_list(HONORIFICS, &w.lower)
                && capitalised(&w.text)
                && words.get(i + 1).is_some_and(|n| capitalised(&n.text)));
        if !starts {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < words.len() && !words[end - 1].break_after && !words[end - 1].possessive {
            let next = &words[end];
            if capitalised(&next.text) && !is_stopword(&next.lower) {
                end += 1;
            } else if next.text.chars().all(|c| c.is_ascii_digit()) && next.text.len() <= 4 {
                end += 1;
                break;
            } else if in_list(CONNECTORS, &next.lower)
                && !next.break_after
                && words
                    .get(end + 1)
                    .is_some_and(|n| capitalised(&n.text) && !is_stopword(&n.lower))
            {
                end += 2;
            } else {
                break;
            }
        }
        out.push((i, end));
        i = end;
    }
    out
}

/// The type the words around a span give it, and whether the cue is strong.
fn cue_type(words: &[Word], start: usize, end: usize) -> (&'static str, bool) {
    let span = &words[start..end];
    let first = &span[0].lower;
    let last = &span[span.len() - 1];
    let before = |n: usize| -> Option<&str> {
        start
            .checked_sub(n)
            .map(|i| &words[i])
            .filter(|w| !w.break_after)
            .map(|w| w.lower.as_str())
    };
    let before_any =
        |list: &[&str], n: usize| (1..=n).any(|k| before(k).is_some_and(|w| in_list(list, w)));
    let after = |n: usize| words.get(end - 1 + n).map(|w| w.lower.as_str());
    // Apposition: "Ana, my sister" / "Ana, user's brother".
    let apposition = last.break_after
        && (1..=3).any(|k| after(k).is_some_and(|w| in_list(RELATIONS, w)))
        && after(1).is_some_and(|w| {
            matches!(
                w,
                "my" | "our" | "his" | "her" | "their" | "user" | "the" | "a"
            )
        });
    if in_list(HONORIFICS, first) && span.len() > 1 {
        return ("person", true);
    }
    if before_any(PET_WORDS, 2) || before(1) == Some("named") && before_any(PET_WORDS, 4) {
        return ("pet", true);
    }
    if last.possessive && after(1).is_some_and(|w| in_list(PET_WORDS, w)) {
        // "Ana's dog": Ana is the owner, a person.
        return ("person", true);
    }
    if !last.break_after && (1..=3).any(|k| after(k) == Some("vet")) {
        return ("pet", true);
    }
    if apposition && (1..=3).any(|k| after(k).is_some_and(|w| in_list(PET_WORDS, w))) {
        return ("pet", true);
    }
    if span.len() > 1 && in_list(ORG_LAST, &last.lower) || before_any(ORG_BEFORE, 1) {
        return ("organization", true);
    }
    if span.len() > 1 && (in_list(PLACE_FIRST, first) || in_list(PLACE_LAST, &last.lower)) {
        return ("place", true);
    }
    if before_any(RELATIONS, 2) || apposition {
        return ("person", true);
    }
    if last.possessive
        && after(1).is_some_and(|w| in_list(RELATIONS, w) || in_list(PERSONAL_AFTER_POSSESSIVE, w))
    {
        return ("person", true);
    }
    if before(1) == Some("project") || (!last.break_after && after(1) == Some("project")) {
        return ("project", true);
    }
    if span.iter().any(|w| inner_capital(&w.text))
        || (span.len() > 1
            && span[span.len() - 1]
                .text
                .chars()
                .all(|c| c.is_ascii_digit()))
    {
        return ("tool", true);
    }
    let after_work = before(1).is_some_and(|w| matches!(w, "at" | "for"))
        && before(2).is_some_and(|w| in_list(WORK_WORDS, w));
    if after_work || before_any(ORG_VERBS, 2) && !before_any(RELATIONS, 3) {
        return ("organization", false);
    }
    // "a problem with X", "a bug in X": software.
    if matches!(before(1), Some("with") | Some("in"))
        && before(2).is_some_and(|w| in_list(TROUBLE, w))
    {
        return ("tool", true);
    }
    // "her editor of choice is X", "my phone is a X".
    let copula = (1..=2).any(|k| before(k).is_some_and(|w| matches!(w, "is" | "was" | "are")));
    if copula && (2..=5).any(|k| before(k).is_some_and(|w| in_list(TOOL_NOUNS, w))) {
        return ("tool", true);
    }
    // "migrated the billing service to X", "the X cluster".
    let migrated_to = before(1) == Some("to")
        && (2..=5).any(|k| before(k).is_some_and(|w| in_list(MIGRATION, w)));
    let tool_after = !last.break_after && after(1).is_some_and(|w| in_list(TOOL_AFTER, w));
    if before_any(TOOL_BEFORE, 2)
        || migrated_to
        || tool_after
        || (before(1) == Some("in")
            && (2..=4).any(|k| before(k).is_some_and(|w| in_list(CODE_WORDS, w))))
    {
        return ("tool", false);
    }
    let motion_to = matches!(before(1), Some("to") | Some("at"))
        && (2..=4).any(|k| before(k).is_some_and(|w| in_list(MOTION, w)));
    if motion_to || before_any(PLACE_BEFORE, 1) && !before_any(PERSON_BEFORE, 1) {
        return ("place", false);
    }
    // The subject of a sentence that goes on about him or her.
    let pronoun = start == 0
        && !first.ends_with("ing")
        && words[end..].iter().any(|w| {
            matches!(
                w.lower.as_str(),
                "he" | "she" | "his" | "her" | "him" | "himself" | "herself"
            )
        });
    if before_any(PERSON_BEFORE, 1)
        || before(1) == Some("to")
        || (!last.break_after && after(1).is_some_and(|w| in_list(PERSON_AFTER, w)))
        || pronoun
    {
        return ("person", false);
    }
    ("other", false)
}

/// Names written capitalised somewhere other than a sentence's first word, normalised: the
/// evidence that a sentence-initial word is a name (see the module doc).
pub fn names_mid_sentence(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for words in sentences(text) {
        for (start, end) in spans(&words) {
            if start > 0 {
                names.insert(normalise_name(&join(&words[start..end])));
            }
        }
    }
    names
}

fn join(words: &[Word]) -> String {
    let mut name = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            name.push(' ');
        }
        name.push_str(&w.text);
        if i + 1 < words.len() && in_list(HONORIFICS, &w.lower) && w.lower != "professor" {
            name.push('.');
        }
    }
    name
}

/// The named entities of one text, in order of first mention, each name once (its first
/// strong cue, else its first cue). `known` holds normalised names believed to be names even
/// at a sentence start.
pub fn extract(text: &str, known: &BTreeSet<String>) -> Vec<Mention> {
    let mut out: Vec<Mention> = Vec::new();
    for words in sentences(text) {
        for (start, end) in spans(&words) {
            let name = join(&words[start..end]);
            let (entity_type, strong) = cue_type(&words, start, end);
            let key = normalise_name(&name);
            if key.is_empty() {
                continue;
            }
            // At a sentence start: a strong cue, any person cue, knowledge, or several words.
            let believed = start > 0
                || strong
                || entity_type == "person"
                || known.contains(&key)
                || end - start > 1;
            if !believed {
                continue;
            }
            match out.iter_mut().find(|m| normalise_name(&m.name) == key) {
                Some(seen) => {
                    if (strong && !seen.strong)
                        || (seen.entity_type == "other" && entity_type != "other")
                    {
                        seen.entity_type = entity_type;
                        seen.strong = strong;
                    }
                }
                None => out.push(Mention {
                    name,
                    entity_type,
                    strong,
                }),
            }
        }
    }
    out
}

/// The key names are matched by: lowercase, honorifics and punctuation dropped, spaces
/// collapsed ("Dr. Okafor" and "okafor" match).
pub fn normalise_name(name: &str) -> String {
    let lower = name.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let start = usize::from(
        words.len() > 1
            && (in_list(HONORIFICS, words[0]) || matches!(words[0], "a" | "an" | "the")),
    );
    words[start..].join(" ")
}

/// One type for a name from all of a user's mentions of it: the type with the most strong
/// cues, else the most weak ones, else `other` (ties by the order of `ENTITY_TYPES`).
pub fn vote<'a>(mentions: impl IntoIterator<Item = &'a Mention>) -> &'static str {
    let mut tally: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
    for m in mentions {
        if m.entity_type == "other" {
            continue;
        }
        let entry = tally.entry(m.entity_type).or_default();
        if m.strong {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    let order = |t: &str| {
        ENTITY_TYPES
            .iter()
            .position(|x| *x == t)
            .unwrap_or(usize::MAX)
    };
    tally
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(order(b.0).cmp(&order(a.0))))
        .map_or("other", |(t, _)| t)
}

/// The names believed at a sentence start for one user (see the module doc): `known`, the
/// names used mid-sentence in any of the texts, and every name some text gives a cue or a
/// mid-sentence use for ("Ana's sister Mei" makes "Ana runs" a mention of Ana).
pub fn believed_names(texts: &[&str], known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut believed = known.clone();
    for text in texts {
        believed.extend(names_mid_sentence(text));
    }
    let mut more = BTreeSet::new();
    for text in texts {
        more.extend(
            extract(text, &believed)
                .iter()
                .map(|m| normalise_name(&m.name)),
        );
    }
    believed.extend(more);
    believed
}

/// The entities of one user's texts as the `entities` job reads them: names believed at a
/// sentence start when any of the texts (or `known`) uses them mid-sentence, each name's type
/// voted over all of its mentions.
pub fn read_user(texts: &[&str], known: &BTreeSet<String>) -> Vec<Vec<Mention>> {
    let believed = believed_names(texts, known);
    let mut found: Vec<Vec<Mention>> = texts.iter().map(|t| extract(t, &believed)).collect();
    let mut groups: BTreeMap<String, Vec<Mention>> = BTreeMap::new();
    for m in found.iter().flatten() {
        groups
            .entry(normalise_name(&m.name))
            .or_default()
            .push(m.clone());
    }
    let voted: BTreeMap<String, &'static str> =
        groups.iter().map(|(k, ms)| (k.clone(), vote(ms))).collect();
    for m in found.iter_mut().flatten() {
        m.entity_type = voted[&normalise_name(&m.name)];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(String, &'static str)> {
        extract(text, &BTreeSet::new())
            .into_iter()
            .map(|m| (m.name, m.entity_type))
            .collect()
    }

    fn pair(name: &str, t: &'static str) -> (String, &'static str) {
        (name.to_string(), t)
    }

    #[test]
    fn people_are_known_by_relations_honorifics_and_possessives() {
        assert_eq!(
            found("Spent the evening with my cousin Tobias and Dr. Okafor."),
            vec![pair("Tobias", "person"), pair("Dr. Okafor", "person")]
        );
        assert_eq!(
            found("We baked a cake for Ingeborg's birthday."),
            vec![pair("Ingeborg", "person")]
        );
        assert_eq!(
            found("Yusuf, my neighbour, fixed the fence."),
            vec![pair("Yusuf", "person")]
        );
    }

    #[test]
    fn pets_places_organisations_tools_and_projects_have_their_cues() {
        assert_eq!(
            found("Our beagle Pickle chewed a shoe, so we took Pickle to the vet."),
            vec![pair("Pickle", "pet")]
        );
        assert_eq!(
            found("She moved to Valparaiso after a year at Harbor Bank."),
            vec![
                pair("Valparaiso", "place"),
                pair("Harbor Bank", "organization")
            ]
        );
        assert_eq!(
            found("He works at Quillon and writes the backend in Haskell."),
            vec![pair("Quillon", "organization"), pair("Haskell", "tool")]
        );
        assert_eq!(
            found("The team replaced MySQL with PostgreSQL 16 for project Lumen."),
            vec![
                pair("MySQL", "tool"),
                pair("PostgreSQL 16", "tool"),
                pair("Lumen", "project")
            ]
        );
        assert_eq!(
            found("They hiked around Lake Tahoe in October."),
            vec![pair("Lake Tahoe", "place")]
        );
    }

    #[test]
    fn a_word_capitalised_only_at_a_sentence_start_needs_evidence() {
        // No cue, no knowledge: "Gardening" and "Zofia" at sentence starts are not believed.
        assert!(found("Gardening calms her down.").is_empty());
        assert!(found("Zofia went home early.").is_empty());
        // Known from elsewhere (another memory used it mid-sentence): believed.
        let known: BTreeSet<String> = names_mid_sentence("I had lunch with Zofia.");
        assert_eq!(
            extract("Zofia went home early.", &known)
                .into_iter()
                .map(|m| m.name)
                .collect::<Vec<_>>(),
            vec!["Zofia".to_string()]
        );
        // A cue at the start is evidence enough.
        assert_eq!(
            found("Zofia's husband is a pilot."),
            vec![pair("Zofia", "person")]
        );
    }

    #[test]
    fn dates_pronouns_and_speaker_labels_are_never_names() {
        assert!(found("User said on Monday that I should call in March.").is_empty());
        assert!(found("Yesterday They and We went out. Assistant agreed.").is_empty());
    }

    #[test]
    fn names_are_normalised_for_matching() {
        assert_eq!(normalise_name("Dr. Okafor"), "okafor");
        assert_eq!(normalise_name("  VS   Code "), "vs code");
        assert_eq!(normalise_name("Dr"), "dr");
        assert_eq!(normalise_name("the Coast Trail"), "coast trail");
        assert_eq!(normalise_name("St. Kilda"), "st kilda");
    }

    #[test]
    fn strong_cues_outvote_weak_ones_and_other_never_wins_over_a_cue() {
        let m = |t: &'static str, strong: bool| Mention {
            name: "Rook".into(),
            entity_type: t,
            strong,
        };
        assert_eq!(
            vote(&[m("person", false), m("person", false), m("pet", true)]),
            "pet"
        );
        assert_eq!(vote(&[m("other", false), m("tool", false)]), "tool");
        assert_eq!(vote(&[m("other", false)]), "other");
        assert_eq!(vote(&[m("place", false), m("person", false)]), "person");
    }
}
