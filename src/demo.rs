//! The demo job (`[app.demo]`): workers average tensors through an aggregator, checking
//! each mean against its closed form. Roles: `demo-aggregator` (one node), `demo-worker`.

use actix::prelude::*;
use petrel_actors::{AskError, Cluster, HandlerError, Msg, NodeContext, NodeError};
use petrel_messages::{Priority, Tensor, remote_message};
use petrel_ml::job::{InvalidSetting, SettingChecks};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Why a demo role failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    /// The cluster has no node with a role the demo needs.
    #[error("no node runs {0}")]
    MissingRole(&'static str),
    /// This worker is not among the `demo-worker` nodes.
    #[error("worker {0} is not in its own role list")]
    NotAWorker(String),
    /// Settings, registration or a barrier failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A round's contribution got no mean back.
    #[error("round {round}: {source}")]
    Round {
        /// The round.
        round: u32,
        /// Why the ask failed.
        #[source]
        source: AskError,
    },
    /// The mean that came back is wrong.
    #[error("round {round}: mean[{index}] = {got}, expected {expected}")]
    WrongMean {
        /// The round.
        round: u32,
        /// The position in the tensor.
        index: usize,
        /// The value received.
        got: f32,
        /// The value every worker can compute itself.
        expected: f32,
    },
    /// The worker's report could not be written.
    #[error("{}: {source}", path.display())]
    Report {
        /// The report file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The worker's report could not be encoded.
    #[error("encoding the report: {0}")]
    Encode(#[from] serde_json::Error),
}

/// `[app.demo]`. An unknown key is refused when the settings are read, naming it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Rounds each worker contributes.
    pub rounds: u32,
    /// Floats per contribution.
    pub tensor_len: usize,
    /// Stop after this many seconds even if rounds remain (0 = no limit).
    pub duration_s: f64,
    /// If set, every worker writes `<name>.json` with its figures here.
    pub report_dir: Option<std::path::PathBuf>,
}

/// What a worker reports at the end of the demo job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DemoWorkerReport {
    /// The worker's node name.
    pub worker: String,
    /// Rounds completed.
    pub rounds: u32,
    /// Tensor bytes contributed.
    pub bytes_sent: u64,
    /// Seconds from the first round to the last.
    pub seconds: f64,
    /// The node's transport counters at the end.
    pub net: petrel_net::NetStatsSnapshot,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            rounds: 20,
            tensor_len: 1 << 18,
            duration_s: 0.0,
            report_dir: None,
        }
    }
}

/// The largest contribution, in floats (1 GiB).
const MAX_TENSOR_LEN: usize = 1 << 28;

impl DemoConfig {
    /// Every value in range (keys as in `[app.demo]`), checked before any node starts.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let mut c = SettingChecks::new();
        c.at_least("rounds", self.rounds, 1);
        c.at_least("tensor_len", self.tensor_len, 1);
        c.at_most(
            "tensor_len",
            self.tensor_len,
            MAX_TENSOR_LEN,
            "1 GiB per contribution",
        );
        c.non_negative("duration_s", self.duration_s);
        c.finish()
    }
}

/// One worker's tensor for one round.
#[derive(Serialize, Deserialize)]
pub struct Contribution {
    /// The round.
    pub round: u32,
    /// The contributing worker.
    pub worker: String,
    /// Its values.
    pub tensor: Tensor,
}

/// The element-wise mean over all workers of a round.
#[derive(Serialize, Deserialize)]
pub struct RoundMean {
    /// The round.
    pub round: u32,
    /// How many workers contributed.
    pub workers: u32,
    /// The element-wise mean.
    pub mean: Tensor,
    /// Set once `duration_s` has passed: every worker stops after this round.
    pub stop: bool,
}

remote_message!(Contribution => RoundMean, "petrel.demo.contribution");

type Waiter = futures::channel::oneshot::Sender<Result<RoundMean, HandlerError>>;

struct PendingRound {
    sum: Vec<f32>,
    waiters: Vec<Waiter>,
}

/// Sums contributions per round; answers every worker of a round once all contributed.
pub struct Aggregator {
    workers: usize,
    deadline: Option<Instant>,
    rounds: HashMap<u32, PendingRound>,
}

impl Actor for Aggregator {
    type Context = Context<Self>;
}

impl Aggregator {
    fn add(&mut self, c: Contribution, waiter: Waiter) {
        let workers = self.workers;
        let entry = self.rounds.entry(c.round).or_insert_with(|| PendingRound {
            sum: vec![0.0; c.tensor.len()],
            waiters: Vec::new(),
        });
        if entry.sum.len() != c.tensor.len() {
            let _ = waiter.send(Err(HandlerError::new(format!(
                "worker {} sent {} values, round {} has {}",
                c.worker,
                c.tensor.len(),
                c.round,
                entry.sum.len()
            ))));
            return;
        }
        entry
            .sum
            .iter_mut()
            .zip(&c.tensor.data)
            .for_each(|(s, x)| *s += x);
        entry.waiters.push(waiter);
        if entry.waiters.len() < workers {
            return;
        }
        let Some(done) = self.rounds.remove(&c.round) else {
            return;
        };
        let mean: Vec<f32> = done.sum.iter().map(|s| s / workers as f32).collect();
        let stop = self.deadline.is_some_and(|d| Instant::now() >= d);
        for w in done.waiters {
            let _ = w.send(Ok(RoundMean {
                round: c.round,
                workers: workers as u32,
                mean: Tensor::from_vec(mean.clone()),
                stop,
            }));
        }
    }
}

impl Handler<Msg<Contribution>> for Aggregator {
    type Result = ResponseFuture<Result<RoundMean, HandlerError>>;

