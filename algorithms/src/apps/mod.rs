//! Applications that combine an algorithm core with the petrel runtime (actors).
//!
//! - `p3`: the P3 propagation engine's actor shells (shards, workers, in-process cluster).
//! - `lasso`, `logistic`, `mf`, `lda`: the STRADS cores on the model-parallel runtime
//!   (`petrel_actors::strads`): wire types, scheduler and worker halves, roles, outputs.

pub mod lasso;
pub mod lda;
pub mod logistic;
pub mod mf;
pub mod p3;

use std::path::Path;

/// `#[serde(with = "f64_bytes")]` for a `Vec<f64>`: raw little-endian bytes on the wire.
pub mod f64_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(data: &[f64], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(d)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(format!(
                "f64 payload of {} bytes is not a multiple of 8",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
}

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
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Strads(#[from] crate::strads::StradsError),
    #[error(transparent)]
    Checkpoint(#[from] lasso::checkpoint::CheckpointError),
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
    A: petrel_actors::strads::StradsApp,
    S: petrel_actors::strads::Schedule<A>,
{
    use petrel_actors::strads::{SchedulerOptions, WorkerSet, run_scheduler};
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
