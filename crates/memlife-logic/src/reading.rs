//! Reading one memory sentence the way the offline judge needs it: who it is about (the
//! entity: a name or "user", with a possessive chain such as "Lena's brother"), the values it
//! names (numbers, proper nouns), its content words (stemmed, synonyms folded), whether it
//! negates, plans or reports a change, and whether it tells of one event or of a habit. Cues
//! are matched as whole words or phrases, never inside other words ("know" holds no "now").
//! Pure and deterministic; the rules it feeds are in `llm::offline`.

use std::collections::BTreeSet;

const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "to", "of", "in", "on",
    "at", "for", "with", "and", "or", "but", "it", "its", "their", "they", "them", "has", "have",
    "had", "as", "by", "from", "that", "this", "these", "those", "about", "into", "very", "really",
    "also", "there", "her", "his", "she", "he", "him", "i", "my", "me", "you", "your", "our", "we",
    "who", "which", "so", "than", "then", "just", "too", "all", "some", "any", "more", "most",
    "other", "does", "did", "do", "will", "would", "can", "could", "should", "up", "out", "over",
    "after", "before", "since", "own", "one", "s", "user", "users", "each", "every", "when",
];

/// Words folded to one form, so paraphrases of common memory facts overlap.
const SYNONYMS: &[(&str, &str)] = &[
    ("job", "work"),
    ("employer", "work"),
    ("employ", "work"),
    ("love", "like"),
    ("enjoy", "like"),
    ("prefer", "like"),
    ("favourite", "like"),
    ("favorite", "like"),
    ("fond", "like"),
    ("base", "live"),
    ("call", "name"),
    ("ran", "run"),
    ("went", "go"),
    ("made", "make"),
    ("took", "take"),
    ("flew", "fly"),
    ("bought", "buy"),
    ("sold", "sell"),
    ("left", "leave"),
    ("kid", "child"),
    ("children", "child"),
    ("son", "child"),
    ("daughter", "child"),
    ("hate", "dislike"),
    ("coriander", "cilantro"),
    ("afraid", "fear"),
    ("scared", "fear"),
    ("study", "learn"),
    ("without", "no"),
    ("born", "birth"),
    ("birthday", "birth"),
    ("wife", "spouse"),
    ("husband", "spouse"),
    ("marry", "spouse"),
    ("reside", "live"),
    ("drive", "car"),
    ("drove", "car"),
    ("goes", "go"),
];

/// Phrases that say a value changed (whole words; matched in the newer memory).
const CHANGE_CUES: &[&str] = &[
    // Strong cues first: a sentence with "sold ... and now ..." reports a sale.
    "no longer",
    "not anymore",
    "anymore",
    "any more",
    "switched",
    "moved to",
    "moved from",
    "has moved",
    "migrated",
    "replaced",
    "instead",
    "instead of",
    "gave up",
    "quit",
    "stopped",
    "cancelled",
    "canceled",
    "sold",
    "left",
    "promoted",
    "pushed back",
    "postponed",
    "changed",
    "raised",
    "grown to",
    "has grown",
    // Weak cues (`WEAK_CUES`): need a content word in common to count.
    "is now",
    "now",
    "these days",
    "from now on",
    "turned",
    "updated",
    "update on",
];

/// Change cues that say little of what changed.
pub const WEAK_CUES: &[&str] = &[
    "now",
    "is now",
    "these days",
    "from now on",
    "turned",
    "updated",
    "update on",
];

/// "new" counts as a change only before a slot that holds one value at a time.
const NEW_SLOTS: &[&str] = &[
    "address",
    "manager",
    "boss",
    "dentist",
    "doctor",
    "phone",
    "number",
    "email",
    "employer",
    "job",
    "role",
    "title",
    "car",
    "flat",
    "apartment",
    "house",
    "home",
    "team",
    "partner",
    "name",
    "password",
    "deadline",
    "salary",
    "rent",
    "school",
    "office",
];

/// Words that put a sentence in the future or the hypothetical: no change has happened.
const PLAN_CUES: &[&str] = &[
    "plans",
    "planning",
    "plan to",
    "wants to",
    "want to",
    "would like",
    "thinking about",
    "considering",
    "open to",
    "hopes",
    "hoping",
    "going to",
    "might",
    "will",
    "keen to",
    "looking into",
    "dream",
];

/// Verbs that end a sentence's subject.
pub const AUXILIARIES: &[&str] = &[
    "is", "are", "was", "were", "has", "have", "had", "does", "did", "will", "can", "would",
    "should", "could", "might",
];

