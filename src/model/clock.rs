//! The clock a run computes at (`--now`, `--as-of`): one type, parsed once where it enters
//! (clap parses every such flag through `FromStr`, with one message), passed on as a time.
//! Jobs, commands and the child processes a pipeline starts all read the same `Clock`.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};

use super::encoding::parse_timestamp;

/// A point in time, in UTC, to the microsecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Clock(DateTime<Utc>);

impl Clock {
    /// The current time.
    pub fn now() -> Clock {
        Clock::at(Utc::now())
    }

    /// `time`, to the microsecond.
    pub fn at(time: DateTime<Utc>) -> Clock {
        let micros = time.timestamp_micros();
        Clock(DateTime::from_timestamp_micros(micros).unwrap_or(time))
    }

    /// The clock `flag` gave, or the current time.
    pub fn or_now(flag: Option<Clock>) -> Clock {
        flag.unwrap_or_else(Clock::now)
    }

    pub fn time(self) -> DateTime<Utc> {
        self.0
    }

    /// Microseconds since the epoch (how tables store times).
    pub fn micros(self) -> i64 {
        self.0.timestamp_micros()
    }
}

impl FromStr for Clock {
    type Err = String;

    /// RFC 3339 (any offset), or `YYYY-MM-DD[ T]HH:MM[:SS[.f]]` or `YYYY-MM-DD` taken as UTC.
    fn from_str(text: &str) -> Result<Clock, String> {
        parse_timestamp(text)
            .and_then(DateTime::from_timestamp_micros)
            .map(Clock)
            .ok_or_else(|| {
                format!("{text:?} is not a time: expected RFC 3339, e.g. 2026-01-31T02:00:00Z")
            })
    }
}

impl fmt::Display for Clock {
    /// RFC 3339 in UTC (what `FromStr` reads back to the same clock).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn a_clock_reads_back_what_it_writes_and_names_bad_input() {
        let clock: Clock = "2026-01-31T02:00:00+01:00".parse().unwrap();
        assert_eq!(clock.to_string(), "2026-01-31T01:00:00Z");
        assert_eq!(clock.to_string().parse::<Clock>().unwrap(), clock);
        let day: Clock = "2026-01-31".parse().unwrap();
        assert_eq!(day.to_string(), "2026-01-31T00:00:00Z");
        assert_eq!(day.micros(), 1_769_817_600_000_000);
        let err = "yesterday".parse::<Clock>().unwrap_err();
        assert!(
            err.contains("\"yesterday\"") && err.contains("RFC 3339"),
            "{err}"
        );
    }
}
