//! Relative-date resolution: the time expressions of a memory ("yesterday", "last Friday",
//! "two weeks ago", "next month", "over the weekend", "ten years ago" ...) resolved against
//! the memory's own timestamp (its anchor: when it was said) into an interval of days with a
//! granularity. Pure: no store, no clock but the anchor.
//!
//! Rules (the anchor is a day; weeks run Monday to Sunday; every interval is inclusive):
//! - today, tonight, this morning / afternoon / evening, earlier today: the anchor day;
//!   yesterday, last night: the day before; the day before yesterday: two days before;
//!   tomorrow: the day after; the day after tomorrow: two days after.
//! - last / this / next (or past, coming) + Monday..Sunday (and "Mon", "Tues", "Fri" ...):
//!   the latest such day before the anchor, that day of the anchor's week, the first such
//!   day after the anchor.
//! - "on Friday": the latest Friday before the anchor, the next one when the text speaks of
//!   the future ("will", "'ll", "going to").
//! - weekend: "last weekend", "this past weekend", "over the weekend": the latest Saturday and
//!   Sunday that ended before the anchor day ("this weekend" said on a Saturday or Sunday is
//!   that weekend, said on a weekday the coming one); "N weekends ago": N weekends before.
//! - week: "last week" / "the past week": the seven days before the anchor; "this week": the
//!   anchor's week (Monday to Sunday); "next week": the week after it; "N weeks ago": the seven
//!   days ending N weeks before the anchor.
//! - month and year: last / this / next month or year, "N months / years ago": that calendar
//!   month or year; "a year ago" (about twelve months back) is told to the month, twelve
//!   months before the anchor's. "last June" is the latest June before the anchor's month,
//!   "next June" the first after it, "this June" the anchor year's; "June last year" (this,
//!   next year) that month of the year before (the anchor's, the next).
//! - "N days ago" (N a number or a word up to twenty, "a", "a couple of"): that day.
//! - "just" before a verb in the past ("just got", "just launched"), "currently", "right
//!   now": the anchor day (what was just done or is going on was told the day it happened).
//! - "for N months / years now", "N years now": the month or year N before the anchor (when a
//!   state that still holds began).
//! - seasons (northern): "last summer" is the latest summer that ended before the anchor,
//!   "this summer" the anchor's year's, "next summer" the first after; "the summer of 2022".
//!   Summer is June to August, autumn (fall) September to November, winter December to
//!   February, spring March to May.
//! - "on the 15th": that day of the anchor's month (of the month before when the anchor's
//!   day is earlier).
//! - Absolute dates: "on 3 May", "May 3rd", "3 May 2024", "in May 2023", "in 2016": that day,
//!   month or year (a day or month without a year takes the anchor's year).
//!
//! Vague expressions ("recently", "a few days ago", "the other day", "a while ago",
//! "lately") resolve to nothing: an answer from them would be a guess.

use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// How precise a resolution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    Day,
    Weekend,
    Week,
    Month,
    Year,
}

/// One time expression of a text, resolved.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Resolution {
    /// The words as they appear (lower case).
    pub expression: String,
    /// Where they start in the text's word list (for picking the expression nearest a topic).
    pub word: usize,
    pub start: NaiveDate,
    /// Inclusive.
    pub end: NaiveDate,
    pub granularity: Granularity,
    /// Implied by the tense rather than said ("just got", "currently"): an explicit
    /// expression about the same thing is the better answer.
    pub implied: bool,
}

impl Resolution {
    pub fn days(&self) -> i64 {
        (self.end - self.start).num_days() + 1
    }

    /// The interval as people write it: "2023-05-07", "2023-05-01..2023-05-07", "2023-05",
    /// "2023".
    pub fn label(&self) -> String {
        match self.granularity {
            Granularity::Day => self.start.to_string(),
            Granularity::Month => self.start.format("%Y-%m").to_string(),
            Granularity::Year => self.start.format("%Y").to_string(),
            _ => format!("{}..{}", self.start, self.end),
        }
    }
}

const WEEKDAYS: &[(&str, Weekday)] = &[
    ("monday", Weekday::Mon),
    ("mon", Weekday::Mon),
    ("tuesday", Weekday::Tue),
    ("tues", Weekday::Tue),
    ("tue", Weekday::Tue),
    ("wednesday", Weekday::Wed),
    ("wed", Weekday::Wed),
    ("thursday", Weekday::Thu),
    ("thurs", Weekday::Thu),
    ("thu", Weekday::Thu),
    ("friday", Weekday::Fri),
    ("fri", Weekday::Fri),
    ("saturday", Weekday::Sat),
    ("sat", Weekday::Sat),
    ("sunday", Weekday::Sun),
    ("sun", Weekday::Sun),
];

