//! One process per job and user: before a job writes anything it takes an advisory file lock
//! (`flock`), which the kernel releases when the process ends however it ends, so a lock is
//! never left behind by a crash. The lock file records its owner (run, job, user, host, pid,
//! start), so the loser of a race is told who holds it, and the winner after a crash knows whom
//! it took over from.
//!
//! Scope: a run for every user holds `<job>.lock` exclusively; a run for one user holds
//! `<job>.lock` shared and `<job>.user-<hash>.lock` exclusively. Runs of one job for different
//! users therefore go side by side; a run for all users excludes them all.
//!
//! Where: beside the tables (`<db>/_memlife_locks/`) for a local database; for other URIs
//! (object storage, `memory://`) under `~/.cache/memlife/locks/<hash of the URI>/`, which
//! serialises the processes of one host only.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::logic::hash::fnv1a;

/// Who holds (or last held) a lock.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LockOwner {
    pub run_id: String,
    pub job: String,
    pub user: Option<String>,
    pub host: String,
    pub pid: u32,
    pub started_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{job} is already running{} on this database: run {} (pid {} on {}, since {}); \
         wait for it to finish, or stop it",
        scope_text(.user), .owner.run_id, .owner.pid, .owner.host, .owner.started_at
    )]
    Held {
        job: String,
        user: Option<String>,
        owner: Box<LockOwner>,
    },
    #[error("cannot use lock file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn scope_text(user: &Option<String>) -> String {
    match user {
        // A shard's lock (`--shard I/N`) is taken under the key "shard I/N".
        Some(shard) if shard.starts_with("shard ") => format!(" for {shard}"),
        Some(user) => format!(" for user {user}"),
        None => String::new(),
    }
}

/// A held lock; released when dropped (or when the process dies).
pub struct JobLock {
    files: Vec<File>,
    /// The owner recorded by the process that held the lock before, if it did not release it
    /// cleanly (it was killed): its runs are abandoned.
    pub took_over: Option<LockOwner>,
}

/// The folder holding a database's lock files.
pub fn lock_dir(db_uri: &str) -> PathBuf {
    if !db_uri.contains("://") {
        let folder = std::path::absolute(db_uri).unwrap_or_else(|_| PathBuf::from(db_uri));
        return folder.join("_memlife_locks");
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache/memlife/locks")
        .join(format!("{:016x}", fnv1a(&[db_uri])))
}

fn job_path(dir: &Path, job: &str) -> PathBuf {
    dir.join(format!("{job}.lock"))
}

fn user_path(dir: &Path, job: &str, user: &str) -> PathBuf {
    dir.join(format!("{job}.user-{:016x}.lock", fnv1a(&[user])))
}

fn open(path: &Path) -> Result<File, LockError> {
    let io = |source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io)
}

fn read_owner(file: &mut File) -> Option<LockOwner> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

fn write_owner(file: &mut File, owner: Option<&LockOwner>, path: &Path) -> Result<(), LockError> {
    let io = |source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = owner.map_or_else(String::new, |o| {
        serde_json::to_string(o).unwrap_or_default()
    });
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_data().map_err(io)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_string())
}

/// Takes the lock of `job` for `user` (all users when `None`), or says who holds it.
pub fn acquire(
    db_uri: &str,
    job: &str,
    user: Option<&str>,
    run_id: &str,
) -> Result<JobLock, LockError> {
    let dir = lock_dir(db_uri);
    let owner = LockOwner {
        run_id: run_id.to_string(),
        job: job.to_string(),
        user: user.map(str::to_string),
        host: hostname(),
        pid: std::process::id(),
        started_at: chrono::Utc::now().to_rfc3339(),
    };
    let held = |file: &mut File| LockError::Held {
        job: job.to_string(),
        user: user.map(str::to_string),
        owner: Box::new(read_owner(file).unwrap_or_default()),
    };
    let job_file_path = job_path(&dir, job);
    let mut job_file = open(&job_file_path)?;
    let io = |path: &Path, source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    match user {
        None => {
            match job_file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Err(held(&mut job_file)),
                Err(TryLockError::Error(e)) => return Err(io(&job_file_path, e)),
            }
            let took_over = read_owner(&mut job_file);
            write_owner(&mut job_file, Some(&owner), &job_file_path)?;
            Ok(JobLock {
                files: vec![job_file],
                took_over,
            })
        }
        Some(user) => {
            match job_file.try_lock_shared() {
                Ok(()) => {}
                // An all-users run holds it: its owner is written in the job file.
                Err(TryLockError::WouldBlock) => return Err(held(&mut job_file)),
                Err(TryLockError::Error(e)) => return Err(io(&job_file_path, e)),
            }
            let user_file_path = user_path(&dir, job, user);
            let mut user_file = open(&user_file_path)?;
            match user_file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Err(held(&mut user_file)),
                Err(TryLockError::Error(e)) => return Err(io(&user_file_path, e)),
            }
            let took_over = read_owner(&mut user_file);
            write_owner(&mut user_file, Some(&owner), &user_file_path)?;
            Ok(JobLock {
                files: vec![job_file, user_file],
                took_over,
            })
        }
    }
}

