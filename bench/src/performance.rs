//! The performance page: `petrel bench record` runs a bench and keeps its JSON line with
//! the command, the date and the machine (`docs/figures/perf/<name>.json`);
//! `petrel bench report` writes BENCHMARKS.md from those records. Nothing on the page is
//! typed by hand but what each bench measures and which of its keys are its headline.

use crate::BenchError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

/// Where the records live unless told otherwise.
pub const RECORDS: &str = "docs/figures/perf";

/// `petrel bench record`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// The record's name (its file is `<records>/<name>.json`); the bench's name unless
    /// given, so a second record of one bench needs one.
    #[arg(long)]
    pub name: Option<String>,
    /// Directory of the records.
    #[arg(long, default_value = RECORDS)]
    pub records: PathBuf,
    /// The bench and its flags, as after `petrel bench`.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub bench: Vec<String>,
}

/// One recorded run of a bench.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The bench's name (`lasso-scale`).
    pub bench: String,
    /// The whole command, as a user types it.
    pub command: String,
    /// When it ended (RFC 7231 date, UTC).
    pub recorded: String,
    /// The commit it was built from, when run inside a git checkout.
    #[serde(default)]
    pub commit: Option<String>,
    /// The machine it ran on.
    pub machine: Machine,
    /// How long the command ran.
    pub wall_s: f64,
    /// The bench's JSON line.
    pub figures: Value,
}

/// What the figures depend on besides the code.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// Total memory.
    pub memory_gib: Option<f64>,
    /// The CPU's model name.
    pub cpu: Option<String>,
    /// One-minute load average at the start and at the end.
    pub load: (Option<f64>, Option<f64>),
}

impl Machine {
    fn probe() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let meminfo = read("/proc/meminfo");
        let memory_gib = meminfo.as_deref().and_then(|m| {
            let kib: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((kib / (1024.0 * 1024.0) * 10.0).round() / 10.0)
        });
        let cpu = read("/proc/cpuinfo").and_then(|c| {
            let line = c.lines().find(|l| l.starts_with("model name"))?;
            Some(line.split_once(':')?.1.trim().to_string())
        });
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib,
            cpu,
            load: (load_average(), None),
        }
    }

    fn describe(&self) -> String {
        let mut s = format!("{} cores", self.cores);
        if let Some(gib) = self.memory_gib {
            let _ = write!(s, ", {gib:.0} GiB");
        }
        let load = |x: Option<f64>| x.map_or("?".into(), |v| format!("{v:.1}"));
        if self.load.0.is_some() || self.load.1.is_some() {
            let _ = write!(s, ", load {}-{}", load(self.load.0), load(self.load.1));
        }
        s
    }
}

fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The checkout's commit, `+` when it has uncommitted changes.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| Command::new("git").args(args).output().ok();
    let head = git(&["rev-parse", "--short", "HEAD"]).filter(|o| o.status.success())?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|o| !o.stdout.is_empty());
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    Some(if dirty { head + "+" } else { head })
}

/// A command line as a shell reads it back (arguments with spaces or quotes quoted).
fn shell_words(args: &[String]) -> String {
    let quote = |a: &String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c))
        {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The last line of `stdout` that is a JSON object: the bench's figures.
fn figures_of(last_lines: &[String]) -> Option<Value> {
    last_lines.iter().rev().find_map(|l| {
        serde_json::from_str::<Value>(l.trim())
            .ok()
            .filter(Value::is_object)
    })
}

/// Runs the bench (this binary, `petrel-bench <bench> …`), echoes its output and writes its
/// record; a bench that fails or prints no JSON line writes none.
pub fn run(args: RecordArgs) -> Result<(), BenchError> {
    let bench = args.bench[0].clone();
    let name = args.name.clone().unwrap_or_else(|| bench.clone());
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(BenchError::Incomplete(format!(
            "record name {name:?}: use letters, digits and '-'"
        )));
    }
    let exe = std::env::current_exe().map_err(BenchError::io("this program's path"))?;
    let mut machine = Machine::probe();
    let started = Instant::now();
    let mut child = Command::new(&exe)
        .args(&args.bench)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(BenchError::io(format!("start {}", exe.display())))?;
    let mut tail: Vec<String> = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(BenchError::io("the bench's output"))?;
            println!("{line}");
            tail.push(line);
            if tail.len() > 4 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().map_err(BenchError::io("wait for the bench"))?;
    if !status.success() {
        return Err(BenchError::Incomplete(format!(
            "petrel bench {bench} failed ({status}); nothing recorded"
        )));
    }
    let figures = figures_of(&tail).ok_or_else(|| {
        BenchError::Incomplete(format!("petrel bench {bench} printed no JSON line"))
    })?;
    machine.load.1 = load_average();
    let record = Record {
        bench,
        command: format!("petrel bench {}", shell_words(&args.bench)),
        recorded: httpdate::fmt_http_date(SystemTime::now()),
        commit: git_commit(),
        machine,
        wall_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        figures,
    };
    std::fs::create_dir_all(&args.records)
        .map_err(BenchError::io(args.records.display().to_string()))?;
    let path = args.records.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(&record)?;
    std::fs::write(&path, text + "\n").map_err(BenchError::io(path.display().to_string()))?;
    println!("recorded {}", path.display());
    Ok(())
}

