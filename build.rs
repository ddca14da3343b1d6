//! Records what `memlife bench targets` writes beside every figure: the build profile (the
//! folder cargo builds into: `debug`, `perf`, `release`) and the commit built (read from
//! `.git` without running git; "unknown" outside a clone).

use std::path::{Path, PathBuf};

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out.
    let profile = out
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MEMLIFE_BUILD_PROFILE={profile}");
    println!("cargo:rerun-if-changed=build.rs");
    let git = Path::new(".git");
    let commit = commit(git).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MEMLIFE_BUILD_COMMIT={commit}");
}

/// The commit HEAD names: a detached hash, or the hash its branch's ref (loose or packed)
/// holds. Cargo is told to rerun when HEAD or that ref moves.
fn commit(git: &Path) -> Option<String> {
    let head_file = git.join("HEAD");
    watch(&head_file);
    let head = std::fs::read_to_string(&head_file).ok()?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref: ") else {
        return Some(head.chars().take(12).collect());
    };
    let loose = git.join(reference);
    let packed = git.join("packed-refs");
    watch(&loose);
    watch(&packed);
    let hash = match std::fs::read_to_string(&loose) {
        Ok(text) => text.trim().to_string(),
        Err(_) => std::fs::read_to_string(&packed)
            .ok()?
            .lines()
            .find(|l| l.ends_with(&format!(" {reference}")))?
            .split(' ')
            .next()?
            .to_string(),
    };
    Some(hash.chars().take(12).collect())
}

/// Reruns the script when `path` changes; a path that does not exist is not watched (cargo
/// would rerun the script, and rebuild memlife, on every build).
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
