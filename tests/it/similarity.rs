//! `memlife bench similarity`: the all-pairs search that `cluster --mode full` and `link` use,
//! through the CLI, with its recall against the exact loop.

use crate::common::{memlife, memlife_on_cpu, stderr, stdout};

/// Runs `memlife --json bench similarity ARGS` (ARGS split on spaces) and reads its report.
fn bench(args: &str) -> serde_json::Value {
    let mut all = vec!["--json", "bench", "similarity"];
    all.extend(args.split_whitespace());
    let output = memlife(&all);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout(&output)).expect("a JSON report")
}

fn int8_cpu() -> bool {
    cfg!(target_arch = "x86_64") && memlife::logic::similarity::int8::avx2_available()
}

#[test]
fn text_like_vectors_are_searched_over_a_checked_partition() {
    if !int8_cpu() {
        eprintln!("skipped: no int8 kernel on this CPU");
        return;
    }
    // Past the partition's 32,768 rows: lexical vectors of synthetic memory texts.
    let report = bench("--vectors 33000 --dim 64 --k 10 --naive-queries 100");
    let plan = &report["partition"];
    assert!(plan["probes"].as_u64().is_some(), "{report}");
    assert!(plan["miss_bound"].as_f64().unwrap() <= 0.0025, "{report}");
    assert!(plan["work_fraction"].as_f64().unwrap() < 0.4, "{report}");
    assert!(report["recall_at_k"].as_f64().unwrap() >= 0.99, "{report}");
    // The same search scoring every pair: no plan, the same recall bar.
    let every = bench("--vectors 33000 --dim 64 --k 10 --naive-queries 100 --no-partition");
    assert!(every["partition"].is_null());
    assert!(every["recall_at_k"].as_f64().unwrap() >= 0.99, "{every}");
}

#[test]
fn vectors_without_structure_score_every_pair_and_avx2_runs_anywhere_it_can() {
    if !int8_cpu() {
        eprintln!("skipped: no int8 kernel on this CPU");
        return;
    }
    // Uniform random vectors: the check refuses every partition, every pair is scored.
    let report =
        bench("--vectors 33000 --dim 32 --k 5 --naive-queries 100 --data random --isa avx2");
    assert_eq!(report["kernel"], "int8-rerank-avx2");
    assert!(report["partition"]["probes"].is_null(), "{report}");
    assert!(report["partition"]["miss_bound"].as_f64().unwrap() > 0.0025);
    assert!(report["recall_at_k"].as_f64().unwrap() >= 0.99, "{report}");
    // Below 2048 vectors the exact kernel answers, and finds exactly the naive loop's.
    let small = bench("--vectors 500 --dim 16 --k 5 --naive-queries 500");
    assert_eq!(small["kernel"], "exact-f32");
    assert_eq!(small["queries_with_identical_neighbours"], 500);
}

/// An AVX2-only CPU, emulated: qemu's `EPYC-Milan` model (a Zen 3 EPYC: AVX2 and FMA, no
/// AVX-512, like the machines issue 13 names). qemu's translator (TCG) runs AVX2 and FMA but
/// no AVX-512 instruction, so one anywhere on this path would end the process with SIGILL. The run-time dispatch must choose the AVX2 kernel by itself (no
/// `--isa`), plan and check the partition, and keep recall. Emulated timings mean nothing and
/// are not read.
#[test]
fn an_avx2_only_cpu_gets_the_avx2_kernel_and_the_partition() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the emulated CPU is an x86_64 one");
        return;
    }
    let output = memlife_on_cpu(
        "EPYC-Milan",
        &[
            "--json",
            "bench",
            "similarity",
            "--vectors",
            "33000",
            "--dim",
            "64",
            "--k",
            "10",
            "--naive-queries",
            "50",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("a JSON report");
    assert_eq!(report["kernel"], "int8-rerank-avx2", "{report}");
    assert!(report["partition"]["probes"].as_u64().is_some(), "{report}");
    assert!(report["recall_at_k"].as_f64().unwrap() >= 0.99, "{report}");
}