const MONTHS: &[(&str, u32)] = &[
    ("january", 1),
    ("jan", 1),
    ("february", 2),
    ("feb", 2),
    ("march", 3),
    ("mar", 3),
    ("april", 4),
    ("apr", 4),
    ("may", 5),
    ("june", 6),
    ("jun", 6),
    ("july", 7),
    ("jul", 7),
    ("august", 8),
    ("aug", 8),
    ("september", 9),
    ("sept", 9),
    ("sep", 9),
    ("october", 10),
    ("oct", 10),
    ("november", 11),
    ("nov", 11),
    ("december", 12),
    ("dec", 12),
];

const NUMBERS: &[(&str, i64)] = &[
    ("a", 1),
    ("an", 1),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("eleven", 11),
    ("twelve", 12),
    ("thirteen", 13),
    ("fourteen", 14),
    ("fifteen", 15),
    ("sixteen", 16),
    ("seventeen", 17),
    ("eighteen", 18),
    ("nineteen", 19),
    ("twenty", 20),
];

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches('\'').to_string())
        .collect()
}

fn weekday(word: &str) -> Option<Weekday> {
    WEEKDAYS.iter().find(|(w, _)| *w == word).map(|(_, d)| *d)
}

fn month(word: &str) -> Option<u32> {
    MONTHS.iter().find(|(w, _)| *w == word).map(|(_, m)| *m)
}

fn number(word: &str) -> Option<i64> {
    word.parse::<i64>()
        .ok()
        .filter(|n| (1..=100).contains(n))
        .or_else(|| NUMBERS.iter().find(|(w, _)| *w == word).map(|(_, n)| *n))
}

/// "3", "3rd", "21st" as a day of the month.
fn day_of_month(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return None;
    }
    digits.parse::<u32>().ok().filter(|d| (1..=31).contains(d))
}

fn year(word: &str) -> Option<i32> {
    (word.len() == 4)
        .then(|| word.parse::<i32>().ok())
        .flatten()
        .filter(|y| (1900..=2100).contains(y))
}

fn day(d: NaiveDate) -> (NaiveDate, NaiveDate, Granularity) {
    (d, d, Granularity::Day)
}

