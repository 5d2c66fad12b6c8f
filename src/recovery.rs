//! Automatic recovery: a failed job's whole cluster restarts from its newest complete
//! checkpoint (one consistent cut), up to `--max-restarts`.

use std::path::Path;

use petrel_actors::checkpoint::{Checkpoint, CheckpointSet, choose_newest_valid};

/// Why a job with a restart budget did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecoveryError<E: std::error::Error + 'static> {
    /// A failure no restart can help (a bad input file, a bad setting).
    #[error(transparent)]
    Fatal(E),
    /// The job failed more often than its restart budget allows.
    #[error("{source} (gave up after {restarts} restart(s); raise --max-restarts to try more)")]
    Exhausted {
        /// Restarts tried.
        restarts: u32,
        /// The last attempt's failure.
        #[source]
        source: E,
    },
}

/// Runs `attempt(resume, number)` until it succeeds, fails for good (`restartable` says no)
/// or spends `max_restarts`; returns the value and the restarts it took.
pub(crate) fn run_with_restarts<T, E: std::error::Error + 'static>(
    max_restarts: u32,
    restartable: impl Fn(&E) -> bool,
    mut checkpoint_exists: impl FnMut() -> bool,
    mut attempt: impl FnMut(bool, u32) -> Result<T, E>,
) -> Result<(T, u32), RecoveryError<E>> {
    let mut resume = false;
    let mut restarts = 0;
    loop {
        match attempt(resume, restarts) {
            Ok(value) => return Ok((value, restarts)),
            Err(source) if !restartable(&source) => return Err(RecoveryError::Fatal(source)),
            Err(source) if restarts >= max_restarts => {
                return Err(RecoveryError::Exhausted { restarts, source });
            }
            Err(e) => {
                resume = checkpoint_exists();
                restarts += 1;
                tracing::warn!(
                    restart = restarts,
                    max_restarts,
                    from_checkpoint = resume,
                    error = %petrel_actors::error_chain(&e),
                    "job failed; restarting the cluster"
                );
            }
        }
    }
}

/// The checkpoint a resuming job's nodes will load, and the newer ones they will skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// Which (`round 7`, `clock 3`).
    pub at: String,
    /// Each newer checkpoint the nodes skip, with why (newest first).
    pub skipped: Vec<String>,
}

/// The checkpoint of `set` a resuming job's nodes will choose; `unit` names its round.
pub fn resume_point(
    set: &CheckpointSet,
    unit: &str,
    mut accept: impl FnMut(&Checkpoint) -> Result<(), String>,
) -> Option<ResumePoint> {
    set.check_format().ok()?;
    let rounds = set.rounds().ok()?;
    let (round, skipped) = choose_newest_valid(&rounds, |r| {
        let ck = set.load(r).map_err(|e| format!("{unit} {r}: {e}"))?;
        accept(&ck).map_err(|why| format!("{unit} {r}: {}: {why}", ck.path.display()))?;
        Ok::<_, String>(r)
    })
    .ok()?;
    Some(ResumePoint {
        at: format!("{unit} {round}"),
        skipped,
    })
}

/// [`resume_point`] of the round checkpoints of `scheme` in `dir`.
pub fn round_resume_point(dir: &Path, scheme: &str) -> Option<ResumePoint> {
    resume_point(&CheckpointSet::new(dir, scheme), "round", |_| Ok(()))
}

/// Runs a `petrel train APP` job, restarting it up to `max_restarts` times and saying where
/// each restart resumes.
pub fn restart_job<T, E: std::error::Error + 'static>(
    app: &str,
    max_restarts: u32,
    restartable: impl Fn(&E) -> bool,
    newest: impl Fn() -> Option<ResumePoint>,
    exhausted: impl FnOnce(u32, E) -> E,
    mut attempt: impl FnMut(bool, u32) -> Result<T, E>,
) -> Result<T, E> {
    let (value, restarts) = run_with_restarts(
        max_restarts,
        restartable,
        || newest().is_some(),
        |resume, number| {
            match newest() {
                Some(p) if resume && p.skipped.is_empty() => {
                    println!(
                        "{app}: restart {number} resumes from the newest checkpoint ({})",
                        p.at
                    )
                }
                Some(p) if resume => println!(
                    "{app}: restart {number} resumes from the newest checkpoint ({}) that \
                     verifies, skipping {}",
                    p.at,
                    p.skipped.join("; ")
                ),
                _ if number > 0 => println!("{app}: restart {number} starts from the beginning"),
                _ => {}
            }
            attempt(resume, number)
        },
    )
    .map_err(|e| match e {
        RecoveryError::Fatal(e) => e,
        RecoveryError::Exhausted { restarts, source } => exhausted(restarts, source),
    })?;
    if restarts > 0 {
        println!("{app} finished after {restarts} restart(s) of the cluster");
    }
    Ok(value)
}

/// True when a launched cluster failed because a node died: only then can a restart help.
pub fn launch_failed_by_node_death(e: &crate::launcher::LaunchError) -> bool {
    match e {
        crate::launcher::LaunchError::Settings(petrel_actors::NodeError::PeerFailed { .. }) => true,
        // A killed process leaves no error of its own: its cause is its exit status.
        crate::launcher::LaunchError::NodeFailed { cause, .. } => {
            cause.contains("signal") || cause.contains("no heartbeat")
        }
        _ => false,
    }
}