/// Each bench: its name, what it measures, and the keys whose values the page shows,
/// separated by spaces (`a.b` nested, `list[].key` every element's, `*.key` every member's).
pub const BENCHES: &[(&str, &str, &str)] = &[
    (
        "transport",
        "raw quinn vs petrel, 64 x 4 MiB in interleaved pairs; a 64 KiB probe behind a 256 MiB backlog on 100 Mbit/s",
        "ratio petrel_mbps raw_quinn_mbps priority_delay_ratio",
    ),
    (
        "load",
        "MB/s of each loader, cold text (in all and per parsing thread) and binary cache, on generated ~100 MB files",
        "libsvm_mb_per_s ratings_mb_per_s bow_mb_per_s libsvm_mb_per_s_per_core ratings_mb_per_s_per_core bow_mb_per_s_per_core cache_mb_per_s",
    ),
    (
        "soak",
        "1 aggregator + 3 workers as processes under sustained load, every result checked, RSS sampled each second",
        "duration_s messages errors rss_growth_after_warmup rss_slope_after_warmup_mb_per_min",
    ),
    (
        "chaos",
        "seeded kills, pauses, hostile members and (root) link cuts against multi-process jobs that restart by themselves",
        "runs jobs_completed outputs_identical outputs_within_tolerance restarts max_recovery_s orphans hangs",
    ),
    (
        "ps",
        "parameter-server push+pull MB/s and latency per row size, 1x1 and 2x2 node processes over QUIC, beside the transport",
        "scaling_2x2_over_1x1 sizes[].ps_mbps sizes[].ps_over_transport",
    ),
    (
        "consistency",
        "MF and LR under BSP, SSP(s), ESSP(s) and async, 4 workers with stragglers: time to target, staleness",
        "apps.mf.bsp_over_best_ssp apps.mf.best_ssp_over_best_essp apps.lr.bsp_over_best_ssp apps.lr.best_ssp_over_best_essp apps.lr.essp_over_ssp_content_staleness_mean",
    ),
    (
        "managed",
        "managed communication (Bösen's mechanics) vs clock-boundary updates and BSP on shaped links, skewed data (--netns: every node a process in its own network namespace, tc on both link ends)",
        "speedup_vs_clock speedup_vs_bsp flush_fraction",
    ),
    (
        "adarevision",
        "AdaRevision at Bösen's alpha 0.1 against grids of fixed SGD and Adagrad steps, LR and MF, async; then each rule's best loss at injected delays of 0 to 10,000 updates (sparse power-law LR)",
        "apps.lr.default_adarevision_over_best_tuned apps.mf.default_adarevision_over_best_tuned delay_summary.adarevision_degradation delay_summary.adagrad_degradation",
    ),
    (
        "p3",
        "sequential vs fifo vs priority slices, 2 workers + 2 shards, emulated compute on shaped links, against the ideal pipeline",
        "sequential_s fifo_s p3_s speedup_vs_sequential p3_over_ideal",
    ),
    (
        "p3-real",
        "P3 on real candle compute, 2 workers + 2 shards as processes: images/s and test accuracy per mode (real digits: `examples/data/digits_idx.py`, then `--train-data`/`--test-data idx:…`)",
        "*.p3_over_sequential *.p3_over_fifo *.accuracy",
    ),
    (
        "lasso",
        "scheduled Lasso: dynamic vs random vs cyclic scheduling to 1e-3 of the optimum",
        "updates_ratio time_ratio objective_gap",
    ),
    (
        "lasso-scale",
        "Gauss-Seidel Lasso, 1/2/4 worker processes, against the single-threaded baseline, by size",
        "sizes[].baseline_s sizes[].petrel_s sizes[].ratio",
    ),
    (
        "logistic-scale",
        "Gauss-Seidel sparse logistic regression, 1/2/4 worker processes, against the baseline, by size",
        "sizes[].baseline_s sizes[].petrel_s sizes[].ratio",
    ),
    (
        "lasso-schedulers",
        "scheduled Lasso split over 1, 2, 4 schedulers at depth 1 and 2, to duality gap 1e-5",
        "variants[].seconds",
    ),
    (
        "balance",
        "every STRADS app (Lasso, logistic, MF, LDA) with worker 0 slowed 2x, static against dynamic dealing (by measured worker speed) for the same work, interleaved pairs: median speed-up and final objective apart",
        "apps[].dynamic_over_static apps[].objective_rel_diff",
    ),
    (
        "elastic",
        "STRADS Lasso, logistic regression, MF and LDA, ps-lr, ps-mf, ps-lda and P3 with a worker joining and one leaving mid-run (P3 also a shard; ps-lr, ps-mf and ps-lda a shard in a run of their own), against a fixed membership: same model (or within tolerance), time lost per change, orphans and hangs",
        "apps[].within_tolerance apps[].seconds_lost_per_change apps[].orphans apps[].hangs",
    ),
    (
        "mf",
        "STRADS CCD++ with blocks rotating worker to worker, 1 and 2 workers, to a train RMSE",
        "time_to_target_s single_worker_time_to_target_s final_rmse",
    ),
    (
        "mf-scale",
        "STRADS MF by ratings count, 1/2/4 workers: seconds to target and speed-up",
        "speedup_2_at_largest sizes[].speedup_over_1",
    ),
    (
        "lda",
        "SparseLDA word rotation against data-parallel PS-LDA: tokens/s per core and log-likelihood",
        "tokens_per_s_per_core rotation_vs_ps_throughput final_loglik_per_token",
    ),
    (
        "lda-scale",
        "STRADS LDA tokens/s per core by corpus size, 1/2/4 workers",
        "per_core_spread sizes[].speedup",
    ),
];

