//! A user-defined model trained data-parallel with P3: a two-stage MLP written directly
//! with ndarray implements [`StageModel`], and a cluster of 2 workers and 2 server shards
//! (the P3 shells' roles) trains it. Each stage's forward pass waits only for that stage's
//! parameters; each stage's gradients go to the shards as soon as backward produced them.
//! ([`run_cluster`] does the same in one call, in process only.)
//!
//! [`petrel::launcher`] runs the cluster as the command line says:
//!
//! ```text
//! # every node a thread of this process (the default)
//! cargo run --example p3_custom -- --in-process
//! # one process per node on this host (the program re-executes itself per node)
//! cargo run --example p3_custom -- --processes
//! # one node per host (w0 w1 s0 s1), after `petrel certs --bundle`
//! cargo run --example p3_custom -- --node s0 --config cluster.toml
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use petrel::actors::{Cluster, RoleError, Topology, Transport};
use petrel::launcher::{LaunchArgs, launch};
use petrel::ml::dnn::ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis, ShapeError};
use petrel::p3::prelude::*;
use petrel::p3::shells::{SHARD_ROLE, WORKER_ROLE, shard_role, worker_role};

const IN: usize = 8;
const HIDDEN: usize = 16;
const BATCH: usize = 32;

/// A deterministic value in [-1, 1) for any key (splitmix64), so every worker draws its own
/// batches without shared state.
fn noise(key: u64) -> f32 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Stage 0: `h = tanh(x W1^T + b1)`. Stage 1: `y = h w2 + b2`, loss = mean squared error
/// against a fixed linear teacher. Parameters are kept as P3 ships them: flat tensors.
struct TinyMlp {
    worker: usize,
    /// W1 `[HIDDEN, IN]`, b1 `[HIDDEN]`, w2 `[HIDDEN]`, b2 `[1]`.
    p: Vec<Vec<f32>>,
    x: Array2<f32>,
    h: Array2<f32>,
    dy: Array1<f32>,
    loss: f32,
}

impl TinyMlp {
    fn new(worker: usize) -> Self {
        let init = |n: usize, seed: u64| (0..n).map(|i| 0.5 * noise(seed + i as u64)).collect();
        TinyMlp {
            worker,
            p: vec![
                init(HIDDEN * IN, 0),
                vec![0.0; HIDDEN],
                init(HIDDEN, 1000),
                vec![0.0],
            ],
            x: Array2::zeros((BATCH, IN)),
            h: Array2::zeros((BATCH, HIDDEN)),
            dy: Array1::zeros(BATCH),
            loss: 0.0,
        }
    }

    fn w1(&self) -> Result<ArrayView2<'_, f32>, ShapeError> {
        ArrayView2::from_shape((HIDDEN, IN), &self.p[0])
    }
}

impl StageModel for TinyMlp {
    type Error = ShapeError;

    fn stage_tensors(&self) -> Vec<Vec<u64>> {
        vec![
            vec![(HIDDEN * IN) as u64, HIDDEN as u64],
            vec![HIDDEN as u64, 1],
        ]
    }

    fn set_tensor(&mut self, tensor: usize, values: &[f32]) -> Result<(), ShapeError> {
        self.p[tensor].copy_from_slice(values); // P3 guarantees the length
        Ok(())
    }

    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, ShapeError> {
        if stage == 0 {
            let base = (iter * 2 + self.worker as u64) * (BATCH * IN) as u64 + 1_000_000;
            self.x = Array2::from_shape_fn((BATCH, IN), |(r, c)| noise(base + (r * IN + c) as u64));
            let b1 = ArrayView1::from(&self.p[1]);
            self.h = (self.x.dot(&self.w1()?.t()) + b1).mapv(f32::tanh);
        } else {
            let teacher = Array1::from_shape_fn(IN, |c| (c as f32 + 1.0) / IN as f32 - 0.5);
            let y = self.h.dot(&ArrayView1::from(&self.p[2])) + self.p[3][0];
            let diff = y - self.x.dot(&teacher);
            self.loss = diff.mapv(|d| d * d).mean().unwrap_or(0.0);
            self.dy = diff * (2.0 / BATCH as f32);
        }
        Ok(Duration::ZERO) // computed for real: nothing to emulate
    }

