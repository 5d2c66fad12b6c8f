//! What the STRADS apps share: outputs, loading off the event loop, the scheduler role.

use std::path::Path;

/// Errors of the apps' I/O (outputs, configuration).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Data(#[from] petrel_ml::data::DataError),
    #[error(transparent)]
    Strads(#[from] crate::core::StradsError),
    #[error(transparent)]
    Checkpoint(#[from] crate::apps::lasso::checkpoint::CheckpointError),
}

/// Writes `contents` to `dir/name`, creating `dir`.
pub fn write_output(dir: &Path, name: &str, contents: &[u8]) -> Result<(), AppError> {
    let path = dir.join(name);
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, contents))
        .map_err(|source| AppError::Write { path, source })
}

/// Runs a blocking job (data loading, generation) off the node's event loop, so that
/// heartbeats keep flowing while a large file loads.
pub async fn off_loop<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AppError> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("loader task: {e}"))?
        .map_err(|e| e.to_string())
}

/// The scheduler half of a rotation app's role once its state is built: waits until every
/// worker is ready, runs the rounds, and returns the bytes the scheduler node moved
/// meanwhile (what the ring keeps small).
pub(crate) async fn run_ready_scheduler<A, S>(
    ctx: &petrel_actors::NodeContext,
    app: &mut S,
    workers: &[String],
    ready_barrier: &str,
    worker_actor: &str,
    timeout_s: u64,
) -> Result<u64, String>
where
    A: crate::shells::StradsApp,
    S: crate::shells::Schedule<A>,
{
    use crate::shells::{SchedulerOptions, WorkerSet, run_scheduler};
    ctx.barrier(ready_barrier)
        .await
        .map_err(|e| e.to_string())?;
    let set =
        WorkerSet::<A>::resolve(&ctx.node, workers, worker_actor).map_err(|e| e.to_string())?;
    let opts = SchedulerOptions {
        timeout: std::time::Duration::from_secs(timeout_s.max(1)),
        priority: petrel_messages::Priority::NORMAL,
        ..SchedulerOptions::default()
    };
    let before = ctx.node.net_stats();
    run_scheduler(app, &set, &opts)
        .await
        .map_err(|e| e.to_string())?;
    let after = ctx.node.net_stats();
    Ok((after.sent_bytes + after.received_bytes)
        .saturating_sub(before.sent_bytes + before.received_bytes))
}
