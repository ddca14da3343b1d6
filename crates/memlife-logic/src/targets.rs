//! Performance and quality targets as data (`benches/targets.toml`, `memlife bench targets`):
//! what each target runs, which figure of the run's JSON report it reads, and the bound it must
//! reach; judging a figure, and the tables a run prints and BENCHMARKS.md holds. Pure: the
//! caller parses the file, runs the benches and stores the rows.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The targets file: `[[target]]` tables.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetsFile {
    #[serde(rename = "target", default)]
    pub targets: Vec<Target>,
}

/// One target.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Unique, for `--only` and the history.
    pub name: String,
    /// What a person reads in the table.
    pub title: String,
    /// The `memlife` arguments of the full-scale run (`--json` is added).
    pub run: Vec<String>,
    /// The arguments at `--quick` scale (tiny: seconds, for tests and a first look); empty:
    /// the target has no quick scale (a bound that only means something at full scale) and
    /// `--quick` skips it.
    #[serde(default)]
    pub quick: Vec<String>,
    /// The figure: a dotted path in the run's JSON report (`mock_at_0_ms.ms_per_fact`;
    /// a number is an array index).
    pub figure: String,
    /// `<=`, `<`, `>=`, `>` or `==`.
    pub op: String,
    /// The bound, or (with `against`) the factor on the other figure.
    pub bound: f64,
    /// A second figure of the same report the bound multiplies: `figure op bound x against`
    /// (recall at least as good as plain cosine: `>=`, 1.0, `cosine.hit_at_10`).
    #[serde(default)]
    pub against: Option<String>,
    /// The unit shown beside the figure.
    #[serde(default)]
    pub unit: String,
    /// `speed` (a time or a rate: judged only in an optimised build unless asked) or
    /// `quality` (judged in any build).
    pub kind: String,
    /// Files the run needs (relative to where the command runs); the target is skipped,
    /// not missed, without them (LoCoMo is not shipped with memlife).
    #[serde(default)]
    pub requires: Vec<String>,
}

pub const OPS: &[&str] = &["<=", "<", ">=", ">", "=="];
pub const KINDS: &[&str] = &["speed", "quality"];

impl TargetsFile {
    /// Every problem of the file, each naming the target and field; empty when it is sound.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        if self.targets.is_empty() {
            out.push("no [[target]] in the file".to_string());
        }
        for (i, t) in self.targets.iter().enumerate() {
            let at = format!("target {} ('{}')", i + 1, t.name);
            if t.name.trim().is_empty() || t.name.contains([',', ' ']) {
                out.push(format!(
                    "{at}: name must be non-empty, without spaces or commas"
                ));
            }
            if !seen.insert(t.name.as_str()) {
                out.push(format!("{at}: name used twice"));
            }
            if !OPS.contains(&t.op.as_str()) {
                out.push(format!(
                    "{at}: op '{}' is not one of {}",
                    t.op,
                    OPS.join(" ")
                ));
            }
            if !KINDS.contains(&t.kind.as_str()) {
                out.push(format!(
                    "{at}: kind '{}' is not one of {}",
                    t.kind,
                    KINDS.join(", ")
                ));
            }
            if !t.bound.is_finite() {
                out.push(format!("{at}: bound is not a finite number"));
            }
            if t.run.is_empty() {
                out.push(format!("{at}: run must name a memlife command"));
            }
            for path in std::iter::once(&t.figure).chain(t.against.iter()) {
                if path.is_empty() || path.split('.').any(str::is_empty) {
                    out.push(format!("{at}: figure path '{path}' has an empty part"));
                }
            }
        }
        out
    }

    /// The targets `only` names (all when empty), in file order; an unknown name is an error.
    pub fn select(&self, only: &[String]) -> Result<Vec<&Target>, String> {
        let known: BTreeSet<&str> = self.targets.iter().map(|t| t.name.as_str()).collect();
        let unknown: Vec<&str> = only
            .iter()
            .map(String::as_str)
            .filter(|n| !known.contains(n))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "unknown target(s) {} (known: {})",
                unknown.join(", "),
                known.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(self
            .targets
            .iter()
            .filter(|t| only.is_empty() || only.contains(&t.name))
            .collect())
    }
}

