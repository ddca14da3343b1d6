//! Which users a job run processes: all of them, one (`--user`), or one shard of them
//! (`--shard I/N`). Users are partitioned by a stable hash of their id (FNV-1a, 64 bits, the
//! same on every machine, build and run), so N processes, on one host or many, each given
//! one of `0/N` .. `N-1/N`, process every user exactly once between them, and a user stays in
//! its shard from one night to the next.

use std::fmt;
use std::str::FromStr;

use crate::hash::fnv1a;

/// One of `count` shards (`index` from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The shard of `count` that `user` belongs to.
    pub fn index_of(user: &str, count: u32) -> u32 {
        (fnv1a(&[user]) % u64::from(count.max(1))) as u32
    }

    pub fn contains(&self, user: &str) -> bool {
        Shard::index_of(user, self.count) == self.index
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let shape = || {
            format!("shard {text:?} is not I/N (the I-th of N shards, I from 0 to N-1, e.g. 0/4)")
        };
        let (index, count) = text.trim().split_once('/').ok_or_else(shape)?;
        let index: u32 = index.trim().parse().map_err(|_| shape())?;
        let count: u32 = count.trim().parse().map_err(|_| shape())?;
        if count == 0 {
            return Err(format!("shard {text:?}: N must be at least 1"));
        }
        if index >= count {
            return Err(format!(
                "shard {text:?}: I must be below N (the shards of {count} are 0/{count} to {}/{count})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

/// The users a run works on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UserScope {
    #[default]
    All,
    One(String),
    Shard(Shard),
}

impl UserScope {
    pub fn contains(&self, user: &str) -> bool {
        match self {
            UserScope::All => true,
            UserScope::One(one) => one == user,
            UserScope::Shard(shard) => shard.contains(user),
        }
    }

    /// Words for reports and errors: "every user", "user ana", "shard 1/4".
    pub fn label(&self) -> String {
        match self {
            UserScope::All => "every user".to_string(),
            UserScope::One(user) => format!("user {user}"),
            UserScope::Shard(shard) => format!("shard {shard}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_parse_or_say_what_is_wrong() {
        let ok = [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1/2 ", (1, 2))];
        for (text, (index, count)) in ok {
            assert_eq!(text.parse::<Shard>(), Ok(Shard { index, count }), "{text}");
        }
        let bad = [
            ("3/2", "I must be below N"),
            ("2/2", "0/2 to 1/2"),
            ("0/0", "N must be at least 1"),
            ("1", "is not I/N"),
            ("a/2", "is not I/N"),
            ("-1/2", "is not I/N"),
            ("1/2/3", "is not I/N"),
            ("", "is not I/N"),
        ];
        for (text, why) in bad {
            let err = text.parse::<Shard>().unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn every_user_falls_in_exactly_one_shard() {
        let users: Vec<String> = (0..2000).map(|i| format!("user-{i:05}")).collect();
        for count in [1u32, 2, 3, 7, 16] {
            let shards: Vec<Shard> = (0..count).map(|index| Shard { index, count }).collect();
            let mut sizes = vec![0usize; count as usize];
            for user in &users {
                let holders: Vec<&Shard> = shards.iter().filter(|s| s.contains(user)).collect();
                assert_eq!(holders.len(), 1, "{user} over {count} shards");
                sizes[holders[0].index as usize] += 1;
            }
            // Roughly even: no shard under half or over twice its share.
            let share = users.len() / count as usize;
            assert!(
                sizes.iter().all(|s| *s * 2 >= share && *s <= share * 2),
                "{count}: {sizes:?}"
            );
        }
    }

    #[test]
    fn the_partition_is_fixed_across_builds() {
        // Hosts of one deployment must agree: these values change only if the hash does,
        // which would move users between shards (a breaking change to announce).
        let got: Vec<u32> = ["ana", "ben", "user-01", "user-02", "conv-26"]
            .iter()
            .map(|u| Shard::index_of(u, 4))
            .collect();
        assert_eq!(got, GOLDEN);
    }
    const GOLDEN: [u32; 5] = [1, 2, 2, 3, 2];

    #[test]
    fn scopes_hold_what_they_name() {
        let shard = UserScope::Shard(Shard { index: 1, count: 2 });
        let in_one = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .filter(|u| shard.contains(u))
            .count();
        assert!(in_one > 0 && in_one < 6);
        assert!(UserScope::All.contains("anyone"));
        assert!(UserScope::One("ana".into()).contains("ana"));
        assert!(!UserScope::One("ana".into()).contains("ben"));
        assert_eq!(shard.label(), "shard 1/2");
    }
}