/// Capitalised words that open a sentence without being its subject.
const OPENERS: &[&str] = &[
    "these",
    "from",
    "on",
    "in",
    "at",
    "during",
    "because",
    "after",
    "before",
    "when",
    "since",
    "last",
    "every",
    "today",
    "yesterday",
    "now",
    "recently",
    "update",
    "lately",
    "since",
    "besides",
    "also",
    "for",
    "as",
    "once",
    "while",
    "despite",
    "monday",
    "mondays",
    "tuesday",
    "tuesdays",
    "wednesday",
    "wednesdays",
    "thursday",
    "thursdays",
    "friday",
    "fridays",
    "saturday",
    "saturdays",
    "sunday",
    "sundays",
];

const NEGATIONS: &[&str] = &["not", "no longer", "never", "n't"];

/// One memory sentence, read.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// Lower-case words, apostrophes kept ("lena's").
    pub words: Vec<String>,
    /// The person or thing it is about: "lena", "user", "lena's brother", "user's car".
    pub entity: String,
    /// The first part of the entity: the person ("lena", "user").
    pub owner: String,
    /// The head noun of a possessive entity ("brother" of "Lena's older brother"), if any.
    pub head: String,
    /// Numbers and proper nouns other than the owner, lower-case.
    pub values: BTreeSet<String>,
    /// Content words: stop words, entity and values removed, stemmed, synonyms folded.
    pub content: BTreeSet<String>,
    /// The content words of the entity past its owner ("favourite band" of "Maria's favourite
    /// band is Radiohead"), stemmed, when the sentence states an attribute of it (a copula
    /// follows): what it says when set beside one about the bare owner ("Maria loves Radiohead
    /// more than any other band"). Empty otherwise ("John's colleague invited him").
    pub entity_content: BTreeSet<String>,
    pub negated: bool,
    pub plan: bool,
    /// The change cue it holds, if any.
    pub change: Option<String>,
}

/// The words of a text, lower-case, apostrophes normalised.
pub fn words(text: &str) -> Vec<String> {
    text.replace('\u{2019}', "'")
        .to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_string())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Where `phrase` (one or more whole words) starts in `words`, and how many words it spans.
pub fn find_phrase(words: &[String], phrase: &str) -> Option<(usize, usize)> {
    let parts: Vec<&str> = phrase.split_whitespace().collect();
    if parts.is_empty() {
        return None;
    }
    words
        .windows(parts.len())
        .position(|w| w.iter().zip(&parts).all(|(a, b)| a == b))
        .map(|at| (at, parts.len()))
}

/// Whether `phrase` (one or more words; "n't" matches a word ending) occurs in `words`.
pub fn has_phrase(words: &[String], phrase: &str) -> bool {
    if phrase == "n't" {
        return words.iter().any(|w| w.ends_with("n't"));
    }
    find_phrase(words, phrase).is_some()
}

/// A text's content words: stop words dropped, stemmed, synonyms folded; names, numbers and
/// negations kept (a merge or a verification must not lose "not" or "Omar").
pub fn content_words(text: &str) -> BTreeSet<String> {
    words(text)
        .iter()
        .map(|w| w.trim_end_matches("'s"))
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(w))
        .map(stem)
        .filter(|w| !w.is_empty())
        .collect()
}

/// The first of `phrases` found in `words`.
pub fn first_phrase(words: &[String], phrases: &[&str]) -> Option<String> {
    phrases
        .iter()
        .find(|p| has_phrase(words, p))
        .map(|p| p.to_string())
}

/// Words that scope a statement to some occasions ("when reviewing code", "unless it is
/// urgent"): such a statement beside an unscoped one of another value is an exception to a
/// rule, not a detail of it.
const CONDITION_MARKERS: &[&str] = &[
    "when", "whenever", "while", "if", "unless", "except", "during", "only for",
];

/// Whether a reading holds a condition that scopes it to some occasions.
pub fn scoped(r: &Reading) -> bool {
    first_phrase(&r.words, CONDITION_MARKERS).is_some()
}

/// One word's content stem, or `None` for a stop word.
fn content_stem(word: &str) -> Option<String> {
    let w = word.trim_end_matches("'s");
    (!w.is_empty() && !STOP_WORDS.contains(&w))
        .then(|| stem(w))
        .filter(|s| !s.is_empty())
}