fn month_of(y: i32, m: u32) -> Option<(NaiveDate, NaiveDate, Granularity)> {
    let start = NaiveDate::from_ymd_opt(y, m, 1)?;
    let next = if m == 12 {
        NaiveDate::from_ymd_opt(y + 1, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(y, m + 1, 1)?
    };
    Some((start, next - Duration::days(1), Granularity::Month))
}

fn shift_month(d: NaiveDate, by: i64) -> (i32, u32) {
    let total = d.year() as i64 * 12 + d.month0() as i64 + by;
    (
        (total.div_euclid(12)) as i32,
        (total.rem_euclid(12) + 1) as u32,
    )
}

fn year_of(y: i32) -> Option<(NaiveDate, NaiveDate, Granularity)> {
    Some((
        NaiveDate::from_ymd_opt(y, 1, 1)?,
        NaiveDate::from_ymd_opt(y, 12, 31)?,
        Granularity::Year,
    ))
}

fn monday_of(d: NaiveDate) -> NaiveDate {
    d - Duration::days(d.weekday().num_days_from_monday() as i64)
}

/// The Saturday and Sunday of the latest weekend that ended before `anchor`, `back - 1`
/// weekends further back.
fn weekend_before(anchor: NaiveDate, back: i64) -> (NaiveDate, NaiveDate, Granularity) {
    let mut sunday = anchor - Duration::days(1);
    while sunday.weekday() != Weekday::Sun {
        sunday -= Duration::days(1);
    }
    let sunday = sunday - Duration::weeks(back - 1);
    (sunday - Duration::days(1), sunday, Granularity::Weekend)
}

/// The latest `wd` strictly before `anchor`.
fn last_weekday(anchor: NaiveDate, wd: Weekday) -> NaiveDate {
    let mut d = anchor - Duration::days(1);
    while d.weekday() != wd {
        d -= Duration::days(1);
    }
    d
}

fn next_weekday(anchor: NaiveDate, wd: Weekday) -> NaiveDate {
    let mut d = anchor + Duration::days(1);
    while d.weekday() != wd {
        d += Duration::days(1);
    }
    d
}

/// Words that read as a verb in the past after "just" ("just got", "just launched").
fn past_verb(word: &str) -> bool {
    // Verbs of wanting and saying are not events ("just wanted to tell you").
    const NOT_EVENTS: &[&str] = &[
        "wanted", "needed", "wondered", "hoped", "thought", "meant", "called", "texted", "checked",
    ];
    if NOT_EVENTS.contains(&word) {
        return false;
    }
    const IRREGULAR: &[&str] = &[
        "got", "left", "went", "made", "had", "bought", "began", "won", "came", "saw", "took",
        "met", "gave", "found", "ran", "sold", "wrote", "read", "heard", "did", "moved", "became",
    ];
    (word.len() > 4 && word.ends_with("ed")) || IRREGULAR.contains(&word)
}

/// The months of `season` in `year` (winter: December of `year` to February of the next).
fn season_of(season: &str, year: i32) -> Option<(NaiveDate, NaiveDate, Granularity)> {
    let (start, months) = match season {
        "spring" => ((year, 3), 3),
        "summer" => ((year, 6), 3),
        "autumn" | "fall" => ((year, 9), 3),
        "winter" => ((year, 12), 3),
        _ => return None,
    };
    let first = NaiveDate::from_ymd_opt(start.0, start.1, 1)?;
    let (y, m) = shift_month(first, months);
    let end = NaiveDate::from_ymd_opt(y, m, 1)? - Duration::days(1);
    Some((first, end, Granularity::Month))
}

/// The latest `season` that ended before `anchor`, `back` seasons of that name back.
fn season_before(
    season: &str,
    anchor: NaiveDate,
    back: i32,
) -> Option<(NaiveDate, NaiveDate, Granularity)> {
    let mut year = anchor.year();
    loop {
        let (s, e, g) = season_of(season, year)?;
        if e < anchor {
            return season_of(season, year - (back - 1)).or(Some((s, e, g)));
        }
        year -= 1;
    }
}

fn is(w: &[String], i: usize, word: &str) -> bool {
    w.get(i).is_some_and(|x| x == word)
}

/// The quantity before a unit at `i` ("two weeks", "a couple of days"): (value, first word).
fn quantity(w: &[String], i: usize) -> Option<(i64, usize)> {
    if i >= 3 && is(w, i - 1, "of") && is(w, i - 2, "couple") {
        return Some((2, i - 3 + usize::from(!is(w, i - 3, "a"))));
    }
    if i >= 1
        && let Some(n) = number(&w[i - 1])
    {
        return Some((n, i - 1));
    }
    None
}

/// Every time expression of `text`, resolved against the day it was said (`anchor`), in
/// the order they appear.
pub fn resolve(text: &str, anchor: NaiveDate) -> Vec<Resolution> {
    let w = words(text);
    let mut out: Vec<Resolution> = Vec::new();
    let mut taken = vec![false; w.len()];
    let mut push = |out: &mut Vec<Resolution>,
                    from: usize,
                    to: usize,
                    r: Option<(NaiveDate, NaiveDate, Granularity)>| {
        if let Some((start, end, granularity)) = r
            && !taken[from..to].iter().any(|t| *t)
        {
            for t in &mut taken[from..to] {
                *t = true;
            }
            let expression = w[from..to].join(" ");
            let implied = matches!(w[from].as_str(), "just" | "currently" | "right");
            out.push(Resolution {
                expression,
                word: from,
                start,
                end,
                granularity,
                implied,
            });
        }
    };
    // Longest phrases first, so "the day before yesterday" is not read as "yesterday".
    for i in 0..w.len() {
        if is(&w, i, "day") && is(&w, i + 1, "before") && is(&w, i + 2, "yesterday") {
            let from = if i >= 1 && is(&w, i - 1, "the") {
                i - 1
            } else {
                i
            };
            push(&mut out, from, i + 3, Some(day(anchor - Duration::days(2))));
        }
        if is(&w, i, "day") && is(&w, i + 1, "after") && is(&w, i + 2, "tomorrow") {
            let from = if i >= 1 && is(&w, i - 1, "the") {
                i - 1
            } else {
                i
            };
            push(&mut out, from, i + 3, Some(day(anchor + Duration::days(2))));
        }
    }
    for i in 0..w.len() {
        let word = w[i].as_str();
        // "N days / weeks / weekends / months / years ago"
        if is(&w, i + 1, "ago") {
            let unit = word.trim_end_matches('s');
            if let Some((n, from)) = quantity(&w, i) {
                let r = match unit {
                    "day" => Some(day(anchor - Duration::days(n))),
                    "week" => {
                        let end = anchor - Duration::weeks(n - 1) - Duration::days(1);
                        Some((end - Duration::days(6), end, Granularity::Week))
                    }
                    "weekend" => Some(weekend_before(anchor, n)),
                    "month" => {
                        let (y, m) = shift_month(anchor, -n);
                        month_of(y, m)
                    }
                    // "a year ago" is about twelve months back, told to the month; more
                    // years are told to the year.
                    "year" if n == 1 => {
                        let (y, m) = shift_month(anchor, -12);
                        month_of(y, m)
                    }
                    "year" => year_of(anchor.year() - n as i32),
                    _ => None,
                };
                // "about a year ago": the hedge is part of the expression.
                let from = if from >= 1 && matches!(w[from - 1].as_str(), "about" | "around") {
                    from - 1
                } else {
                    from
                };
                push(&mut out, from, i + 2, r);
            }
            continue;
        }
        // last / this / next / past + unit or weekday
        let relative = matches!(word, "last" | "this" | "next" | "past" | "coming");
        if relative {
            let mut j = i + 1;
            // "this past weekend", "this coming Friday"
            if word == "this" && (is(&w, j, "past") || is(&w, j, "coming")) {
                j += 1;
            }
            let Some(target) = w.get(j) else { continue };
            let past = word == "last" || word == "past" || is(&w, i + 1, "past");
            let next = word == "next" || word == "coming" || is(&w, i + 1, "coming");
            // ("this may" is a modal verb more often than a month.)
            let r = if let Some(m) = month(target).filter(|_| target.len() > 3) {
                // "last June": the latest June before the anchor's month; "next June": the
                // first after it; "this June": the anchor's year's.
                let back = i64::from(anchor.month()) - i64::from(m);
                let by = if past {
                    -(if back > 0 { back } else { back + 12 })
                } else if next {
                    let ahead = -back;
                    if ahead > 0 { ahead } else { ahead + 12 }
                } else {
                    -back
                };
                let (y, m) = shift_month(anchor, by);
                month_of(y, m)
            } else if let Some(wd) = weekday(target) {
                Some(day(if past {
                    last_weekday(anchor, wd)
                } else if next {
                    next_weekday(anchor, wd)
                } else {
                    monday_of(anchor) + Duration::days(wd.num_days_from_monday() as i64)
                }))
            } else {
                match target.as_str() {
                    "night" if past => Some(day(anchor - Duration::days(1))),
                    "night" => Some(day(anchor)),
                    "morning" | "afternoon" | "evening" if word == "this" => Some(day(anchor)),
                    "weekend" if past => Some(weekend_before(anchor, 1)),
                    "weekend" if next => {
                        let (s, e, g) = weekend_before(anchor, 1);
                        Some((s + Duration::weeks(1), e + Duration::weeks(1), g))
                    }
                    "weekend" => {
                        // Said on the weekend: this one; on a weekday: the coming one.
                        let wd = anchor.weekday();
                        let sat = if wd == Weekday::Sat {
                            anchor
                        } else if wd == Weekday::Sun {
                            anchor - Duration::days(1)
                        } else {
                            next_weekday(anchor, Weekday::Sat)
                        };
                        Some((sat, sat + Duration::days(1), Granularity::Weekend))
                    }
                    "week" if past => {
                        let end = anchor - Duration::days(1);
                        Some((end - Duration::days(6), end, Granularity::Week))
                    }
                    "week" if next => {
                        let start = monday_of(anchor) + Duration::weeks(1);
                        Some((start, start + Duration::days(6), Granularity::Week))
                    }
                    "week" => {
                        let start = monday_of(anchor);
                        Some((start, start + Duration::days(6), Granularity::Week))
                    }
                    "month" => {
                        let by = if past {
                            -1
                        } else if next {
                            1
                        } else {
                            0
                        };
                        let (y, m) = shift_month(anchor, by);
                        month_of(y, m)
                    }
                    "year" => year_of(
                        anchor.year()
                            + if past {
                                -1
                            } else if next {
                                1
                            } else {
                                0
                            },
                    ),
                    "spring" | "summer" | "autumn" | "fall" | "winter" if past => {
                        season_before(target, anchor, 1)
                    }
                    "spring" | "summer" | "autumn" | "fall" | "winter" if next => {
                        season_of(target, anchor.year()).and_then(|(_, e, _)| {
                            season_of(target, anchor.year() + i32::from(e < anchor))
                        })
                    }
                    "spring" | "summer" | "autumn" | "fall" | "winter" => {
                        season_of(target, anchor.year())
                    }
                    _ => None,
                }
            };
            push(&mut out, i, j + 1, r);
            continue;
        }
        // "for four months now", "seven years now": when a state that still holds began.
        if is(&w, i + 1, "now") && matches!(word.trim_end_matches('s'), "month" | "year") {
            if let Some((n, from)) = quantity(&w, i) {
                let from = if from >= 2 && is(&w, from - 1, "about") && is(&w, from - 2, "for") {
                    from - 2
                } else if from >= 1 && matches!(w[from - 1].as_str(), "for" | "about") {
                    from - 1
                } else {
                    from
                };
                let r = if word.starts_with("month") {
                    let (y, m) = shift_month(anchor, -n);
                    month_of(y, m)
                } else {
                    year_of(anchor.year() - n as i32)
                };
                push(&mut out, from, i + 2, r);
            }
            continue;
        }
        // "the summer of 2022"
        if matches!(word, "spring" | "summer" | "autumn" | "fall" | "winter")
            && is(&w, i + 1, "of")
            && let Some(y) = w.get(i + 2).and_then(|x| year(x))
        {
            push(&mut out, i, i + 3, season_of(word, y));
            continue;
        }
        // "on the 15th"
        if word == "the"
            && i >= 1
            && is(&w, i - 1, "on")
            && let Some(n) = w
                .get(i + 1)
                .filter(|x| x.len() > 2)
                .and_then(|x| day_of_month(x))
            && !w
                .get(i + 2)
                .is_some_and(|x| month(x).is_some() || x == "of")
        {
            let this = NaiveDate::from_ymd_opt(anchor.year(), anchor.month(), n);
            let d = match this {
                Some(d) if d <= anchor => Some(d),
                _ => {
                    let (y, m) = shift_month(anchor, -1);
                    NaiveDate::from_ymd_opt(y, m, n)
                }
            };
            push(&mut out, i - 1, i + 2, d.map(day));
            continue;
        }
        // "on Friday": the latest Friday before the anchor, or the next one when the
        // sentence speaks of the future ("will", "'ll", "going to").
        if word == "on"
            && let Some(wd) = w.get(i + 1).and_then(|x| weekday(x))
            && w[i + 1].len() > 3
        {
            let future = w.iter().any(|x| x == "will" || x.ends_with("'ll"))
                || w.windows(2).any(|p| p[0] == "going" && p[1] == "to");
            let d = if future {
                next_weekday(anchor, wd)
            } else {
                last_weekday(anchor, wd)
            };
            push(&mut out, i, i + 2, Some(day(d)));
            continue;
        }
        match word {
            "just" if w.get(i + 1).is_some_and(|x| past_verb(x)) => {
                push(&mut out, i, i + 2, Some(day(anchor)))
            }
            "currently" => push(&mut out, i, i + 1, Some(day(anchor))),
            "right" if is(&w, i + 1, "now") => push(&mut out, i, i + 2, Some(day(anchor))),
            "today" | "tonight" => push(&mut out, i, i + 1, Some(day(anchor))),
            "yesterday" => push(&mut out, i, i + 1, Some(day(anchor - Duration::days(1)))),
            "tomorrow" => push(&mut out, i, i + 1, Some(day(anchor + Duration::days(1)))),
            "weekend" if i >= 2 && is(&w, i - 1, "the") && is(&w, i - 2, "over") => {
                push(&mut out, i - 2, i + 1, Some(weekend_before(anchor, 1)))
            }
            _ => {}
        }
        // Absolute dates: "3 May [2024]", "May 3rd[, 2024]", "May 2023", "in 2016".
        if let Some(d) = day_of_month(word)
            && let Some(m) = w.get(i + 1).and_then(|x| month(x))
        {
            let (y, to) = match w.get(i + 2).and_then(|x| year(x)) {
                Some(y) => (y, i + 3),
                None => (anchor.year(), i + 2),
            };
            push(&mut out, i, to, NaiveDate::from_ymd_opt(y, m, d).map(day));
            continue;
        }
        if let Some(m) = month(word).filter(|_| word.len() > 3 || word == "may") {
            // "may" is a month only beside a day or a year.
            if let Some(d) = w.get(i + 1).and_then(|x| day_of_month(x)) {
                let (y, to) = match w.get(i + 2).and_then(|x| year(x)) {
                    Some(y) => (y, i + 3),
                    None => (anchor.year(), i + 2),
                };
                push(&mut out, i, to, NaiveDate::from_ymd_opt(y, m, d).map(day));
            } else if let Some(y) = w.get(i + 1).and_then(|x| year(x)) {
                push(&mut out, i, i + 2, month_of(y, m));
            } else if is(&w, i + 2, "year")
                && let Some(by) = w.get(i + 1).and_then(|x| match x.as_str() {
                    "last" => Some(-1),
                    "this" => Some(0),
                    "next" => Some(1),
                    _ => None,
                })
            {
                // "June last year", "in March next year"
                push(&mut out, i, i + 3, month_of(anchor.year() + by, m));
            } else if word != "may"
                && i >= 1
                && matches!(w[i - 1].as_str(), "in" | "since" | "during")
            {
                push(&mut out, i, i + 1, month_of(anchor.year(), m));
            }
            continue;
        }
        if let Some(y) = year(word)
            && i >= 1
            && matches!(w[i - 1].as_str(), "in" | "since" | "during" | "of")
        {
            push(&mut out, i, i + 1, year_of(y));
        }
    }
    out.sort_by_key(|r| r.word);
    out
}

/// The day a memory's text places its event on, when it says one exactly: one explicit
/// expression of day precision ("yesterday", "last Friday", "on 3 May"), none other. Two
/// expressions, a week, a month or a tense alone ("just got") leave it unknown.
pub fn event_day(text: &str, said_on: NaiveDate) -> Option<NaiveDate> {
    let found: Vec<Resolution> = resolve(text, said_on)
        .into_iter()
        .filter(|r| !r.implied)
        .collect();
    match found.as_slice() {
        [one] if one.granularity == Granularity::Day => Some(one.start),
        _ => None,
    }
}

/// Whether a resolution answers a question whose true answer is `gold`: it lies within the
/// gold interval (as precise or more), or the two overlap on at least half of their union.
pub fn matches(resolved: (NaiveDate, NaiveDate), gold: (NaiveDate, NaiveDate)) -> bool {
    let (rs, re) = resolved;
    let (gs, ge) = gold;
    if rs >= gs && re <= ge {
        return true;
    }
    let inter = (re.min(ge) - rs.max(gs)).num_days() + 1;
    let union = (re.max(ge) - rs.min(gs)).num_days() + 1;
    inter > 0 && inter * 2 >= union
}

/// A gold answer as an interval: "7 May 2023", "19 January, 2023", "May 2023", "2022", "The
/// week before 9 June 2023", "The Sunday before 25 May 2023", "The weekend before 17 July
/// 2023", "two weekends before 17 July 2023", "The week of 23 August 2023", "10 years ago"
/// (against `anchor`, the day the evidence was said). `None` for durations ("4 years") and
/// vague answers.
pub fn parse_gold(answer: &str, anchor: NaiveDate) -> Option<(NaiveDate, NaiveDate)> {
    // Gold answers are typed by hand: "21Janury, 2022", "23January", "Januarty 5".
    let chars: Vec<char> = answer.chars().collect();
    let mut spaced = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let after_digit = i > 0 && chars[i - 1].is_ascii_digit() && c.is_alphabetic();
        let suffix: String = chars[i..].iter().take(2).collect::<String>().to_lowercase();
        let ordinal = matches!(suffix.as_str(), "st" | "nd" | "rd" | "th")
            && !chars.get(i + 2).is_some_and(|x| x.is_alphabetic());
        if after_digit && !ordinal {
            spaced.push(' ');
        }
        spaced.push(c);
    }
    let w: Vec<String> = words(&spaced)
        .into_iter()
        .map(|x| {
            let ordinal = day_of_month(&x).is_some();
            if ordinal || month(&x).is_some() || x.len() < 5 {
                return x;
            }
            // A misspelt month keeps its first three letters and most of its length.
            MONTHS
                .iter()
                .find(|(m, _)| m.len() > 3 && x.starts_with(&m[..3]) && x.len() + 2 >= m.len())
                .map_or(x.clone(), |(m, _)| m.to_string())
        })
        .collect();
    let answer = w.join(" ");
    let answer = answer.as_str();
    // A date inside the answer: day month [year] | month day [year] | month year | year.
    let date_in = |from: usize| -> Option<(NaiveDate, NaiveDate, Granularity)> {
        let rest = w[from..].join(" ");
        let found = resolve(&format!("on {rest}"), anchor);
        if let Some(r) = found.first() {
            return Some((r.start, r.end, r.granularity));
        }
        let found = resolve(&format!("in {rest}"), anchor);
        found.first().map(|r| (r.start, r.end, r.granularity))
    };
    if w.is_empty() {
        return None;
    }
    if let Some(i) = w.iter().position(|x| x == "before") {
        let (d, _, _) = date_in(i + 1)?;
        let head: Vec<&str> = w[..i].iter().map(String::as_str).collect();
        let n = head
            .iter()
            .find_map(|x| number(x).filter(|_| *x != "a"))
            .unwrap_or(1);
        return match head.last().copied() {
            Some("week") => Some((d - Duration::days(7), d - Duration::days(1))),
            Some("weeks") => Some((d - Duration::days(7 * n), d - Duration::days(7 * n - 6))),
            Some("weekend" | "weekends") => {
                let (s, e, _) = weekend_before(d, n);
                Some((s, e))
            }
            Some(x) => weekday(x).map(|wd| {
                let day = last_weekday(d, wd);
                (day, day)
            }),
            None => None,
        };
    }
    // "the weekend after D", "the weekend of D"
    if let Some(i) = w.iter().position(|x| x == "weekend")
        && (is(&w, i + 1, "after") || is(&w, i + 1, "of"))
    {
        let (d, _, _) = date_in(i + 2)?;
        let saturday = if is(&w, i + 1, "after") {
            next_weekday(d, Weekday::Sat)
        } else {
            // The weekend of a Saturday or Sunday is its own; of a weekday, the one after.
            let sunday = d + Duration::days((7 - d.weekday().num_days_from_sunday() as i64) % 7);
            sunday - Duration::days(1)
        };
        return Some((saturday, saturday + Duration::days(1)));
    }
    // "summer 2023"
    if let (Some(season), Some(y)) = (w.first(), w.get(1).and_then(|x| year(x)))
        && let Some((s, e, _)) = season_of(season, y)
    {
        return Some((s, e));
    }
    if is(&w, 0, "the") && is(&w, 1, "week") && is(&w, 2, "of") {
        let (d, _, _) = date_in(3)?;
        let start = monday_of(d);
        return Some((start, start + Duration::days(6)));
    }
    if w.last().is_some_and(|x| x == "ago") {
        return resolve(answer, anchor).first().map(|r| (r.start, r.end));
    }
    let (s, e, _) = date_in(0)?;
    Some((s, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn one(text: &str, anchor: &str) -> (String, String, Granularity) {
        let r = resolve(text, d(anchor));
        assert_eq!(r.len(), 1, "{text}: {r:?}");
        (
            r[0].start.to_string(),
            r[0].end.to_string(),
            r[0].granularity,
        )
    }

    #[test]
    fn days_relative_to_the_anchor() {
        // 2023-05-08 is a Monday.
        let a = "2023-05-08";
        assert_eq!(
            one("I went to a support group yesterday", a).0,
            "2023-05-07"
        );
        assert_eq!(one("We met the day before yesterday", a).0, "2023-05-06");
        assert_eq!(one("Last night was amazing", a).0, "2023-05-07");
        assert_eq!(one("I'm seeing her today", a).0, "2023-05-08");
        assert_eq!(one("two days ago I fell", a).0, "2023-05-06");
        assert_eq!(one("a couple of days ago", a).0, "2023-05-06");
        assert_eq!(one("The opening night is tomorrow", a).0, "2023-05-09");
    }

    #[test]
    fn months_told_relative_to_the_anchor_and_a_year_ago_to_the_month() {
        // Said on 2023-08-03.
        let a = "2023-08-03";
        let (s, e, g) = one("I started volunteering here about a year ago", a);
        assert_eq!(
            (s.as_str(), e.as_str(), g),
            ("2022-08-01", "2022-08-31", Granularity::Month)
        );
        assert_eq!(one("we moved two years ago", a).0, "2021-01-01");
        assert_eq!(one("We went there last June", a).0, "2023-06-01");
        assert_eq!(one("We went there last September", a).0, "2022-09-01");
        assert_eq!(one("the wedding is next June", a).0, "2024-06-01");
        assert_eq!(one("the trip next September", a).0, "2023-09-01");
        let (s, e, _) = one("I ran my first marathon in June last year", a);
        assert_eq!((s.as_str(), e.as_str()), ("2022-06-01", "2022-06-30"));
        assert_eq!(one("Maybe in March next year", a).0, "2024-03-01");
        // "this may" is a modal verb.
        assert!(resolve("this may take a while", d(a)).is_empty());
    }

    #[test]
    fn weekdays_weekends_and_weeks() {
        // 2023-07-15 is a Saturday.
        let a = "2023-07-15";
        assert_eq!(
            one("Last Friday I went to a council meeting", a).0,
            "2023-07-14"
        );
        assert_eq!(
            one("Last Fri I took my kids to a workshop", a).0,
            "2023-07-14"
        );
        // Said on a Friday, "last Friday" is a week before.
        assert_eq!(one("last Friday", "2023-07-14").0, "2023-07-07");
        // 2023-07-17 is a Monday.
        let (s, e, g) = one("Last weekend I joined a mentorship program", "2023-07-17");
        assert_eq!(
            (s.as_str(), e.as_str(), g),
            ("2023-07-15", "2023-07-16", Granularity::Weekend)
        );
        let (s, e, _) = one("we went camping two weekends ago", "2023-07-17");
        assert_eq!((s.as_str(), e.as_str()), ("2023-07-08", "2023-07-09"));
        assert_eq!(one("this past weekend", "2023-10-20").0, "2023-10-14");
        assert_eq!(
            one("I had a quiet time over the weekend", "2023-07-17").0,
            "2023-07-15"
        );
        let (s, e, g) = one("I went hiking last week", "2023-08-25");
        assert_eq!(
            (s.as_str(), e.as_str(), g),
            ("2023-08-18", "2023-08-24", Granularity::Week)
        );
        let (s, e, _) = one("Guess what I did this week?", "2023-08-23");
        assert_eq!((s.as_str(), e.as_str()), ("2023-08-21", "2023-08-27"));
    }

    #[test]
    fn months_years_and_absolute_dates() {
        let a = "2023-07-03";
        let (s, e, g) = one("I'm going to a conference this month", a);
        assert_eq!(
            (s.as_str(), e.as_str(), g),
            ("2023-07-01", "2023-07-31", Granularity::Month)
        );
        assert_eq!(
            one("a talent show next month", "2023-08-28").0,
            "2023-09-01"
        );
        assert_eq!(
            one("Last month I got a setback", "2023-10-13").0,
            "2023-09-01"
        );
        let (s, _, g) = one(
            "A friend made it for my 18th birthday ten years ago",
            "2023-06-27",
        );
        assert_eq!((s.as_str(), g), ("2013-01-01", Granularity::Year));
        assert_eq!(
            one("We had a blast last year at the fest", "2023-08-17").0,
            "2022-01-01"
        );
        assert_eq!(one("The fair is on 3 May", a).0, "2023-05-03");
        assert_eq!(one("It opened on May 3rd, 2024", a).0, "2024-05-03");
        assert_eq!(one("I moved here in 2016", a).0, "2016-01-01");
        assert_eq!(one("since March", a).0, "2023-03-01");
        // "may" is a verb unless a day or a year stands beside it.
        assert!(resolve("I may go", d(a)).is_empty());
        assert_eq!(one("I just launched an ad campaign", a).0, "2023-07-03");
        assert_eq!(one("I'm currently reading a book", a).0, "2023-07-03");
        assert!(resolve("It is just great", d(a)).is_empty());
        assert!(resolve("Just wanted to give you the heads up", d(a)).is_empty());
        let both = resolve("I just joined a new group last Tues", d("2023-07-20"));
        assert!(both[0].implied && !both[1].implied, "{both:?}");
        let (s, _, g) = one("I've been playing for about four months now", "2023-12-06");
        assert_eq!((s.as_str(), g), ("2023-08-01", Granularity::Month));
        assert_eq!(
            one("I've had them for 3 years now", "2022-01-23").0,
            "2019-01-01"
        );
        // Said in August, "last summer" is the summer before.
        let (s, e, _) = one("our camping trip last summer", "2023-08-11");
        assert_eq!((s.as_str(), e.as_str()), ("2022-06-01", "2022-08-31"));
        assert_eq!(one("last summer", "2023-10-01").0, "2023-06-01");
        assert_eq!(
            one("I met them on the 15th after my trip", "2023-08-17").0,
            "2023-08-15"
        );
        assert_eq!(one("on the 28th", "2023-08-17").0, "2023-07-28");
        assert!(resolve("Recently I went out, a few days ago", d(a)).is_empty());
    }

    #[test]
    fn the_event_day_is_filled_only_when_the_text_says_one_day() {
        let said = d("2023-05-08");
        assert_eq!(
            event_day("Went to the support group yesterday", said),
            Some(d("2023-05-07"))
        );
        assert_eq!(event_day("I went hiking last week", said), None);
        assert_eq!(event_day("yesterday and last Friday", said), None);
        assert_eq!(event_day("I just got a dog", said), None);
        assert_eq!(event_day("Loves hiking", said), None);
    }

    #[test]
    fn gold_answers_and_matching() {
        let anchor = d("2023-06-27");
        let g = |s: &str| parse_gold(s, anchor);
        assert_eq!(g("7 May 2023"), Some((d("2023-05-07"), d("2023-05-07"))));
        assert_eq!(
            g("19 January, 2023"),
            Some((d("2023-01-19"), d("2023-01-19")))
        );
        assert_eq!(g("May 2023"), Some((d("2023-05-01"), d("2023-05-31"))));
        assert_eq!(g("January, 2023"), Some((d("2023-01-01"), d("2023-01-31"))));
        assert_eq!(g("2022"), Some((d("2022-01-01"), d("2022-12-31"))));
        assert_eq!(
            g("The week before 9 June 2023"),
            Some((d("2023-06-02"), d("2023-06-08")))
        );
        assert_eq!(
            g("The sunday before 25 May 2023"),
            Some((d("2023-05-21"), d("2023-05-21")))
        );
        assert_eq!(
            g("two weekends before 17 July 2023"),
            Some((d("2023-07-08"), d("2023-07-09")))
        );
        assert_eq!(
            g("The week of 23 August 2023"),
            Some((d("2023-08-21"), d("2023-08-27")))
        );
        assert_eq!(g("10 years ago"), Some((d("2013-01-01"), d("2013-12-31"))));
        assert_eq!(g("13 August"), Some((d("2023-08-13"), d("2023-08-13"))));
        assert_eq!(g("4 years"), None);
        assert_eq!(
            g("The summer of 2022"),
            Some((d("2022-06-01"), d("2022-08-31")))
        );
        // A day inside the gold week matches; a month does not match a day.
        assert!(matches(
            (d("2023-06-05"), d("2023-06-05")),
            (d("2023-06-02"), d("2023-06-08"))
        ));
        assert!(matches(
            (d("2023-06-02"), d("2023-06-08")),
            (d("2023-06-01"), d("2023-06-08"))
        ));
        assert!(!matches(
            (d("2023-06-01"), d("2023-06-30")),
            (d("2023-06-05"), d("2023-06-05"))
        ));
    }
}
