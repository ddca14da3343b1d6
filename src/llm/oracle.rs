//! A judge that knows the answers: consolidation replies read from `memlife synth`'s truth
//! file (`mock-llm --truth FILE`). Pass 1 proposes exactly the truth groups found in a
//! cluster, pass 2 approves exactly groups of one truth group. It measures what the rest of
//! the pipeline (clustering, applying) makes of a perfect judge: the recall clustering allows,
//! and that a right answer is applied right. Other tasks are left to the offline rules.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result};

use super::tasks::{ProposeReply, ProposedGroup, Reply, Task, TaskInput, VerifyReply};

/// Truth groups by memory id.
pub struct Oracle {
    group_of: HashMap<String, usize>,
    /// The merged text of a merge group (duplicate groups keep their longest wording).
    merged: Vec<Option<String>>,
}

impl Oracle {
    pub fn load(path: &Path) -> Result<Oracle> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the truth file {}", path.display()))?;
        let truth: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        Oracle::from_truth(&truth).with_context(|| format!("{}", path.display()))
    }

    pub fn from_truth(truth: &serde_json::Value) -> Result<Oracle> {
        let mut oracle = Oracle {
            group_of: HashMap::new(),
            merged: Vec::new(),
        };
        for (kind, text_field) in [
            ("duplicate_groups", None),
            ("merge_groups", Some("merged_text")),
        ] {
            let groups = truth[kind]
                .as_array()
                .with_context(|| format!("no {kind} array: not a memlife synth truth file"))?;
            for group in groups {
                let index = oracle.merged.len();
                oracle
                    .merged
                    .push(text_field.and_then(|f| group[f].as_str().map(str::to_string)));
                for id in group["memory_ids"].as_array().into_iter().flatten() {
                    if let Some(id) = id.as_str() {
                        oracle.group_of.insert(id.to_string(), index);
                    }
                }
            }
        }
        Ok(oracle)
    }

    /// The reply for a consolidation task; `None` for other tasks.
    pub fn answer(&self, input: &TaskInput) -> Option<Reply> {
        match input.task {
            Task::ConsolidatePropose => {
                let mut buckets: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
                for (i, m) in input.memories.iter().enumerate() {
                    if let Some(g) = self.group_of.get(&m.id) {
                        buckets.entry(*g).or_default().push(i);
                    }
                }
                let groups = buckets
                    .into_iter()
                    .filter(|(_, members)| members.len() >= 2)
                    .map(|(g, members)| {
                        let text = self.merged[g].clone().unwrap_or_else(|| {
                            members
                                .iter()
                                .map(|i| input.memories[*i].text.as_str())
                                .max_by_key(|t| (t.len(), *t))
                                .unwrap_or("")
                                .to_string()
                        });
                        ProposedGroup {
                            memory_ids: members
                                .iter()
                                .map(|i| input.memories[*i].id.clone())
                                .collect(),
                            text,
                            confidence: 0.99,
                            reasoning: format!("one truth group ({g})"),
                        }
                    })
                    .collect();
                Some(Reply::Propose(ProposeReply { groups }))
            }
            Task::ConsolidateVerify => {
                let first = input
                    .memories
                    .first()
                    .and_then(|m| self.group_of.get(&m.id));
                let approve = first.is_some()
                    && input
                        .memories
                        .iter()
                        .all(|m| self.group_of.get(&m.id) == first);
                Some(Reply::Verify(VerifyReply {
                    approve,
                    confidence: 0.99,
                    reasoning: if approve {
                        "one truth group".into()
                    } else {
                        "not one truth group".into()
                    },
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::tasks::MemoryView;

    fn view(id: &str, text: &str) -> MemoryView {
        MemoryView {
            id: id.into(),
            kind: "fact".into(),
            created_at: "2025-01-01T00:00:00Z".into(),
            happens_at: None,
            text: text.into(),
            dates: Vec::new(),
            cluster: None,
        }
    }

    fn input(task: Task, memories: Vec<MemoryView>) -> TaskInput {
        TaskInput {
            task,
            memories,
            proposal: Some("x".into()),
            now: "2025-02-01T00:00:00Z".into(),
            question: None,
        }
    }

    #[test]
    fn it_proposes_and_approves_only_truth_groups() {
        let oracle = Oracle::from_truth(&serde_json::json!({
            "duplicate_groups": [{"memory_ids": ["a", "b"]}],
            "merge_groups": [{"memory_ids": ["c", "d"], "merged_text": "C and D."}],
        }))
        .unwrap();
        let cluster = vec![
            view("a", "Ana likes tea."),
            view("b", "Ana really likes tea."),
            view("c", "C."),
            view("d", "D."),
            view("e", "Unrelated."),
        ];
        let Some(Reply::Propose(reply)) = oracle.answer(&input(Task::ConsolidatePropose, cluster))
        else {
            panic!("a proposal");
        };
        let groups: Vec<(Vec<String>, String)> = reply
            .groups
            .into_iter()
            .map(|g| (g.memory_ids, g.text))
            .collect();
        assert_eq!(
            groups,
            vec![
                (vec!["a".into(), "b".into()], "Ana really likes tea.".into()),
                (vec!["c".into(), "d".into()], "C and D.".into()),
            ]
        );
        let verdict = |ids: &[&str]| match oracle.answer(&input(
            Task::ConsolidateVerify,
            ids.iter().map(|id| view(id, "t")).collect(),
        )) {
            Some(Reply::Verify(v)) => v.approve,
            _ => panic!("a verdict"),
        };
        assert!(verdict(&["a", "b"]));
        assert!(!verdict(&["a", "c"]), "two truth groups");
        assert!(!verdict(&["e", "a"]), "a memory of no group");
        assert!(
            oracle
                .answer(&input(Task::Refine, vec![view("a", "t")]))
                .is_none()
        );
    }
}