/// Two readings that describe one thing by contrasting words: a content word both say,
/// each preceded by a content word of its own ("short answers" / "detailed answers",
/// "black coffee" / "iced coffee"): two kinds of the thing, so neither completes the other.
/// Returns the two contrasting words.
pub fn contrast(a: &Reading, b: &Reading) -> Option<(String, String)> {
    let pairs = |r: &Reading| -> Vec<(String, String)> {
        r.words
            .windows(2)
            .filter_map(|w| Some((content_stem(&w[0])?, content_stem(&w[1])?)))
            .collect()
    };
    let (pa, pb) = (pairs(a), pairs(b));
    pa.iter().find_map(|(ma, head)| {
        pb.iter()
            .find(|(mb, hb)| {
                hb == head
                    && ma != mb
                    && !b.content.contains(ma)
                    && !a.content.contains(mb)
                    && !a.values.contains(ma)
                    && !b.values.contains(mb)
            })
            .map(|(mb, _)| (ma.clone(), mb.clone()))
    })
}

/// Feelings told in the past ("was worried after the breach", "felt let down by"): a
/// reaction to an event, true of its moment, not a slot a later change of value ends.
const FEELINGS: &[&str] = &[
    "worried",
    "upset",
    "annoyed",
    "frustrated",
    "angry",
    "scared",
    "afraid",
    "anxious",
    "nervous",
    "excited",
    "disappointed",
    "sad",
    "relieved",
    "concerned",
    "thrilled",
    "furious",
    "embarrassed",
    "surprised",
    "shocked",
    "proud",
    "glad",
    "happy",
];

/// Whether a reading tells a feeling of the past: "felt", or "was"/"were"/"got" before a
/// feeling word.
pub fn felt(r: &Reading) -> bool {
    r.words.iter().any(|w| w == "felt")
        || r.words.windows(2).any(|w| {
            matches!(w[0].as_str(), "was" | "were" | "got") && FEELINGS.contains(&w[1].as_str())
        })
}

/// A crude stem: possessive, plural and tense endings off; synonyms folded.
pub fn stem(word: &str) -> String {
    let w = word.trim_end_matches("'s").trim_end_matches('\'');
    let folded = |w: &str| {
        SYNONYMS
            .iter()
            .find(|(from, _)| *from == w)
            .map_or(w.to_string(), |(_, to)| to.to_string())
    };
    if SYNONYMS.iter().any(|(from, _)| *from == w) {
        let mut f = folded(w);
        if f.len() > 3 && f.ends_with('e') {
            f.pop();
        }
        return f;
    }
    let mut s = w.to_string();
    // The noun of a verb in -ate ("meditation", "relocation") reads as the verb.
    if s.len() >= 8 && s.ends_with("ation") {
        s.truncate(s.len() - 3);
    } else if s.len() >= 9 && s.ends_with("ations") {
        s.truncate(s.len() - 4);
    }
    if s.len() > 5 && s.ends_with("ing") {
        s.truncate(s.len() - 3);
    } else if s.len() > 4 && s.ends_with("ied") {
        s.truncate(s.len() - 3);
        s.push('y');
    } else if s.len() > 4 && s.ends_with("ed") {
        s.truncate(s.len() - 2);
        if s.ends_with('e') {
            s.pop();
        }
    } else if s.len() > 4 && s.ends_with("ies") {
        s.truncate(s.len() - 3);
        s.push('y');
    } else if s.len() > 3 && s.ends_with('s') && !s.ends_with("ss") && !s.ends_with("us") {
        s.pop();
    }
    // A doubled final consonant left by -ing/-ed ("runn", "stopp").
    let b = s.as_bytes();
    if b.len() > 3 && b[b.len() - 1] == b[b.len() - 2] && !b"aeiouls".contains(&b[b.len() - 1]) {
        s.pop();
    }
    let with_e = format!("{s}e");
    if SYNONYMS.iter().any(|(from, _)| *from == s) {
        s = folded(&s);
    } else if SYNONYMS.iter().any(|(from, _)| *from == with_e) {
        s = folded(&with_e);
    } else {
        s = folded(&s);
    }
    // One form with or without a final e ("name" and "nam" from "named").
    if s.len() > 3 && s.ends_with('e') {
        s.pop();
    }
    s
}

fn is_number(word: &str) -> bool {
    word.chars().any(|c| c.is_ascii_digit())
}