    fn handle(&mut self, msg: Msg<Contribution>, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = futures::channel::oneshot::channel();
        self.add(msg.body, tx);
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(HandlerError::new("aggregator stopped")))
        })
    }
}

/// The value worker `w` contributes at position `i` of round `r` (a closed-form mean).
fn value(w: usize, r: u32, i: usize) -> f32 {
    ((w + 1) * (r as usize + 1)) as f32 + (i % 7) as f32
}

fn expected_mean(workers: usize, r: u32, i: usize) -> f32 {
    let s: usize = (1..=workers).sum();
    (s * (r as usize + 1)) as f32 / workers as f32 + (i % 7) as f32
}

async fn aggregator_role(ctx: NodeContext) -> Result<(), DemoError> {
    let workers = ctx.nodes_with_role("demo-worker").len();
    if workers == 0 {
        return Err(DemoError::MissingRole("demo-worker"));
    }
    let cfg: DemoConfig = ctx.settings.app("demo")?;
    let addr = Aggregator {
        workers,
        deadline: (cfg.duration_s > 0.0)
            .then(|| Instant::now() + Duration::from_secs_f64(cfg.duration_s)),
        rounds: HashMap::new(),
    }
    .start();
    ctx.node
        .register("aggregator", addr)?
        .accept::<Contribution>();
    tracing::info!(workers, "aggregator ready");
    Ok(ctx.barrier("demo.ready").await?)
}

async fn worker_role(ctx: NodeContext) -> Result<(), DemoError> {
    let cfg: DemoConfig = ctx.settings.app("demo")?;
    let workers = ctx.nodes_with_role("demo-worker");
    let me = workers
        .iter()
        .position(|n| *n == ctx.spec.name)
        .ok_or_else(|| DemoError::NotAWorker(ctx.spec.name.clone()))?;
    let aggregator_node = ctx
        .nodes_with_role("demo-aggregator")
        .into_iter()
        .next()
        .ok_or(DemoError::MissingRole("demo-aggregator"))?;
    ctx.barrier("demo.ready").await?;
    let aggregator = ctx
        .node
        .actor_at::<Contribution>(&aggregator_node, "aggregator")?;
    let started = Instant::now();
    let mut bytes = 0usize;
    let mut done = 0u32;
    let mut last_log = Instant::now();
    for r in 0..cfg.rounds {
        let data: Vec<f32> = (0..cfg.tensor_len).map(|i| value(me, r, i)).collect();
        bytes += data.len() * 4;
        let reply = aggregator
            .ask(
                Contribution {
                    round: r,
                    worker: ctx.spec.name.clone(),
                    tensor: Tensor::from_vec(data),
                },
                Priority::NORMAL,
                ctx.node.default_timeout(),
            )
            .await
            .map_err(|source| DemoError::Round { round: r, source })?;
        let bad = reply
            .mean
            .data
            .iter()
            .enumerate()
            .find(|(i, m)| (**m - expected_mean(workers.len(), r, *i)).abs() > 1e-3);
        if let Some((i, m)) = bad {
            return Err(DemoError::WrongMean {
                round: r,
                index: i,
                got: *m,
                expected: expected_mean(workers.len(), r, i),
            });
        }
        done = r + 1;
        if reply.stop {
            tracing::info!(round = r + 1, "duration reached");
            break;
        }
        if r + 1 == cfg.rounds || last_log.elapsed() >= Duration::from_secs(2) {
            last_log = Instant::now();
            tracing::info!(
                round = r + 1,
                of = cfg.rounds,
                workers = reply.workers,
                "mean verified"
            );
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    if let Some(dir) = &cfg.report_dir {
        let report = DemoWorkerReport {
            worker: ctx.spec.name.clone(),
            rounds: done,
            bytes_sent: bytes as u64,
            seconds: secs,
            net: ctx.node.net_stats(),
        };
        let path = dir.join(format!("{}.json", ctx.spec.name));
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(&path, text).map_err(|source| DemoError::Report { path, source })?;
    }
    tracing::info!(
        rounds = done,
        mb_sent = bytes as f64 / 1e6,
        mbit_per_s = format!("{:.0}", bytes as f64 * 8.0 / secs / 1e6),
        "worker done"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// Adds the roles `demo-aggregator` and `demo-worker`.
pub fn register(cluster: Cluster) -> Cluster {
    cluster
        .app_section_checked::<DemoConfig, _>("demo", DemoConfig::validate)
        .role("demo-aggregator", aggregator_role)
        .role("demo-worker", worker_role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_settings_out_of_range_or_unknown_are_refused_by_name() {
        DemoConfig::default().validate().unwrap();
        for (cfg, want) in [
            (
                DemoConfig {
                    rounds: 0,
                    ..DemoConfig::default()
                },
                "rounds = 0",
            ),
            (
                DemoConfig {
                    tensor_len: usize::MAX,
                    ..DemoConfig::default()
                },
                "tensor_len = 18446744073709551615",
            ),
            (
                DemoConfig {
                    duration_s: f64::NAN,
                    ..DemoConfig::default()
                },
                "duration_s = NaN",
            ),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = serde_json::from_str::<DemoConfig>(r#"{"roundz": 3}"#).unwrap_err();
        assert!(e.to_string().contains("roundz"), "{e}");
    }

    #[test]
    fn closed_form_mean_matches() {
        for r in 0..3 {
            for i in 0..10 {
                let m: f32 = (0..4).map(|w| value(w, r, i)).sum::<f32>() / 4.0;
                assert!((m - expected_mean(4, r, i)).abs() < 1e-5);
            }
        }
    }
}
