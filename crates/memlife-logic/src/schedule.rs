//! The schedule as data: each scheduled command's cadence, read from `jobs/schedule.toml`,
//! written as a cron line, and asked "when was it last due?" by `memlife run-due`.
//!
//! A cadence is one of:
//! - `every N minutes` (N divides 60): `*/N * * * *`;
//! - `every N hours at :MM` (N divides 24): `MM */N * * *`;
//! - `daily at HH:MM`, `weekly on DAY at HH:MM` (mon ... sun), `monthly on D at HH:MM`
//!   (D from 1 to 28, so every month has it).
//!
//! All times are UTC.

use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Timelike, Utc, Weekday};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    EveryMinutes(u32),
    EveryHours {
        hours: u32,
        minute: u32,
    },
    Daily {
        hour: u32,
        minute: u32,
    },
    Weekly {
        day: Weekday,
        hour: u32,
        minute: u32,
    },
    Monthly {
        day: u32,
        hour: u32,
        minute: u32,
    },
}

const WEEKDAYS: &[(&str, Weekday)] = &[
    ("mon", Weekday::Mon),
    ("tue", Weekday::Tue),
    ("wed", Weekday::Wed),
    ("thu", Weekday::Thu),
    ("fri", Weekday::Fri),
    ("sat", Weekday::Sat),
    ("sun", Weekday::Sun),
];

fn time_of_day(text: &str) -> Result<(u32, u32), String> {
    let t = NaiveTime::parse_from_str(text, "%H:%M")
        .map_err(|_| format!("{text:?} is not a time of day (HH:MM, 24-hour, UTC)"))?;
    Ok((t.hour(), t.minute()))
}

/// Reads a cadence ("daily at 02:00"); the error says what was expected.
pub fn parse_cadence(text: &str) -> Result<Cadence, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let bad = || {
        format!(
            "{text:?} is not a cadence: expected \"every N minutes\", \"every N hours at :MM\", \
             \"daily at HH:MM\", \"weekly on DAY at HH:MM\" or \"monthly on D at HH:MM\""
        )
    };
    match words.as_slice() {
        ["every", n, unit] | ["every", n, unit, "at", _] => {
            let n: u32 = n.parse().map_err(|_| bad())?;
            match (*unit, words.get(4)) {
                ("minute" | "minutes", None) if n > 0 && 60 % n == 0 => {
                    Ok(Cadence::EveryMinutes(n))
                }
                ("minute" | "minutes", None) => Err(format!(
                    "{text:?}: N minutes must divide 60 (1, 2, 5, 15, 30 ...)"
                )),
                ("hour" | "hours", Some(at)) if n > 0 && 24 % n == 0 => {
                    let minute: u32 = at
                        .strip_prefix(':')
                        .and_then(|m| m.parse().ok())
                        .filter(|m| *m < 60)
                        .ok_or_else(|| format!("{text:?}: the minute is written \":MM\""))?;
                    Ok(Cadence::EveryHours { hours: n, minute })
                }
                ("hour" | "hours", Some(_)) => Err(format!(
                    "{text:?}: N hours must divide 24 (1, 2, 3, 4, 6, 8, 12)"
                )),
                _ => Err(bad()),
            }
        }
        ["daily", "at", at] => {
            let (hour, minute) = time_of_day(at)?;
            Ok(Cadence::Daily { hour, minute })
        }
        ["weekly", "on", day, "at", at] => {
            let day = WEEKDAYS
                .iter()
                .find(|(name, _)| day.to_lowercase().starts_with(name))
                .map(|(_, d)| *d)
                .ok_or_else(|| format!("{text:?}: {day:?} is not a day of the week"))?;
            let (hour, minute) = time_of_day(at)?;
            Ok(Cadence::Weekly { day, hour, minute })
        }
        ["monthly", "on", day, "at", at] => {
            let day: u32 = day
                .parse()
                .ok()
                .filter(|d| (1..=28).contains(d))
                .ok_or_else(|| format!("{text:?}: the day of the month is 1 to 28"))?;
            let (hour, minute) = time_of_day(at)?;
            Ok(Cadence::Monthly { day, hour, minute })
        }
        _ => Err(bad()),
    }
}

