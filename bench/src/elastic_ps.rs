//! `petrel bench elastic`'s parameter-server apps (ps-lr, ps-mf): each run as `petrel
//! train` runs it ([`petrel::train::run_ps`]), once with a fixed membership and once with a
//! standby worker joining and a worker leaving on the bench's plan (its `w<k>` nodes are
//! `worker-<k>` here). SGD under SSP is not deterministic, so `identical` is null and
//! `within_tolerance` compares the held-out figure (ps-lr: test log-loss to 0.05, ps-mf:
//! test RMSE to 0.02, the tolerances of the restart tests); `objective_rel_diff` is that
//! figure's relative difference.

use crate::elastic::{AppFigures, ElasticBenchArgs, orphans};
use petrel::CliError;
use petrel_ps::{PsApp, PsLr, PsMf, PsTrainArgs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `petrel train <app>`'s flags.
#[derive(clap::Parser)]
struct Flags<C: clap::Args> {
    #[command(flatten)]
    train: PsTrainArgs<C>,
}

/// The held-out figure compared, and its tolerance.
fn figure(app: &str) -> (&'static str, f64) {
    match app {
        "ps-lr" => ("test_log_loss", 0.05),
        _ => ("test_rmse", 0.02),
    }
}

/// The bench's plan with the PS node names: `w2` is `worker-2`.
fn ps_plan(plan: &str) -> String {
    (plan.split(' '))
        .map(|word| match word.strip_prefix('w') {
            Some(k) if !k.is_empty() && k.trim_end_matches(';').parse::<u32>().is_ok() => {
                format!("worker-{k}")
            }
            _ => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The metrics of `app` run with `extra` flags into `out`; `None` if it did not end within
/// `max_seconds` (a hang).
fn run_app(
    args: &ElasticBenchArgs,
    app: &str,
    out: PathBuf,
    extra: &[String],
) -> Result<Option<serde_json::Value>, CliError> {
    let clocks = if args.quick { "80" } else { "200" };
    let clocks_flag = if app == "ps-lr" {
        "--clocks"
    } else {
        "--max-clocks"
    };
    let transport = format!("{:?}", args.transport).to_lowercase();
    let mut line: Vec<String> = ["bench", "--transport", &transport, clocks_flag, clocks]
        .into_iter()
        .chain([
            "--clock-ms",
            "40",
            "--checkpoint-every",
            "0",
            "--shards",
            "2",
        ])
        .map(String::from)
        .collect();
    line.extend(["--workers".into(), args.workers.to_string()]);
    line.extend(["--out".into(), out.display().to_string()]);
    line.extend(extra.iter().cloned());
    fn start<A: PsApp>(line: Vec<String>, out: PathBuf) -> Result<Runner, CliError>
    where
        A::Config: clap::Args + serde::Serialize + Send + 'static,
    {
        use clap::Parser;
        let flags =
            Flags::<A::Config>::try_parse_from(line).map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(std::thread::spawn(move || {
            petrel::train::run_ps::<A>(flags.train, &out)
        }))
    }
    let runner = match app {
        "ps-lr" => start::<PsLr>(line, out.clone())?,
        _ => start::<PsMf>(line, out.clone())?,
    };
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    while !runner.is_finished() {
        if Instant::now() >= deadline {
            tracing::warn!(app, "run did not end in time: a hang");
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let joined = runner.join();
    joined.map_err(|_| CliError::Usage(format!("{app}: the run panicked")))??;
    let path = out.join("metrics.json");
    let text = std::fs::read(&path).map_err(CliError::io(&path))?;
    Ok(Some(
        serde_json::from_slice(&text).map_err(CliError::json(&path))?,
    ))
}

/// A run on its own thread.
type Runner = std::thread::JoinHandle<Result<String, CliError>>;

/// The bench's plan for the PS shards: the added node is the standby `shard-2`, the
/// removed one `shard-1` (the bench runs two shards; `shard-0` also hosts the monitor).
fn shard_plan(plan: &str) -> String {
    let mut verb = "";
    (plan.split(' '))
        .map(|word| {
            let target = match verb {
                "add" => Some("shard-2"),
                "remove" => Some("shard-1"),
                _ => None,
            };
            verb = word;
            match target {
                Some(t) => format!("{t}{}", if word.ends_with(';') { ";" } else { "" }),
                None => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `app` (ps-lr or ps-mf) with a fixed membership against a join and a leave of workers,
/// and (ps-lr, and ps-mf without `--quick`) of shards, against the same fixed run.
pub(crate) fn compare(
    args: &ElasticBenchArgs,
    app: &str,
) -> Result<(AppFigures, Option<AppFigures>), CliError> {
    let dir = |run: &str| -> PathBuf { Path::new(&args.out).join(app).join(run) };
    let fixed = run_app(args, app, dir("fixed"), &[])?;
    let plan = ["--standby-workers", "1", "--scale", &ps_plan(&args.plan)].map(String::from);
    let workers = figures(
        args,
        app,
        "workers",
        &fixed,
        run_app(args, app, dir("elastic"), &plan)?,
    );
    let shards = match app == "ps-lr" || !args.quick {
        true => {
            let plan = ["--standby-shards", "1", "--scale", &shard_plan(&args.plan)];
            let elastic = run_app(args, app, dir("shards"), &plan.map(String::from))?;
            Some(figures(args, app, "shards", &fixed, elastic))
        }
        false => None,
    };
    Ok((workers, shards))
}

/// The figures of `app`'s `elastic` run (changes of `kind`) against its `fixed` one.
fn figures(
    args: &ElasticBenchArgs,
    app: &str,
    kind: &str,
    fixed: &Option<serde_json::Value>,
    elastic: Option<serde_json::Value>,
) -> AppFigures {
    let (key, tolerance) = figure(app);
    let seconds = |m: &Option<serde_json::Value>| m.as_ref().and_then(|m| m["seconds"].as_f64());
    let value = |m: &Option<serde_json::Value>| m.as_ref().and_then(|m| m["final"][key].as_f64());
    let changes = (elastic.as_ref())
        .and_then(|m| m["changes"].as_array().map(|c| c.len() as u64))
        .unwrap_or(0);
    let diff = match (value(fixed), value(&elastic)) {
        (Some(f), Some(e)) => (e - f).abs(),
        _ => f64::NAN,
    };
    let (fixed_s, elastic_s) = (
        seconds(fixed).unwrap_or(f64::NAN),
        seconds(&elastic).unwrap_or(f64::NAN),
    );
    AppFigures {
        app: app.into(),
        kind: kind.into(),
        changes,
        identical: None,
        within_tolerance: diff <= tolerance,
        objective_rel_diff: diff / value(fixed).map_or(f64::NAN, f64::abs),
        fixed_s,
        elastic_s,
        seconds_lost_per_change: (elastic_s - fixed_s) / changes.max(1) as f64,
        orphans: orphans(args.transport),
        hangs: usize::from(fixed.is_none()) + usize::from(elastic.is_none()),
        rows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plan_names_the_ps_worker_nodes() {
        let plan = super::ps_plan("at=1s add w2; at=2s remove w0");
        assert_eq!(plan, "at=1s add worker-2; at=2s remove worker-0");
        assert_eq!(super::ps_plan("at=1s add worker"), "at=1s add worker");
        let shards = super::shard_plan("at=1s add w2; at=2s remove w0");
        assert_eq!(shards, "at=1s add shard-2; at=2s remove shard-1");
    }
}
