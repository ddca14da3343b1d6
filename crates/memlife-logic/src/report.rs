//! The store's history by day, for `memlife report`: what each run did, reduced to one value
//! per day and series (run time per job, LLM tokens and cost, memories folded, superseded,
//! split and archived, tiers from the scores runs). Pure: the command reads the `runs` rows
//! and the tables' versions, this turns them into the series the charts draw.

use std::collections::BTreeMap;

/// What one finished run says about itself (its `runs` row, parsed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFacts {
    pub job: String,
    /// The day the run computed for (its clock, else its start), `YYYY-MM-DD`.
    pub day: String,
    pub duration_ms: Option<i64>,
    /// The run's counts (name, value).
    pub counts: BTreeMap<String, f64>,
    pub llm: LlmFacts,
    /// `memlife undo` reverted it: its effects no longer stand (its time and cost still do).
    pub undone: bool,
}

/// A run's use of the LLM layer (summed over providers).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LlmFacts {
    /// Items judged (offline or by a model).
    pub items: f64,
    /// HTTP requests sent to providers.
    pub requests: f64,
    pub input_tokens: f64,
    pub output_tokens: f64,
    pub cost_usd: f64,
}

/// The effects a report charts per day: (series name, [(job, count name)]) summed.
pub const EFFECTS: &[(&str, &[(&str, &str)])] = &[
    ("added", &[("integrate", "added")]),
    (
        "folded",
        &[
            ("consolidate", "memories_archived"),
            ("integrate", "duplicates"),
        ],
    ),
    (
        "superseded",
        &[
            ("link", "supersessions_chained"),
            ("integrate", "superseded"),
        ],
    ),
    ("split", &[("refine", "split")]),
    ("archived by decay", &[("scores", "archived")]),
];

/// Tiers as the scores job counts them (`tier_<name>` in its counts).
pub const TIERS: &[&str] = &["hot", "warm", "cold", "archived"];

/// One value per day of `days` and key, as chart series want them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Daily {
    pub days: Vec<String>,
    /// Seconds of run time per job.
    pub seconds_by_job: BTreeMap<String, Vec<Option<f64>>>,
    /// Input plus output tokens per job.
    pub tokens_by_job: BTreeMap<String, Vec<Option<f64>>>,
    pub cost_usd: Vec<Option<f64>>,
    pub requests: Vec<Option<f64>>,
    pub items_judged: Vec<Option<f64>>,
    /// EFFECTS, in their order.
    pub effects: Vec<(String, Vec<Option<f64>>)>,
    /// Tiers after the day's last scores run (None: no scores run that day).
    pub tiers_from_scores: Vec<(String, Vec<Option<f64>>)>,
}