/// The value at a dotted path of a JSON report, if it is a number.
pub fn figure_at(report: &Value, path: &str) -> Option<f64> {
    let mut at = report;
    for part in path.split('.') {
        at = match (at, part.parse::<usize>()) {
            (Value::Array(items), Ok(i)) => items.get(i)?,
            (Value::Object(map), _) => map.get(part)?,
            _ => return None,
        };
    }
    at.as_f64()
}

/// Whether `value op bound` holds.
pub fn holds(value: f64, op: &str, bound: f64) -> bool {
    match op {
        "<=" => value <= bound,
        "<" => value < bound,
        ">=" => value >= bound,
        ">" => value > bound,
        "==" => value == bound,
        _ => false,
    }
}

/// What became of a target in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetStatus {
    Held,
    Missed,
    /// The bench failed, or its report lacks the figure.
    Error,
    /// A speed target in a debug build (without `--allow-debug`): not run.
    Refused,
    /// A file it requires is absent.
    Skipped,
}

impl TargetStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetStatus::Held => "held",
            TargetStatus::Missed => "missed",
            TargetStatus::Error => "error",
            TargetStatus::Refused => "refused",
            TargetStatus::Skipped => "skipped",
        }
    }
}

/// A target judged against one report: the figure, the bound it was held to (the factor
/// times the other figure, with `against`), and the status (`Error` with why).
pub fn judge_target(
    target: &Target,
    report: &Value,
) -> (Option<f64>, Option<f64>, TargetStatus, Option<String>) {
    let Some(value) = figure_at(report, &target.figure) else {
        let why = format!("the report has no number at '{}'", target.figure);
        return (None, None, TargetStatus::Error, Some(why));
    };
    let bound = match &target.against {
        None => target.bound,
        Some(other) => match figure_at(report, other) {
            Some(v) => target.bound * v,
            None => {
                let why = format!("the report has no number at '{other}'");
                return (Some(value), None, TargetStatus::Error, Some(why));
            }
        },
    };
    let status = match holds(value, &target.op, bound) {
        true => TargetStatus::Held,
        false => TargetStatus::Missed,
    };
    (Some(value), Some(bound), status, None)
}

/// The exit status of a run: 2 when a bench could not run (error, or refused), else 1 when
/// a target was missed, else 0.
pub fn exit_code(statuses: &[TargetStatus]) -> i32 {
    if statuses
        .iter()
        .any(|s| matches!(s, TargetStatus::Error | TargetStatus::Refused))
    {
        2
    } else if statuses.contains(&TargetStatus::Missed) {
        1
    } else {
        0
    }
}

/// A number as a person reads it: 3 significant digits, no exponent for ordinary sizes.
pub fn show(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).clamp(0, 6) as usize;
    let text = format!("{value:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

/// The bound as the table shows it: `<= 30 s`, `>= 1 x cosine.hit_at_10 (0.395)`.
pub fn bound_text(target: &Target, bound: Option<f64>) -> String {
    let unit = match target.unit.is_empty() {
        true => String::new(),
        false => format!(" {}", target.unit),
    };
    match (&target.against, bound) {
        (None, _) => format!("{} {}{unit}", target.op, show(target.bound)),
        (Some(other), Some(b)) => {
            format!(
                "{} {} x {other} ({})",
                target.op,
                show(target.bound),
                show(b)
            )
        }
        (Some(other), None) => format!("{} {} x {other}", target.op, show(target.bound)),
    }
}

/// One row of the history (`bench_runs`): a target's outcome in one run.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct HistoryRow {
    pub run_id: String,
    pub target: String,
    pub title: String,
    /// The memlife arguments run.
    pub command: String,
    pub figure: String,
    pub bound_text: String,
    /// The bound held to (with `against`, the factor times the other figure).
    pub bound: Option<f64>,
    pub value: Option<f64>,
    pub unit: String,
    pub status: String,
    /// Why it erred, was refused or skipped.
    pub reason: Option<String>,
    /// The bench's wall time.
    pub seconds: f64,
    pub quick: bool,
    pub cpu: String,
    pub kernel: String,
    pub profile: String,
    pub commit: String,
    /// Microseconds since the epoch, UTC.
    pub created_at: i64,
}