    fn backward_stage(&mut self, stage: usize) -> Result<StageGrads, ShapeError> {
        let grads = if stage == 1 {
            vec![self.h.t().dot(&self.dy).to_vec(), vec![self.dy.sum()]]
        } else {
            // dL/dz = (dy w2^T) * (1 - h^2), the tanh derivative.
            let w2 = ArrayView2::from_shape((1, HIDDEN), &self.p[2])?;
            let dz = self.dy.view().insert_axis(Axis(1)).dot(&w2) * self.h.mapv(|h| 1.0 - h * h);
            let gw1 = dz.t().dot(&self.x);
            vec![gw1.iter().copied().collect(), dz.sum_axis(Axis(0)).to_vec()]
        };
        Ok(StageGrads {
            grads,
            compute: Duration::ZERO,
        })
    }

    fn stats(&self) -> Option<StepStats> {
        Some(StepStats {
            loss: self.loss,
            accuracy: 0.0,
        })
    }
}

/// Checks that a worker's loss fell and prints its figures (in the worker's process).
fn check_worker(r: &P3WorkerReport) -> Result<(), RoleError> {
    let losses: Vec<f32> = r.stats.iter().flatten().map(|s| s.loss).collect();
    let mean = |xs: &[f32]| xs.iter().sum::<f32>() / xs.len().max(1) as f32;
    let n = losses.len().min(10);
    let (first, last) = (mean(&losses[..n]), mean(&losses[losses.len() - n..]));
    println!(
        "p3_custom: worker {}: {} iterations, loss {first:.4} -> {last:.4}",
        r.worker,
        losses.len()
    );
    // Also rejects NaN: a diverged run must not pass.
    if last.is_nan() || last >= 0.5 * first {
        return Err(format!("worker {}: loss did not fall: {first} -> {last}", r.worker).into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = LaunchArgs::from_env();
    let job = Arc::new(P3Job {
        mode: Mode::P3,
        slice_size: 32, // small slices, so even this tiny model is cut and prioritised
        iterations: 80,
        opt: FlatSgdMomentum::new(0.05, 0.9),
        transport: Transport::Memory,
        ..P3Job::new(TinyMlp::new(0).p)
    });
    let mut topo = Topology::builder("p3").transport(job.transport);
    for w in 0..job.n_workers {
        topo = topo.node(&format!("w{w}"), &[WORKER_ROLE]);
    }
    for s in 0..job.n_shards {
        topo = topo.node(&format!("s{s}"), &[SHARD_ROLE]);
    }
    let timeout_ms = job.ask_timeout.as_millis() as u64;
    let settings = topo
        .with(|s| {
            s.cluster.request_timeout_ms = timeout_ms;
            // A busy 2-core machine may silence a node for a while: not yet a dead peer.
            s.cluster.failure_timeout_ms = 10_000;
        })
        .build()?;
    // The reports of the workers that ran in this process.
    let reports: Arc<Mutex<Vec<P3WorkerReport>>> = Arc::default();
    let (shard_job, worker_job, sink) = (job.clone(), job.clone(), reports.clone());
    let cluster = Cluster::new(settings)
        .role(SHARD_ROLE, move |ctx| shard_role(ctx, shard_job.clone()))
        .role(WORKER_ROLE, move |ctx| {
            let (job, sink) = (worker_job.clone(), sink.clone());
            async move {
                let report = worker_role(ctx, job, |w| Ok(TinyMlp::new(w)), None).await?;
                check_worker(&report)?;
                if let Ok(mut r) = sink.lock() {
                    r.push(report);
                }
                Ok::<(), RoleError>(())
            }
        });
    launch(&cluster, &args)?;
    // Where all workers ran here, they must agree on the parameters.
    let reports = reports.lock().map(|r| r.clone()).unwrap_or_default();
    if reports.windows(2).any(|w| w[0].params != w[1].params) {
        return Err("workers ended with different parameters".into());
    }
    Ok(())
}