/// The last `max_days` days that have runs, in order, and each series over them.
pub fn daily(runs: &[RunFacts], max_days: usize) -> Daily {
    let mut days: Vec<String> = runs.iter().map(|r| r.day.clone()).collect();
    days.sort();
    days.dedup();
    let skip = days.len().saturating_sub(max_days);
    let days: Vec<String> = days.into_iter().skip(skip).collect();
    let index: BTreeMap<&str, usize> = days
        .iter()
        .enumerate()
        .map(|(i, d)| (d.as_str(), i))
        .collect();
    let n = days.len();
    let add = |series: &mut Vec<Option<f64>>, i: usize, value: f64| {
        let slot = &mut series[i];
        *slot = Some(slot.unwrap_or(0.0) + value);
    };
    let mut out = Daily {
        days: days.clone(),
        cost_usd: vec![None; n],
        requests: vec![None; n],
        items_judged: vec![None; n],
        effects: EFFECTS
            .iter()
            .map(|(name, _)| (name.to_string(), vec![None; n]))
            .collect(),
        tiers_from_scores: TIERS
            .iter()
            .map(|t| (t.to_string(), vec![None; n]))
            .collect(),
        ..Daily::default()
    };
    for run in runs {
        let Some(&i) = index.get(run.day.as_str()) else {
            continue;
        };
        if let Some(ms) = run.duration_ms {
            let series = out
                .seconds_by_job
                .entry(run.job.clone())
                .or_insert_with(|| vec![None; n]);
            add(series, i, ms as f64 / 1000.0);
        }
        let tokens = run.llm.input_tokens + run.llm.output_tokens;
        if tokens > 0.0 {
            let series = out
                .tokens_by_job
                .entry(run.job.clone())
                .or_insert_with(|| vec![None; n]);
            add(series, i, tokens);
        }
        add(&mut out.cost_usd, i, run.llm.cost_usd);
        add(&mut out.requests, i, run.llm.requests);
        add(&mut out.items_judged, i, run.llm.items);
        if run.undone {
            continue;
        }
        for ((_, sources), (_, series)) in EFFECTS.iter().zip(out.effects.iter_mut()) {
            for (job, count) in sources.iter() {
                if run.job == *job
                    && let Some(v) = run.counts.get(*count)
                {
                    add(series, i, *v);
                }
            }
        }
        if run.job == "scores" {
            for (tier, series) in out.tiers_from_scores.iter_mut() {
                if let Some(v) = run.counts.get(&format!("tier_{tier}")) {
                    // The day's last scores run stands (runs come in clock order).
                    series[i] = Some(*v);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: &str, day: &str, ms: i64, counts: &[(&str, f64)]) -> RunFacts {
        RunFacts {
            job: job.into(),
            day: day.into(),
            duration_ms: Some(ms),
            counts: counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..RunFacts::default()
        }
    }

    fn effect<'a>(d: &'a Daily, name: &str) -> &'a [Option<f64>] {
        &d.effects.iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn runs_sum_per_day_and_job() {
        let runs = [
            run("scores", "2026-01-01", 1500, &[]),
            run("scores", "2026-01-01", 500, &[]),
            run("link", "2026-01-02", 3000, &[]),
        ];
        let d = daily(&runs, 90);
        assert_eq!(d.days, ["2026-01-01", "2026-01-02"]);
        assert_eq!(d.seconds_by_job["scores"], [Some(2.0), None]);
        assert_eq!(d.seconds_by_job["link"], [None, Some(3.0)]);
    }

    #[test]
    fn effects_come_from_each_jobs_own_counts() {
        let runs = [
            run("consolidate", "d1", 1, &[("memories_archived", 3.0)]),
            run(
                "integrate",
                "d1",
                1,
                &[("duplicates", 1.0), ("superseded", 2.0)],
            ),
            run("link", "d1", 1, &[("supersessions_chained", 4.0)]),
            // A count of the same name from another job is not the effect.
            run("entity-gc", "d1", 1, &[("archived", 9.0)]),
            run("scores", "d1", 1, &[("archived", 5.0)]),
        ];
        let d = daily(&runs, 90);
        assert_eq!(effect(&d, "folded"), [Some(4.0)]);
        assert_eq!(effect(&d, "superseded"), [Some(6.0)]);
        assert_eq!(effect(&d, "archived by decay"), [Some(5.0)]);
        assert_eq!(effect(&d, "split"), [None]);
    }

    #[test]
    fn an_undone_run_keeps_its_cost_but_not_its_effects() {
        let mut undone = run("consolidate", "d1", 2000, &[("memories_archived", 3.0)]);
        undone.undone = true;
        undone.llm.cost_usd = 0.5;
        let d = daily(&[undone], 90);
        assert_eq!(effect(&d, "folded"), [None]);
        assert_eq!(d.cost_usd, [Some(0.5)]);
        assert_eq!(d.seconds_by_job["consolidate"], [Some(2.0)]);
    }

    #[test]
    fn only_the_last_days_are_kept_and_the_last_scores_run_of_a_day_stands() {
        let runs = [
            run("scores", "d1", 1, &[("tier_hot", 10.0)]),
            run("scores", "d2", 1, &[("tier_hot", 20.0)]),
            run("scores", "d3", 1, &[("tier_hot", 30.0)]),
            run("scores", "d3", 1, &[("tier_hot", 31.0)]),
        ];
        let d = daily(&runs, 2);
        assert_eq!(d.days, ["d2", "d3"]);
        let hot = &d.tiers_from_scores[0];
        assert_eq!(
            (hot.0.as_str(), hot.1.as_slice()),
            ("hot", &[Some(20.0), Some(31.0)][..])
        );
    }

    #[test]
    fn tokens_are_charted_only_for_jobs_that_used_them() {
        let mut judged = run("link", "d1", 1, &[]);
        judged.llm = LlmFacts {
            items: 10.0,
            requests: 2.0,
            input_tokens: 700.0,
            output_tokens: 50.0,
            cost_usd: 0.01,
        };
        let d = daily(&[judged, run("scores", "d1", 1, &[])], 90);
        assert_eq!(d.tokens_by_job.keys().collect::<Vec<_>>(), ["link"]);
        assert_eq!(d.tokens_by_job["link"], [Some(750.0)]);
        assert_eq!((d.requests[0], d.items_judged[0]), (Some(2.0), Some(10.0)));
    }
}