/// The generated BENCHMARKS.md table: for each CPU, the latest run at full scale (`quick`
/// false) of each target, newest CPU's run first; one Markdown table per CPU.
pub fn latest_full_runs_markdown(rows: &[HistoryRow]) -> String {
    // Per CPU and target, the newest full row.
    let mut latest: BTreeMap<(&str, &str), &HistoryRow> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.quick) {
        let slot = latest
            .entry((r.cpu.as_str(), r.target.as_str()))
            .or_insert(r);
        if r.created_at > slot.created_at {
            *slot = r;
        }
    }
    let mut by_cpu: BTreeMap<&str, Vec<&HistoryRow>> = BTreeMap::new();
    for ((cpu, _), r) in latest {
        by_cpu.entry(cpu).or_default().push(r);
    }
    let mut cpus: Vec<(&str, Vec<&HistoryRow>)> = by_cpu.into_iter().collect();
    let newest = |rs: &Vec<&HistoryRow>| rs.iter().map(|r| r.created_at).max().unwrap_or(0);
    cpus.sort_by_key(|(_, rs)| std::cmp::Reverse(newest(rs)));
    let mut out = String::new();
    if cpus.is_empty() {
        out.push_str("No full-scale run recorded yet.\n");
    }
    for (cpu, mut rs) in cpus {
        rs.sort_by(|a, b| a.target.cmp(&b.target));
        let held = rs.iter().filter(|r| r.status == "held").count();
        out.push_str(&format!(
            "**{cpu}**: {held} of {} targets held.\n\n",
            rs.len()
        ));
        out.push_str("| target | bound | figure | status | run (s) | build | commit | date |\n");
        out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rs {
            let figure = match r.value {
                Some(v) if r.unit.is_empty() => show(v),
                Some(v) => format!("{} {}", show(v), r.unit),
                None => "-".to_string(),
            };
            let date = chrono::DateTime::from_timestamp_micros(r.created_at)
                .map(|d| d.format("%Y-%m-%d").to_string())
                .unwrap_or_default();
            out.push_str(&format!(
                "| {} | {} | {figure} | {} | {} | {} ({}) | {} | {date} |\n",
                r.title,
                r.bound_text.replace('|', "\\|"),
                r.status,
                show(r.seconds),
                r.profile,
                r.kernel,
                r.commit,
            ));
        }
        out.push('\n');
    }
    out
}

/// One target's figures over the recorded runs, for a chart: the runs in time order (label:
/// date and commit), one series per CPU (quick-scale runs apart), and the bound.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetHistory {
    pub target: String,
    pub title: String,
    pub unit: String,
    pub labels: Vec<String>,
    pub series: Vec<(String, Vec<Option<f64>>)>,
    pub bound: Vec<Option<f64>>,
    /// The latest run's status and bound as written.
    pub latest_status: String,
    pub latest_bound_text: String,
}

/// Every target of `rows`, by name, with its figures run by run (see `TargetHistory`).
pub fn history_by_target(rows: &[HistoryRow]) -> Vec<TargetHistory> {
    let mut by_target: BTreeMap<&str, Vec<&HistoryRow>> = BTreeMap::new();
    for r in rows {
        by_target.entry(r.target.as_str()).or_default().push(r);
    }
    by_target
        .into_iter()
        .map(|(target, mut rs)| {
            rs.sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then(a.run_id.cmp(&b.run_id))
            });
            let labels = rs
                .iter()
                .map(|r| {
                    let at = chrono::DateTime::from_timestamp_micros(r.created_at)
                        .map(|d| d.format("%m-%d %H:%M").to_string())
                        .unwrap_or_default();
                    format!("{at} {}", r.commit.get(..7).unwrap_or(&r.commit))
                })
                .collect();
            let name = |r: &HistoryRow| match r.quick {
                true => format!("{} (quick)", r.cpu),
                false => r.cpu.clone(),
            };
            let names: BTreeSet<String> = rs.iter().map(|r| name(r)).collect();
            let series = names
                .into_iter()
                .map(|n| {
                    let values = rs
                        .iter()
                        .map(|r| if name(r) == n { r.value } else { None })
                        .collect();
                    (n, values)
                })
                .collect();
            let last = rs[rs.len() - 1];
            TargetHistory {
                target: target.to_string(),
                title: last.title.clone(),
                unit: last.unit.clone(),
                labels,
                series,
                bound: rs.iter().map(|r| r.bound).collect(),
                latest_status: last.status.clone(),
                latest_bound_text: last.bound_text.clone(),
            }
        })
        .collect()
}