/// The round of the newest checkpoint manifest in `dir` (`<app>-round-<r>.manifest`).
pub fn newest_checkpoint_round(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".manifest")?;
            stem.rsplit_once("-round-")?.1.parse::<u64>().ok()
        })
        .max()
}

/// The checkpoint directories a job file's `[app.*]` sections name (`checkpoint_dir`).
pub fn checkpoint_dirs(app: &petrel_actors::AppSections) -> Vec<std::path::PathBuf> {
    app.values()
        .filter_map(|section| section.get("checkpoint_dir")?.as_str())
        .map(std::path::PathBuf::from)
        .collect()
}

/// Gives every `[app.<section>]` that `wants` one `checkpoint_dir = <dir>/<section>`.
pub fn with_default_checkpoint_dirs(
    app: &petrel_actors::AppSections,
    dir: &Path,
    wants: impl Fn(&str, &serde_json::Value) -> bool,
) -> (petrel_actors::AppSections, Vec<std::path::PathBuf>) {
    let mut given = Vec::new();
    let sections = app
        .iter()
        .map(|(name, section)| {
            let mut section = section.clone();
            if wants(name, &section)
                && let Some(table) = section.as_object_mut()
            {
                let path = dir.join(name);
                table.insert(
                    "checkpoint_dir".into(),
                    serde_json::Value::String(path.to_string_lossy().into_owned()),
                );
                given.push(path);
            }
            (name.clone(), section)
        })
        .collect();
    (sections, given)
}

/// The `[app.*]` sections of a restarted job: `resume = true` where a `checkpoint_dir` is.
pub fn resuming(app: &petrel_actors::AppSections) -> petrel_actors::AppSections {
    app.iter()
        .map(|(name, section)| {
            let mut section = section.clone();
            if section.get("checkpoint_dir").is_some_and(|d| d.is_string())
                && let Some(table) = section.as_object_mut()
            {
                table.insert("resume".into(), serde_json::Value::Bool(true));
            }
            (name.clone(), section)
        })
        .collect()
}

/// True when `dir` holds a checkpoint manifest (written last, so a complete checkpoint).
pub fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".manifest"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_job_file_resumes_every_section_that_checkpoints() {
        let mut app = petrel_actors::AppSections::new();
        app.insert(
            "strads_mf".into(),
            serde_json::json!({"rank": 4, "checkpoint_dir": "/tmp/c"}),
        );
        app.insert("other".into(), serde_json::json!({"rank": 4}));
        assert_eq!(
            checkpoint_dirs(&app),
            vec![std::path::PathBuf::from("/tmp/c")]
        );
        let r = resuming(&app);
        assert_eq!(r["strads_mf"]["resume"], serde_json::Value::Bool(true));
        assert!(r["other"].get("resume").is_none());
    }

    #[test]
    fn sections_that_want_checkpoints_get_a_directory_of_their_own() {
        let mut app = petrel_actors::AppSections::new();
        app.insert("lasso".into(), serde_json::json!({"seed": 3}));
        app.insert("demo".into(), serde_json::json!({"rounds": 4}));
        let (sections, given) =
            with_default_checkpoint_dirs(&app, Path::new("/run/checkpoints"), |name, _| {
                name == "lasso"
            });
        assert_eq!(given, [Path::new("/run/checkpoints/lasso")]);
        assert_eq!(
            sections["lasso"]["checkpoint_dir"],
            "/run/checkpoints/lasso"
        );
        assert_eq!(sections["lasso"]["seed"], 3);
        assert!(sections["demo"].get("checkpoint_dir").is_none());
        // A restart then resumes them.
        assert_eq!(checkpoint_dirs(&sections), given);
        assert_eq!(resuming(&sections)["lasso"]["resume"], true);
    }

    #[derive(Debug, thiserror::Error)]
    #[error("node w1 failed")]
    struct Boom;

    #[test]
    fn run_with_restarts_resumes_and_reports_the_last_failure() {
        let mut seen = Vec::new();
        let (value, restarts) = run_with_restarts(
            3,
            |_| true,
            || true,
            |resume, n| {
                seen.push((resume, n));
                if n < 2 { Err(Boom) } else { Ok(42) }
            },
        )
        .unwrap();
        assert_eq!((value, restarts), (42, 2));
        assert_eq!(seen, vec![(false, 0), (true, 1), (true, 2)]);

        let err = run_with_restarts(1, |_| true, || false, |_, _| Err::<(), _>(Boom)).unwrap_err();
        assert!(matches!(err, RecoveryError::Exhausted { restarts: 1, .. }));
        assert_eq!(
            err.to_string(),
            "node w1 failed (gave up after 1 restart(s); raise --max-restarts to try more)"
        );
        let err = run_with_restarts(0, |_| true, || true, |_, _| Err::<(), _>(Boom)).unwrap_err();
        assert!(matches!(err, RecoveryError::Exhausted { restarts: 0, .. }));
        // A failure a restart cannot help stops at once, reported as it is.
        let mut attempts = 0;
        let err = run_with_restarts(
            5,
            |_| false,
            || true,
            |_, _| {
                attempts += 1;
                Err::<(), _>(Boom)
            },
        )
        .unwrap_err();
        assert_eq!(attempts, 1);
        assert_eq!(err.to_string(), "node w1 failed");
        assert!(matches!(err, RecoveryError::Fatal(Boom)));
    }
}