impl JobLock {
    /// Clears the owner record before the lock is released, so the next holder knows the run
    /// ended cleanly. (A killed process never gets here: its record stays for the next one.)
    pub fn release(mut self) {
        if let Some(file) = self.files.last_mut() {
            let _ = file.set_len(0);
        }
    }
}

/// Whether a live process holds the lock of `job` for `user` (probed without waiting).
pub fn is_held(db_uri: &str, job: &str, user: Option<&str>) -> Result<bool, LockError> {
    let dir = lock_dir(db_uri);
    let path = match user {
        None => job_path(&dir, job),
        Some(user) => user_path(&dir, job, user),
    };
    if !path.exists() {
        return Ok(false);
    }
    let file = open(&path)?;
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(LockError::Io {
            path: path.display().to_string(),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("db").display().to_string();
        (dir, uri)
    }

    #[test]
    fn a_second_holder_is_refused_and_told_who_holds_it() {
        let (_dir, uri) = db();
        let first = acquire(&uri, "link", None, "run-1").unwrap();
        assert!(first.took_over.is_none());
        let error = acquire(&uri, "link", None, "run-2").err().unwrap();
        let text = error.to_string();
        assert!(text.contains("link is already running"), "{text}");
        assert!(text.contains("run-1"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(is_held(&uri, "link", None).unwrap());
        first.release();
        assert!(!is_held(&uri, "link", None).unwrap());
        let again = acquire(&uri, "link", None, "run-3").unwrap();
        assert!(again.took_over.is_none(), "a clean release leaves no owner");
    }

    #[test]
    fn users_run_side_by_side_but_not_beside_an_all_users_run() {
        let (_dir, uri) = db();
        let a = acquire(&uri, "scores", Some("a"), "run-a").unwrap();
        let b = acquire(&uri, "scores", Some("b"), "run-b").unwrap();
        assert!(acquire(&uri, "scores", Some("a"), "run-a2").is_err());
        assert!(acquire(&uri, "scores", None, "run-all").is_err());
        // Another job is not affected.
        let other = acquire(&uri, "link", None, "run-link").unwrap();
        drop((a, b, other));
        let all = acquire(&uri, "scores", None, "run-all").unwrap();
        assert!(acquire(&uri, "scores", Some("a"), "run-a3").is_err());
        drop(all);
    }

    #[test]
    fn a_lock_dropped_without_release_is_taken_over_with_its_owner() {
        let (_dir, uri) = db();
        // Dropping without `release` is what a killed process leaves: the kernel frees the
        // lock, the owner record stays.
        drop(acquire(&uri, "embed", Some("u"), "run-dead").unwrap());
        let next = acquire(&uri, "embed", Some("u"), "run-next").unwrap();
        let previous = next.took_over.clone().expect("owner of the killed run");
        assert_eq!(previous.run_id, "run-dead");
        assert_eq!(previous.user.as_deref(), Some("u"));
    }

    #[test]
    fn object_store_databases_lock_under_the_home_cache() {
        let dir = lock_dir("s3://bucket/memlife");
        assert!(dir.to_string_lossy().contains(".cache/memlife/locks"));
        assert_ne!(dir, lock_dir("s3://bucket/other"));
    }
}