/// The cron fields (minute hour day-of-month month day-of-week) of a cadence.
pub fn cron(c: &Cadence) -> String {
    match *c {
        Cadence::EveryMinutes(1) => "* * * * *".to_string(),
        Cadence::EveryMinutes(n) => format!("*/{n} * * * *"),
        Cadence::EveryHours { hours: 1, minute } => format!("{minute} * * * *"),
        Cadence::EveryHours { hours, minute } => format!("{minute} */{hours} * * *"),
        Cadence::Daily { hour, minute } => format!("{minute} {hour} * * *"),
        Cadence::Weekly { day, hour, minute } => {
            format!("{minute} {hour} * * {}", day.num_days_from_sunday())
        }
        Cadence::Monthly { day, hour, minute } => format!("{minute} {hour} {day} * *"),
    }
}

/// The latest moment at or before `now` the cadence was due.
pub fn last_slot(c: &Cadence, now: DateTime<Utc>) -> DateTime<Utc> {
    let at = |day: DateTime<Utc>, hour: u32, minute: u32| {
        Utc.with_ymd_and_hms(day.year(), day.month(), day.day(), hour, minute, 0)
            .single()
            .expect("a valid UTC time")
    };
    let minute_start = now
        .with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .expect("a valid time");
    match *c {
        Cadence::EveryMinutes(n) => {
            let back = minute_start.minute() % n;
            minute_start - Duration::minutes(back as i64)
        }
        Cadence::EveryHours { hours, minute } => {
            // Slots at hours 0, N, 2N ... of each day, at :MM.
            let mut slot = at(now, now.hour() - now.hour() % hours, minute);
            while slot > now {
                slot -= Duration::hours(hours as i64);
            }
            slot
        }
        Cadence::Daily { hour, minute } => {
            let slot = at(now, hour, minute);
            if slot > now {
                slot - Duration::days(1)
            } else {
                slot
            }
        }
        Cadence::Weekly { day, hour, minute } => {
            let back = (7 + now.weekday().num_days_from_monday() - day.num_days_from_monday()) % 7;
            let slot = at(now - Duration::days(back as i64), hour, minute);
            if slot > now {
                slot - Duration::days(7)
            } else {
                slot
            }
        }
        Cadence::Monthly { day, hour, minute } => {
            let this = Utc
                .with_ymd_and_hms(now.year(), now.month(), day, hour, minute, 0)
                .single()
                .expect("days 1 to 28 exist every month");
            if this <= now {
                this
            } else {
                let (year, month) = if now.month() == 1 {
                    (now.year() - 1, 12)
                } else {
                    (now.year(), now.month() - 1)
                };
                Utc.with_ymd_and_hms(year, month, day, hour, minute, 0)
                    .single()
                    .expect("days 1 to 28 exist every month")
            }
        }
    }
}

/// Whether a command last started at `last` (if ever, as far as `runs` says) is due at
/// `now`: it has not started since the cadence's latest slot. A cadence of an hour or more
/// stays due until it starts, so the next run-due catches up a slot missed (the machine off,
/// an earlier run-due still busy). A cadence of minutes is due only in the first minute of
/// each of its slots, as its cron line would start it, since run-due does not record such
/// starts alone (`is_recorded`); a slot missed is left to the next one, minutes later.
pub fn is_due(c: &Cadence, last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    let slot = last_slot(c, now);
    let not_since = last.is_none_or(|last| last < slot);
    match c {
        Cadence::EveryMinutes(_) => not_since && now - slot < Duration::minutes(1),
        _ => not_since,
    }
}