/// `text` with the part between the two marker lines replaced by `body` (markers kept);
/// the markers are appended, with `body`, when absent.
pub fn replace_between(text: &str, begin: &str, end: &str, body: &str) -> String {
    match (text.find(begin), text.find(end)) {
        (Some(b), Some(e)) if b < e => {
            let after_begin = b + begin.len();
            format!("{}\n{body}{}", &text[..after_begin], &text[e..])
        }
        _ => {
            let sep = if text.ends_with('\n') || text.is_empty() {
                ""
            } else {
                "\n"
            };
            format!("{text}{sep}{begin}\n{body}{end}\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(figure: &str, op: &str, bound: f64, against: Option<&str>) -> Target {
        Target {
            name: "t".into(),
            title: "a target".into(),
            run: vec!["bench".into()],
            quick: vec!["bench".into()],
            figure: figure.into(),
            op: op.into(),
            bound,
            against: against.map(str::to_string),
            unit: "s".into(),
            kind: "speed".into(),
            requires: vec![],
        }
    }

    #[test]
    fn figures_are_read_by_dotted_paths_through_objects_and_arrays() {
        let report = json!({"a": {"b": [1.5, {"c": 7}]}, "s": "text"});
        assert_eq!(figure_at(&report, "a.b.0"), Some(1.5));
        assert_eq!(figure_at(&report, "a.b.1.c"), Some(7.0));
        assert_eq!(figure_at(&report, "a.b.2"), None);
        assert_eq!(figure_at(&report, "s"), None, "text is no figure");
        assert_eq!(figure_at(&report, "a.x"), None);
    }

    #[test]
    fn a_target_holds_misses_or_errs_and_a_relative_bound_multiplies_the_other_figure() {
        let report = json!({"wall": 20.0, "recall": {"hit": 0.40}, "cosine": {"hit": 0.42}});
        let (v, b, s, _) = judge_target(&target("wall", "<=", 30.0, None), &report);
        assert_eq!((v, b, s), (Some(20.0), Some(30.0), TargetStatus::Held));
        assert_eq!(
            judge_target(&target("wall", "<", 20.0, None), &report).2,
            TargetStatus::Missed
        );
        let relative = target("recall.hit", ">=", 1.0, Some("cosine.hit"));
        let (_, b, s, _) = judge_target(&relative, &report);
        assert_eq!((b, s), (Some(0.42), TargetStatus::Missed));
        let (_, _, s, why) = judge_target(&target("nope", "<=", 1.0, None), &report);
        assert_eq!(s, TargetStatus::Error);
        assert!(why.unwrap().contains("'nope'"));
    }

    #[test]
    fn exit_codes_put_a_bench_that_could_not_run_above_a_missed_target() {
        assert_eq!(exit_code(&[TargetStatus::Held, TargetStatus::Skipped]), 0);
        assert_eq!(exit_code(&[TargetStatus::Held, TargetStatus::Missed]), 1);
        assert_eq!(exit_code(&[TargetStatus::Missed, TargetStatus::Error]), 2);
        assert_eq!(exit_code(&[TargetStatus::Refused]), 2);
    }

    #[test]
    fn a_file_with_bad_targets_names_each_problem() {
        let mut bad = target("x..y", "=<", f64::NAN, None);
        bad.kind = "fast".into();
        let file = TargetsFile {
            targets: vec![target("wall", "<=", 1.0, None), bad],
        };
        let problems = file.problems();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("name used twice")));
        assert!(problems.iter().any(|p| p.contains("op '=<'")));
        assert!(problems.iter().any(|p| p.contains("kind 'fast'")));
        assert!(problems.iter().any(|p| p.contains("'x..y'")));
        assert!(file.select(&["zzz".into()]).unwrap_err().contains("zzz"));
        assert_eq!(file.select(&[]).unwrap().len(), 2);
    }

    #[test]
    fn numbers_show_three_significant_digits() {
        assert_eq!(show(28.456), "28.5");
        assert_eq!(show(0.39512), "0.395");
        assert_eq!(show(212_345.0), "212345");
        assert_eq!(show(2.0), "2");
        assert_eq!(show(0.0), "0");
    }

    #[test]
    fn the_generated_table_keeps_the_latest_full_run_per_cpu_and_target() {
        let row = |target: &str, cpu: &str, at: i64, quick: bool, status: &str| HistoryRow {
            run_id: format!("r{at}"),
            target: target.into(),
            title: format!("{target} title"),
            command: "bench x".into(),
            figure: "wall".into(),
            bound_text: "<= 30 s".into(),
            bound: Some(30.0),
            value: Some(at as f64),
            unit: "s".into(),
            status: status.into(),
            reason: None,
            seconds: 1.0,
            quick,
            cpu: cpu.into(),
            kernel: "int8-rerank".into(),
            profile: "perf".into(),
            commit: "abc1234".into(),
            created_at: at * 86_400_000_000,
        };
        let rows = vec![
            row("a", "Xeon", 1, false, "missed"),
            row("a", "Xeon", 3, false, "held"),
            row("a", "Xeon", 4, true, "missed"),
            row("b", "Xeon", 2, false, "held"),
            row("a", "EPYC", 5, false, "held"),
        ];
        let table = latest_full_runs_markdown(&rows);
        let epyc = table.find("**EPYC**").unwrap();
        let xeon = table.find("**Xeon**").unwrap();
        assert!(epyc < xeon, "the CPU with the newest run first:\n{table}");
        assert!(table.contains("**Xeon**: 2 of 2 targets held."), "{table}");
        assert!(
            table.contains("| a title | <= 30 s | 3 s | held |"),
            "{table}"
        );
        assert!(!table.contains("| 4 s |"), "quick runs stay out:\n{table}");
        assert_eq!(
            latest_full_runs_markdown(&[]),
            "No full-scale run recorded yet.\n"
        );
    }

    #[test]
    fn a_targets_history_puts_runs_in_time_order_with_one_series_per_cpu_and_scale() {
        let row = |cpu: &str, at: i64, quick: bool, value: f64| HistoryRow {
            run_id: format!("r{at}"),
            target: "t".into(),
            title: "T".into(),
            command: "bench x".into(),
            figure: "wall".into(),
            bound_text: "<= 30 s".into(),
            bound: Some(30.0),
            value: Some(value),
            unit: "s".into(),
            status: "held".into(),
            reason: None,
            seconds: 1.0,
            quick,
            cpu: cpu.into(),
            kernel: "k".into(),
            profile: "perf".into(),
            commit: "abcdef123".into(),
            created_at: at * 60_000_000,
        };
        let rows = [
            row("B", 2, false, 20.0),
            row("A", 1, false, 10.0),
            row("A", 3, true, 1.0),
        ];
        let history = history_by_target(&rows);
        assert_eq!(history.len(), 1);
        let h = &history[0];
        assert_eq!(
            h.labels,
            [
                "01-01 00:01 abcdef1",
                "01-01 00:02 abcdef1",
                "01-01 00:03 abcdef1"
            ]
        );
        assert_eq!(
            h.series,
            [
                ("A".to_string(), vec![Some(10.0), None, None]),
                ("A (quick)".to_string(), vec![None, None, Some(1.0)]),
                ("B".to_string(), vec![None, Some(20.0), None]),
            ]
        );
        assert_eq!(h.bound, [Some(30.0); 3]);
    }

    #[test]
    fn a_section_between_markers_is_replaced_or_appended() {
        let text = "intro\n<!-- b -->\nold\n<!-- e -->\nafter\n";
        assert_eq!(
            replace_between(text, "<!-- b -->", "<!-- e -->", "new\n"),
            "intro\n<!-- b -->\nnew\n<!-- e -->\nafter\n"
        );
        assert_eq!(
            replace_between("intro", "<!-- b -->", "<!-- e -->", "new\n"),
            "intro\n<!-- b -->\nnew\n<!-- e -->\n"
        );
    }
}
