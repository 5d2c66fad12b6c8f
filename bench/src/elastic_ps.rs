//! `petrel bench elastic`'s parameter-server apps (ps-lr, ps-mf, ps-lda): each run as
//! `petrel train` runs it ([`petrel::train::run_ps`]), once with a fixed membership and
//! once with a standby worker joining and a worker leaving on the bench's plan (its `w<k>`
//! nodes are `worker-<k>` here), and once with a standby shard joining and a shard
//! leaving. SGD and Gibbs sampling under SSP are not deterministic, so
//! `identical` is null and `within_tolerance` compares a final figure (ps-lr: test log-loss
//! to 0.05, ps-mf: test RMSE to 0.02, the tolerances of the restart tests; ps-lda: training
//! log-likelihood per token to 0.1, about the spread of the quick job's fixed runs over
//! seeds); `objective_rel_diff` is that figure's relative difference.

use crate::elastic::{AppFigures, ElasticBenchArgs, orphans};
use petrel::CliError;
use petrel_ps::{PsApp, PsLda, PsLdaSettings, PsLr, PsMf, PsTrainArgs};
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
        "ps-mf" => ("test_rmse", 0.02),
        _ => ("loglik_per_token", 0.1),
    }
}

/// ps-lda's synthetic corpus: 200 documents of 50 words over 300 (`--quick`), else the
/// default (2000 of 100 over 5000).
fn lda_corpus(cfg: &mut PsLdaSettings, quick: bool) {
    if quick {
        let c = &mut cfg.synthetic;
        (c.n_docs, c.doc_length, c.vocab_size) = (200, 50, 300);
    }
}

/// The app's own flags: its length (ps-lr and ps-mf: clocks of at least 40 ms; ps-lda:
/// passes over its corpus).
fn app_flags(app: &str, quick: bool) -> Vec<&'static str> {
    let clocks = if quick { "80" } else { "200" };
    match app {
        "ps-lr" => vec!["--clocks", clocks, "--clock-ms", "40"],
        "ps-mf" => vec!["--max-clocks", clocks, "--clock-ms", "40"],
        _ => vec![
            "--iterations",
            if quick { "60" } else { "100" },
            "--topics",
            "10",
        ],
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
    let transport = format!("{:?}", args.transport).to_lowercase();
    let mut line: Vec<String> = ["bench", "--transport", &transport]
        .into_iter()
        .chain(["--checkpoint-every", "0", "--shards", "2"])
        .map(String::from)
        .collect();
    line.extend(app_flags(app, args.quick).into_iter().map(String::from));
    line.extend(["--workers".into(), args.workers.to_string()]);
    line.extend(["--out".into(), out.display().to_string()]);
    line.extend(extra.iter().cloned());
    fn start<A: PsApp>(
        line: Vec<String>,
        out: PathBuf,
        settings: impl FnOnce(&mut A::Config),
    ) -> Result<Runner, CliError>
    where
        A::Config: clap::Args + serde::Serialize + Send + 'static,
    {
        use clap::Parser;
        let mut flags =
            Flags::<A::Config>::try_parse_from(line).map_err(|e| CliError::Usage(e.to_string()))?;
        settings(&mut flags.train.config);
        Ok(std::thread::spawn(move || {
            petrel::train::run_ps::<A>(flags.train, &out)
        }))
    }
    let runner = match app {
        "ps-lr" => start::<PsLr>(line, out.clone(), |_| ())?,
        "ps-mf" => start::<PsMf>(line, out.clone(), |_| ())?,
        _ => start::<PsLda>(line, out.clone(), |c| lda_corpus(c, args.quick))?,
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

/// `app` (ps-lr, ps-mf or ps-lda) with a fixed membership against a join and a leave of
/// workers, and (ps-lr, and ps-mf and ps-lda without `--quick`) of shards, against the same
/// fixed run.
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
    // `--quick` keeps one shard run: ps-lda's quick job can end before the plan's changes.
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