/// Whether run-due records a start of a command of this cadence in `runs`, the state its
/// next runs read: not for a cadence of minutes, whose starts would add a row, and two Lance
/// commits, every minute (`batches poll`): after 1,050 minutes of them `runs` held 1,008
/// fragments, each job's look at it opened them all, and `scores` took 0.77 s instead of
/// 0.17 (BENCHMARKS.md, session 53). A run-due that starts one of these besides records it with them.
pub fn is_recorded(c: &Cadence) -> bool {
    !matches!(c, Cadence::EveryMinutes(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn cadences_read_and_write_as_cron() {
        let cases = [
            ("every 1 minute", "* * * * *"),
            ("every 15 minutes", "*/15 * * * *"),
            ("every 6 hours at :15", "15 */6 * * *"),
            ("daily at 02:30", "30 2 * * *"),
            ("weekly on sun at 04:00", "0 4 * * 0"),
            ("weekly on Monday at 23:05", "5 23 * * 1"),
            ("monthly on 1 at 03:00", "0 3 1 * *"),
        ];
        for (text, expected) in cases {
            assert_eq!(cron(&parse_cadence(text).unwrap()), expected, "{text}");
        }
    }

    #[test]
    fn bad_cadences_say_what_was_expected() {
        for (text, says) in [
            ("hourly", "not a cadence"),
            ("every 7 minutes", "divide 60"),
            ("every 5 hours at :00", "divide 24"),
            ("daily at 25:00", "not a time of day"),
            ("weekly on someday at 04:00", "not a day of the week"),
            ("monthly on 31 at 03:00", "1 to 28"),
            ("every 6 hours at 15", ":MM"),
        ] {
            let error = parse_cadence(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_last_slot_is_the_latest_due_moment_at_or_before_now() {
        let now = t("2026-03-04T10:07:30Z"); // a Wednesday
        let slot = |text: &str| last_slot(&parse_cadence(text).unwrap(), now);
        assert_eq!(slot("every 1 minute"), t("2026-03-04T10:07:00Z"));
        assert_eq!(slot("every 15 minutes"), t("2026-03-04T10:00:00Z"));
        assert_eq!(slot("every 6 hours at :15"), t("2026-03-04T06:15:00Z"));
        assert_eq!(slot("every 6 hours at :05"), t("2026-03-04T06:05:00Z"));
        assert_eq!(slot("daily at 02:00"), t("2026-03-04T02:00:00Z"));
        assert_eq!(slot("daily at 11:00"), t("2026-03-03T11:00:00Z"));
        assert_eq!(slot("weekly on sun at 04:00"), t("2026-03-01T04:00:00Z"));
        assert_eq!(slot("weekly on wed at 11:00"), t("2026-02-25T11:00:00Z"));
        assert_eq!(slot("weekly on wed at 09:00"), t("2026-03-04T09:00:00Z"));
        assert_eq!(slot("monthly on 1 at 03:00"), t("2026-03-01T03:00:00Z"));
        assert_eq!(slot("monthly on 5 at 03:00"), t("2026-02-05T03:00:00Z"));
        let january = t("2026-01-02T00:00:00Z");
        assert_eq!(
            last_slot(&parse_cadence("monthly on 5 at 03:00").unwrap(), january),
            t("2025-12-05T03:00:00Z")
        );
        // Early in the day, the every-6-hours slot is yesterday's last one.
        let early = t("2026-03-04T00:10:00Z");
        assert_eq!(
            last_slot(&parse_cadence("every 6 hours at :15").unwrap(), early),
            t("2026-03-03T18:15:00Z")
        );
    }

    #[test]
    fn a_command_is_due_until_it_starts_after_its_slot() {
        let daily = parse_cadence("daily at 02:00").unwrap();
        let now = t("2026-03-04T10:00:00Z");
        assert!(is_due(&daily, None, now), "never run");
        assert!(is_due(&daily, Some(t("2026-03-03T02:00:00Z")), now));
        assert!(!is_due(&daily, Some(t("2026-03-04T02:00:05Z")), now));
        assert!(!is_due(&daily, Some(t("2026-03-04T02:00:00Z")), now));
        assert!(is_recorded(&daily));
    }

    #[test]
    fn a_command_of_minutes_is_due_in_the_first_minute_of_its_slots() {
        let quarter = parse_cadence("every 15 minutes").unwrap();
        assert!(!is_recorded(&quarter));
        // Unrecorded (`last` unknown): due at 10:15:xx, not at 10:16 nor 10:29.
        assert!(is_due(&quarter, None, t("2026-03-04T10:15:00Z")));
        assert!(is_due(&quarter, None, t("2026-03-04T10:15:59Z")));
        assert!(!is_due(&quarter, None, t("2026-03-04T10:16:00Z")));
        assert!(!is_due(&quarter, None, t("2026-03-04T10:29:59Z")));
        // Recorded beside a longer cadence in this slot: not again in the same minute.
        let now = t("2026-03-04T10:15:40Z");
        assert!(!is_due(&quarter, Some(t("2026-03-04T10:15:10Z")), now));
        assert!(is_due(&quarter, Some(t("2026-03-04T10:00:10Z")), now));
        let minute = parse_cadence("every 1 minute").unwrap();
        assert!(is_due(&minute, None, t("2026-03-04T10:16:30Z")));
    }
}
