//! Consolidation decisions that need no store: which approved groups of one run may apply.
//!
//! Full-mode clustering lets a memory join more than one cluster (its layers), so two
//! approved groups of one run may share a memory. Folding it into both would tell its fact
//! twice in two memories; the first group (in the order the run approved them: the first
//! layer's clusters come first) takes it, and each later group holding a taken memory is
//! recorded stale. The next run clusters the new memory with what is left.

use std::collections::BTreeSet;

/// For each group in order: whether it applies (none of its members went into an earlier
/// group that applies).
pub fn first_claims<S: AsRef<str>>(groups: &[Vec<S>]) -> Vec<bool> {
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    groups
        .iter()
        .map(|members| {
            let free = members.iter().all(|m| !claimed.contains(m.as_ref()));
            if free {
                claimed.extend(members.iter().map(AsRef::as_ref));
            }
            free
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_goes_into_the_first_group_that_holds_it_only() {
        let groups = vec![
            vec!["a", "b"],
            vec!["a", "c"], // a is taken: stale
            vec!["c", "d"], // c was not taken (its group did not apply)
            vec!["d", "e"], // d is taken
            vec!["f", "g"],
        ];
        assert_eq!(first_claims(&groups), [true, false, true, false, true]);
        assert!(first_claims::<&str>(&[]).is_empty());
    }
}