/// `value` at `path` (`a.b`, `list[].key`, `*.key` for every member of an object),
/// formatted; `None` where it is absent.
fn headline(value: &Value, path: &str) -> Option<String> {
    if let Some(rest) = path.strip_prefix("*.") {
        let shown: Vec<String> = (value.as_object()?.iter())
            .filter_map(|(k, v)| Some(format!("{k} {}", headline(v, rest)?)))
            .collect();
        return (!shown.is_empty()).then(|| shown.join(", "));
    }
    if let Some((list, rest)) = path.split_once("[].") {
        let items = at(value, list)?.as_array()?;
        let shown: Vec<String> = items.iter().filter_map(|v| headline(v, rest)).collect();
        return (!shown.is_empty()).then(|| shown.join(" / "));
    }
    Some(format_value(at(value, path)?))
}

fn at<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |v, k| v.get(k))
}

fn format_value(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => n.as_f64().map_or(n.to_string(), significant),
        },
        Value::Array(items) => items
            .iter()
            .map(format_value)
            .collect::<Vec<_>>()
            .join(" / "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k} {}", format_value(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Three significant digits, without an exponent in the usual range.
fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{x:.digits$}")
}

/// The records in `dir`, by bench in [`BENCHES`] order (then unknown benches), then name.
pub fn records(dir: &Path) -> Result<Vec<(String, Record)>, BenchError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(BenchError::io(dir.display().to_string())(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(BenchError::io(dir.display().to_string()))?
            .path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let text =
            std::fs::read_to_string(&path).map_err(BenchError::io(path.display().to_string()))?;
        let record: Record = serde_json::from_str(&text).map_err(|e| {
            BenchError::Incomplete(format!("{}: not a bench record: {e}", path.display()))
        })?;
        out.push((name.to_string(), record));
    }
    let rank = |bench: &str| BENCHES.iter().position(|(b, ..)| *b == bench);
    out.sort_by(|(an, a), (bn, b)| {
        (rank(&a.bench).unwrap_or(usize::MAX), an).cmp(&(rank(&b.bench).unwrap_or(usize::MAX), bn))
    });
    Ok(out)
}

/// The page: a section a bench, each record's figures under it, and the benches not
/// recorded with the command that records them.
pub fn render(records: &[(String, Record)], dir: &Path) -> String {
    let mut s = String::from(
        "# Performance\n\n\
         Generated by `petrel bench report` from the records in `docs/figures/perf/`; do not \
         edit.\nEach bench prints a table and ends with one JSON line; `petrel bench record \
         <bench> [flags]` runs\nit and records that line with its command, date and machine \
         (`--name` for a second record of\none bench). The machines are shared and noisy: \
         trust ratios measured side by side in one run.\nBuild first: `cargo build --release \
         -p petrel -p petrel-bench`, then `target/release/petrel bench …`.\n",
    );
    for (bench, what, keys) in BENCHES {
        let mut what = what.chars();
        let first = what.next().map(|c| c.to_ascii_uppercase());
        let _ = write!(
            s,
            "\n## {bench}\n\n{}{}.\n",
            first.unwrap_or(' '),
            what.as_str()
        );
        let mine: Vec<_> = records.iter().filter(|(_, r)| r.bench == *bench).collect();
        if mine.is_empty() {
            let _ = writeln!(s, "Not recorded: `petrel bench record {bench}`.");
        }
        for (name, r) in mine {
            section_figures(&mut s, name, r, keys, dir);
        }
    }
    for (name, r) in records
        .iter()
        .filter(|(_, r)| !BENCHES.iter().any(|(b, ..)| *b == r.bench))
    {
        let _ = write!(s, "\n## {}\n\n", r.bench);
        section_figures(&mut s, name, r, "", dir);
    }
    s
}