/// Reads one memory text.
pub fn read(text: &str) -> Reading {
    let lower = words(text);
    // Raw tokens with their case, for proper nouns.
    let raw: Vec<String> = text
        .replace('\u{2019}', "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\'').to_string())
        .filter(|w| !w.is_empty())
        .collect();
    // The entity: leading "the", then a name or "user", then any possessive chain
    // ("Lena's brother", "The user's team").
    // The entity starts at the first "user" or name, past an opening phrase ("These days
    // the user ...", "On Saturdays Aisha ..."); else at the first word.
    // The subject comes before the verb: names after the first auxiliary are objects.
    let before_verb = lower
        .iter()
        .position(|w| AUXILIARIES.contains(&w.as_str()))
        .unwrap_or(lower.len())
        .min(6);
    let mut i = lower
        .iter()
        .zip(&raw)
        .take(before_verb)
        .position(|(l, r)| {
            let bare = l.trim_end_matches("'s");
            bare == "user"
                || (r.chars().next().is_some_and(char::is_uppercase)
                    && !STOP_WORDS.contains(&bare)
                    && !OPENERS.contains(&bare))
        })
        .unwrap_or(0);
    if i == 0 && lower.first().is_some_and(|w| w == "the") && lower.len() > 1 {
        i = 1;
    }
    let mut entity_words: Vec<String> = Vec::new();
    let mut owner = String::new();
    let mut head = String::new();
    if let Some(first) = lower.get(i) {
        owner = first.trim_end_matches("'s").to_string();
        entity_words.push(first.clone());
        let mut j = i;
        // "Lena's brother works": the possessed noun phrase runs to its head noun, and ends
        // at a stop word, a name, or a word that reads as a verb (-s, -ed), three words at most.
        if first.ends_with("'s") {
            while j + 1 < lower.len() && entity_words.len() < 4 {
                let next = &lower[j + 1];
                let capital = raw
                    .get(j + 1)
                    .and_then(|w| w.chars().next())
                    .is_some_and(char::is_uppercase);
                let verb = entity_words.len() > 1
                    && ((next.ends_with('s') && !next.ends_with("ss")) || next.ends_with("ed"));
                if STOP_WORDS.contains(&next.as_str()) || capital || verb || is_number(next) {
                    break;
                }
                j += 1;
                entity_words.push(next.clone());
                head = next.trim_end_matches("'s").to_string();
            }
        }
        i = j + 1;
    }
    let entity = if head.is_empty() {
        owner.clone()
    } else {
        format!("{owner}'s {head}")
    };
    let mut values = BTreeSet::new();
    for (k, w) in raw.iter().enumerate() {
        let l = w.to_lowercase();
        let l = l.trim_end_matches("'s").to_string();
        if l == owner || k <= i && OPENERS.contains(&l.as_str()) || k == 0 {
            continue;
        }
        // A capital anywhere marks a name ("Radiohead", "iPhone", "LGBTQ").
        let capital = w.chars().any(char::is_uppercase);
        if is_number(w) || (capital && k > 0 && !STOP_WORDS.contains(&l.as_str())) {
            values.insert(l);
        }
    }
    let entity_set: BTreeSet<&str> = entity_words
        .iter()
        .map(|w| w.trim_end_matches("'s"))
        .collect();
    let content = lower
        .iter()
        .map(|w| w.trim_end_matches("'s").to_string())
        .filter(|w| {
            !STOP_WORDS.contains(&w.as_str())
                && !entity_set.contains(w.as_str())
                && !values.contains(w)
                && !NEGATIONS.contains(&w.as_str())
        })
        .map(|w| stem(&w))
        .filter(|w| !w.is_empty())
        .collect();
    // Only an attribute ("Maria's favourite band is ...", "Ben's wife Julia is ...") says
    // something with its possessed noun; an actor ("John's colleague invited him") does not.
    let copula = |k: usize| {
        lower
            .get(k)
            .is_some_and(|w| matches!(w.as_str(), "is" | "are" | "was" | "were"))
    };
    let named = raw
        .get(i)
        .and_then(|w| w.chars().next())
        .is_some_and(char::is_uppercase);
    let attribute = !head.is_empty() && (copula(i) || (named && copula(i + 1)));
    let entity_content = entity_words
        .iter()
        .skip(if attribute { 1 } else { entity_words.len() })
        .map(|w| w.trim_end_matches("'s"))
        .filter(|w| !STOP_WORDS.contains(w))
        .map(stem)
        .filter(|w| !w.is_empty())
        .collect();
    let negated = NEGATIONS.iter().any(|n| has_phrase(&lower, n));
    let plan = PLAN_CUES.iter().any(|p| has_phrase(&lower, p));
    let change = first_phrase(&lower, CHANGE_CUES).or_else(|| {
        lower
            .windows(2)
            .find(|w| w[0] == "new" && NEW_SLOTS.contains(&w[1].as_str()))
            .map(|w| format!("new {}", w[1]))
    });
    Reading {
        words: lower,
        entity,
        owner,
        head,
        values,
        content,
        entity_content,
        negated,
        plan,
        change,
    }
}

/// Jaccard similarity of two sets.
pub fn jaccard<T: Ord>(a: &BTreeSet<T>, b: &BTreeSet<T>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entity_keeps_its_possessive_chain() {
        assert_eq!(read("Lena works as a nurse.").entity, "lena");
        assert_eq!(
            read("Lena's brother works as a paramedic.").entity,
            "lena's brother"
        );
        assert_eq!(
            read("The user's monthly budget for food is 400 euros.").entity,
            "user's budget"
        );
        assert_eq!(
            read("Chen's son Leo plays the violin.").entity,
            "chen's son"
        );
        assert_eq!(read("The user's car is a Civic.").entity, "user's car");
        assert_eq!(read("The user's car is a Civic.").head, "car");
        assert_eq!(read("User is vegetarian.").owner, "user");
        assert_eq!(read("These days the user codes in Rust.").entity, "user");
        assert_eq!(
            read("On Saturdays Aisha helps at the food bank.").entity,
            "aisha"
        );
        assert_eq!(read("The project deadline is 30 June.").entity, "project");
        assert_eq!(read("The user's car is a Civic.").owner, "user");
    }

    #[test]
    fn values_are_numbers_and_proper_nouns() {
        let r = read("Kenji moved to Tokyo in April 2024.");
        assert_eq!(
            r.values,
            ["2024", "april", "tokyo"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        );
        assert!(!r.values.contains("kenji"));
    }

    #[test]
    fn cues_are_whole_words_and_plans_are_not_changes() {
        assert_eq!(read("Priya knows Rust well.").change, None);
        assert_eq!(read("She will renew her passport.").change, None);
        assert_eq!(read("Sam is now vegan.").change.as_deref(), Some("is now"));
        assert_eq!(
            read("Omar sold the Skoda and now cycles.")
                .change
                .as_deref(),
            Some("sold")
        );
        assert_eq!(read("Kai is keen to try new healthy recipes.").change, None);
        assert!(read("Kai is keen to try new healthy recipes.").plan);
        assert_eq!(
            read("The user's new address is 4 Harbour Road.")
                .change
                .as_deref(),
            Some("new address")
        );
        assert!(read("He doesn't drink.").negated);
        assert!(!read("A notebook on the table.").negated);
    }

    #[test]
    fn stems_fold_tense_number_and_synonyms() {
        assert_eq!(stem("runs"), stem("running"));
        assert_eq!(stem("ran"), "run");
        assert_eq!(stem("lives"), stem("lived"));
        assert_eq!(stem("loves"), "lik");
        assert_eq!(stem("named"), stem("called"));
        assert_eq!(stem("based"), stem("lives"));
    }

    #[test]
    fn a_scoped_statement_of_another_kind_is_an_exception() {
        let rule = read("Priya wants her tea strong.");
        let exception = read("Priya wants weak tea when it is late.");
        assert!(scoped(&exception) && !scoped(&rule));
        let (a, b) = (
            read("The user orders black coffee."),
            read("The user orders iced coffee on hot days."),
        );
        assert_eq!(contrast(&a, &b), Some((stem("black"), stem("iced"))));
        // The same kind told twice is no contrast, nor a word the other also says.
        let (a, b) = (
            read("The user prefers dark mode."),
            read("The user switches every app to dark mode at night."),
        );
        assert_eq!(contrast(&a, &b), None);
        let (a, b) = (
            read("Tom drinks green tea."),
            read("Tom drinks green tea and black tea."),
        );
        assert_eq!(contrast(&a, &b), None);
    }

    #[test]
    fn feelings_of_the_past_are_told_apart_from_states() {
        assert!(felt(&read("Nadia was anxious after the bank's outage.")));
        assert!(felt(&read("Ben felt let down by the airline.")));
        assert!(!felt(&read("Ben flies with the airline.")));
        assert!(!felt(&read("Nadia is anxious about flying.")));
    }
}
