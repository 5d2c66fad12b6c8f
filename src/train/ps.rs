//! `petrel train ps-mf`, `ps-lr` and `ps-lda`: the parameter-server apps on a localhost
//! cluster, as threads or one process per node.

use super::{
    TrainApp, absolute_dir, apps, default_checkpoint_dir, prepare_job, printed, progress,
    read_json, run_cluster, saved, section_value, stop_line,
};
use crate::CliError;
use petrel_actors::JobTransport;
use petrel_ml::job::InvalidSetting;
use petrel_ps::PsApp;
use std::collections::BTreeSet;
use std::path::Path;

/// `petrel train ps-mf | ps-lr | ps-lda`: [`prepare_job`], then the app on a localhost
/// cluster with default checkpoints and restarts; prints its summary.
pub fn train_ps<A>(
    mut args: petrel_ps::PsTrainArgs<A::Config>,
    given: &BTreeSet<String>,
) -> Result<(), CliError>
where
    A: PsApp + TrainApp<Job = <A as PsApp>::Config>,
    <A as PsApp>::Config: serde::Serialize,
{
    let name = <A as PsApp>::NAME;
    if args.shards == 0 {
        let shards = InvalidSetting::new("shards", 0, "must be >= 1");
        return Err(apps::invalid::<A>(shards));
    }
    let (file, workers) = (args.job_file.as_deref(), args.workers);
    args.config = prepare_job::<A>(&args.config, file, None, given, workers)?;
    if printed(args.print_job, <A as PsApp>::SECTION, &args.config)? {
        return Ok(());
    }
    let out = <A as TrainApp>::out(&mut args.config).clone();
    let out_dir = out.clone().unwrap_or_default();
    let checkpoints = match <A as TrainApp>::ps_checkpoints(&mut args.config) {
        Some(files) => {
            let resume = files.resume;
            let dir = default_checkpoint_dir(&mut files.checkpoint_dir, resume, &out_dir)?;
            // Fail now, not after the cluster's failure timeout.
            if let Some(d) = dir.as_ref().filter(|_| resume)
                && petrel_ps::checkpoint::job_manifest_clocks(d)
                    .map_err(petrel_ps::PsError::from)?
                    .is_empty()
            {
                let path = d.display().to_string();
                let reason = "no checkpoint to resume from".into();
                let none = petrel_ps::PsCoreError::Checkpoint { path, reason };
                return Err(petrel_ps::PsError::from(none).into());
            }
            dir
        }
        None => None,
    };
    let points = <A as PsApp>::progress_points(&args.config);
    let progress = progress::TrainProgress::start(name, points);
    let summary = crate::recovery::restart_job(
        name,
        args.max_restarts,
        CliError::is_node_death,
        || {
            let set = petrel_ps::checkpoint::job_set(checkpoints.as_deref()?);
            let (shards, workers) = (args.shards, args.workers);
            crate::recovery::resume_point(&set, "clock", |ck| {
                petrel_ps::checkpoint::fits_layout(ck, name, shards, workers)
            })
        },
        |restarts, source| CliError::Restarts {
            restarts,
            source: Box::new(source),
        },
        |resume, _| {
            let mut args = args.clone();
            if let Some(files) = <A as TrainApp>::ps_checkpoints(&mut args.config) {
                files.resume |= resume;
            }
            run_ps::<A>(args, &out_dir)
        },
    )?;
    drop(progress);
    println!("{summary}\n{}", stop_line(out.as_deref())?);
    Ok(())
}

/// Runs a PS app once on its transport: threads of this process, or node processes (run
/// files in `<out>/run`); returns the summary line.
pub fn run_ps<A>(
    args: petrel_ps::PsTrainArgs<<A as PsApp>::Config>,
    out: &Path,
) -> Result<String, CliError>
where
    A: PsApp,
    <A as PsApp>::Config: serde::Serialize,
{
    match args.transport {
        JobTransport::Processes => run_ps_processes::<A>(&args, out),
        _ => Ok(petrel_ps::train::<A>(args)?),
    }
}

/// Runs a PS app as node processes (run files in `<out>/run`); returns the summary line.
fn run_ps_processes<A>(
    args: &petrel_ps::PsTrainArgs<<A as PsApp>::Config>,
    out: &Path,
) -> Result<String, CliError>
where
    A: PsApp,
    <A as PsApp>::Config: serde::Serialize,
{
    let value = section_value(&args.config)?;
    let timeout_s = args.request_timeout_s.or(A::TRAIN_REQUEST_TIMEOUT_S);
    let quic = petrel_actors::Transport::Quic;
    let settings = (args.topology(A::BUILTIN_ROLES, A::NAME, quic))
        .with(|s| {
            A::tune_local(s);
            s.app.insert(A::SECTION.into(), value);
            if let Some(t) = timeout_s {
                s.cluster.request_timeout_ms = t.max(1).saturating_mul(1000);
            }
        })
        .build()?;
    // Refused here, not in every node process.
    petrel_ps::kit::check_membership::<A>(&settings, &args.config)?;
    run_cluster(
        settings,
        JobTransport::Processes,
        &absolute_dir(out)?.join("run"),
    )?;
    let m: petrel_ml::job::RunMetrics = read_json(&out.join("metrics.json"))?;
    let figures: Vec<String> = m
        .final_figures
        .iter()
        .map(|(k, v)| format!("{k} {}", saved::short_figure(*v)))
        .collect();
    Ok(format!(
        "{} ({} shards, {} workers, processes): {} in {:.1}s; wrote {}",
        m.app,
        args.shards,
        args.workers,
        figures.join(", "),
        m.seconds,
        out.display()
    ))
}