fn section_figures(s: &mut String, name: &str, r: &Record, keys: &str, dir: &Path) {
    let mut shown: Vec<String> = keys
        .split_whitespace()
        .filter_map(|k| Some(format!("`{k}` {}", headline(&r.figures, k)?)))
        .collect();
    if shown.is_empty() {
        // A bench whose headline keys are absent: its top-level numbers.
        shown = (r.figures.as_object().into_iter().flatten())
            .filter(|(_, v)| v.is_number())
            .take(6)
            .map(|(k, v)| format!("`{k}` {}", format_value(v)))
            .collect();
    }
    let file = dir.join(format!("{name}.json"));
    let _ = writeln!(
        s,
        "`{}` ({}, {}{}, {:.0} s; [JSON]({})):\\\n{}.",
        r.command,
        r.recorded,
        r.commit
            .as_ref()
            .map_or(String::new(), |c| format!("commit {c}, ")),
        r.machine.describe(),
        r.wall_s,
        file.display(),
        shown.join("; ")
    );
}

/// Writes the page from the records in `records` to `out`; returns how many records it
/// shows.
pub fn write_page(records_dir: &Path, out: &Path) -> Result<usize, BenchError> {
    let records = records(records_dir)?;
    // The JSON links are relative to the page.
    let page_dir = out.parent().unwrap_or(Path::new(""));
    let links = records_dir.strip_prefix(page_dir).unwrap_or(records_dir);
    std::fs::write(out, render(&records, links))
        .map_err(BenchError::io(out.display().to_string()))?;
    Ok(records.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_bench_has_a_description_and_the_page_shows_its_headline() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: crate::BenchCommand,
        }
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            if !["record", "report"].contains(&name) {
                assert!(
                    BENCHES.iter().any(|(b, ..)| *b == name),
                    "{name} has no entry in BENCHES"
                );
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let record = |bench: &str, figures: &str| Record {
            bench: bench.into(),
            command: format!("petrel bench {bench}"),
            recorded: "Sun, 06 Dec 2026 22:00:00 GMT".into(),
            commit: Some("abc1234".into()),
            machine: Machine {
                cores: 2,
                memory_gib: Some(24.0),
                cpu: None,
                load: (Some(1.0), Some(2.5)),
            },
            wall_s: 12.0,
            figures: serde_json::from_str(figures).unwrap(),
        };
        let lasso = record(
            "lasso-scale",
            r#"{"sizes": [{"ratio": 2.654321, "baseline_s": 0.5}, {"ratio": 0.9}], "plot": "x.svg"}"#,
        );
        let odd = record("something-new", r#"{"speed": 12345.678, "note": "x"}"#);
        for (name, r) in [("lasso-scale", &lasso), ("something-new", &odd)] {
            let path = dir.path().join(format!("{name}.json"));
            std::fs::write(path, serde_json::to_string(r).unwrap()).unwrap();
        }
        let out = dir.path().join("BENCHMARKS.md");
        assert_eq!(write_page(dir.path(), &out).unwrap(), 2);
        let page = std::fs::read_to_string(&out).unwrap();
        assert!(page.contains("`sizes[].ratio` 2.65 / 0.900"), "{page}");
        assert!(page.contains("`sizes[].baseline_s` 0.500"), "{page}");
        assert!(
            page.contains("commit abc1234, 2 cores, 24 GiB, load 1.0-2.5"),
            "{page}"
        );
        assert!(page.contains("Not recorded: `petrel bench record transport`"));
        assert!(page.contains("## something-new"), "{page}");
        assert!(page.contains("`speed` 12346"), "{page}");
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        let e = write_page(dir.path(), &out).unwrap_err().to_string();
        assert!(e.contains("bad.json: not a bench record"), "{e}");
    }

    #[test]
    fn commands_are_recorded_as_a_shell_reads_them() {
        let args = ["p3-real", "--models", "lenet,mlp", "--note", "it's here"];
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            shell_words(&args),
            r"p3-real --models lenet,mlp --note 'it'\''s here'"
        );
        let tail = vec!["table".to_string(), r#"{"ratio": 1.5}"#.into(), "".into()];
        assert_eq!(figures_of(&tail).unwrap()["ratio"], 1.5);
        assert!(figures_of(&["[1]".to_string()]).is_none());
        let models = serde_json::json!({"lenet": {"accuracy": {"p3": 0.941}}, "mlp": {}});
        assert_eq!(headline(&models, "*.accuracy.p3").unwrap(), "lenet 0.941");
    }
}
