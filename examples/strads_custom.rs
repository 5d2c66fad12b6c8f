//! Embedding a new model-parallel algorithm in the STRADS runtime: non-negative least
//! squares `min ||y - X b||^2, b >= 0` by scheduled coordinate descent over a ring of
//! variable blocks. The app is three small pieces:
//!
//! 1. wire types (`StradsApp`): a task (which block, its values), a partial (per-worker
//!    `x_j^T r` sums) and a commit (the deltas);
//! 2. the scheduler half (`Schedule`): `schedule` rotates through blocks of coordinates,
//!    `pull` turns summed partials into projected Newton steps;
//! 3. the worker half (`Push`): rows of X, y and the residual; `push` computes partial
//!    `x_j^T r`, `commit` applies deltas to the residual.
//!
//! The runtime provides the actors (`start_worker`), the round loop with pipelining
//! (`run_scheduler`) and the transport. Run: `cargo run --release --example strads_custom`.

use petrel::actors::{Cluster, NodeContext, Topology};
use petrel::messages::tensor::f32_bytes;
use petrel::strads::shells::{
    Plan, Push, Schedule, SchedulerOptions, Step, StradsApp, WorkerSet, run_scheduler, start_worker,
};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const ROWS: usize = 300;
const COLS: usize = 40;
const BLOCK: usize = 8;
const SWEEPS: u64 = 60;

/// Deterministic data every node can build: X_ij in [-1, 1], y = X b_true with some
/// negative entries in b_true (so the constraint is active).
fn data() -> (Vec<Vec<f32>>, Vec<f32>) {
    let mut state = 12345u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    let x: Vec<Vec<f32>> = (0..ROWS)
        .map(|_| (0..COLS).map(|_| next()).collect())
        .collect();
    let b_true: Vec<f32> = (0..COLS)
        .map(|j| {
            if j % 3 == 0 {
                -1.0
            } else {
                (j % 5) as f32 * 0.5
            }
        })
        .collect();
    let y = x
        .iter()
        .map(|row| row.iter().zip(&b_true).map(|(a, b)| a * b).sum())
        .collect();
    (x, y)
}

struct Nnls;

#[derive(Clone, Serialize, Deserialize)]
struct Task {
    vars: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct Partial {
    #[serde(with = "f32_bytes")]
    x_t_r: Vec<f32>,
    sq_residual: f32,
}

#[derive(Clone, Serialize, Deserialize)]
struct Deltas {
    vars: Vec<u32>,
    #[serde(with = "f32_bytes")]
    deltas: Vec<f32>,
}

impl StradsApp for Nnls {
    const DISPATCH_NAME: &'static str = "example.nnls.dispatch";
    const COMMIT_NAME: &'static str = "example.nnls.commit";
    type Task = Task;
    type Partial = Partial;
    type Commit = Deltas;
}

/// Scheduler: blocks of coordinates in a fixed rotation; projected coordinate steps.
struct NnlsScheduler {
    b: Vec<f32>,
    col_sq_norms: Vec<f32>,
    round: u64,
    objective: Arc<Mutex<Vec<f32>>>,
}

impl Schedule<Nnls> for NnlsScheduler {
    fn schedule(&mut self, round: u64, _in_flight: usize) -> Step<Task> {
        let blocks = COLS.div_ceil(BLOCK) as u64;
        if round >= SWEEPS * blocks {
            return Step::Done;
        }
        let start = (round % blocks) as usize * BLOCK;
        let vars = (start..(start + BLOCK).min(COLS))
            .map(|j| j as u32)
            .collect();
        Step::Run(Plan::All(Task { vars }))
    }

    fn pull(&mut self, round: u64, partials: Vec<Partial>, _: Duration) -> Result<Deltas, String> {
        self.round = round;
        let task_vars: Vec<u32> = {
            let blocks = COLS.div_ceil(BLOCK) as u64;
            let start = (round % blocks) as usize * BLOCK;
            (start..(start + BLOCK).min(COLS))
                .map(|j| j as u32)
                .collect()
        };
        let mut g = vec![0.0f32; task_vars.len()];
        let mut sq = 0.0;
        for p in &partials {
            g.iter_mut().zip(&p.x_t_r).for_each(|(s, v)| *s += v);
            sq += p.sq_residual;
        }
        if let Ok(mut o) = self.objective.lock() {
            o.push(sq);
        }
        // Jacobi step on the block (columns here are nearly orthogonal), projected on b >= 0.
        let deltas = task_vars
            .iter()
            .zip(&g)
            .map(|(&j, &gj)| {
                let j = j as usize;
                let new = (self.b[j] + gj / self.col_sq_norms[j]).max(0.0);
                let d = new - self.b[j];
                self.b[j] = new;
                d
            })
            .collect();
        Ok(Deltas {
            vars: task_vars,
            deltas,
        })
    }
}

/// Worker: its rows of X and the residual r = y - X b on them.
struct NnlsWorker {
    x: Vec<Vec<f32>>,
    r: Vec<f32>,
}

impl Push<Nnls> for NnlsWorker {
    fn push(&mut self, _round: u64, task: &Task) -> Result<Partial, String> {
        let x_t_r = task
            .vars
            .iter()
            .map(|&j| {
                self.x
                    .iter()
                    .zip(&self.r)
                    .map(|(row, r)| row[j as usize] * r)
                    .sum()
            })
            .collect();
        Ok(Partial {
            x_t_r,
            sq_residual: self.r.iter().map(|r| r * r).sum(),
        })
    }

    fn commit(&mut self, _round: u64, c: &Deltas) -> Result<(), String> {
        for (&j, &d) in c.vars.iter().zip(&c.deltas) {
            for (row, r) in self.x.iter().zip(self.r.iter_mut()) {
                *r -= row[j as usize] * d;
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    petrel::init_tracing();
    let objective = Arc::new(Mutex::new(Vec::new()));
    let settings = Topology::builder("nnls")
        .transport(petrel::actors::Transport::Memory)
        .node("scheduler", &["nnls-scheduler"])
        .node("w0", &["nnls-worker"])
        .node("w1", &["nnls-worker"])
        .build()?;
    let trace = objective.clone();
    let cluster = Cluster::new(settings)
        .role("nnls-worker", |ctx: NodeContext| {
            Box::pin(async move {
                let workers = ctx.nodes_with_role("nnls-worker");
                let me = workers
                    .iter()
                    .position(|n| *n == ctx.spec.name)
                    .ok_or("not a worker")?;
                let (x, y) = data();
                let rows = (me * ROWS / workers.len())..((me + 1) * ROWS / workers.len());
                let worker = NnlsWorker {
                    x: x[rows.clone()].to_vec(),
                    r: y[rows].to_vec(),
                };
                start_worker::<Nnls, _>(&ctx.node, "nnls", me as u32, worker)
                    .map_err(|e| e.to_string())?;
                ctx.barrier("nnls.ready").await.map_err(|e| e.to_string())
            })
        })
        .role("nnls-scheduler", move |ctx: NodeContext| {
            let trace = trace.clone();
            Box::pin(async move {
                let (x, _) = data();
                let col_sq_norms = (0..COLS)
                    .map(|j| x.iter().map(|r| r[j] * r[j]).sum())
                    .collect();
                let mut app = NnlsScheduler {
                    b: vec![0.0; COLS],
                    col_sq_norms,
                    round: 0,
                    objective: trace,
                };
                ctx.barrier("nnls.ready").await.map_err(|e| e.to_string())?;
                let workers = WorkerSet::<Nnls>::resolve(
                    &ctx.node,
                    &ctx.nodes_with_role("nnls-worker"),
                    "nnls",
                )
                .map_err(|e| e.to_string())?;
                let stats = run_scheduler(&mut app, &workers, &SchedulerOptions::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let negatives = app.b.iter().filter(|v| **v < 0.0).count();
                println!(
                    "{} rounds in {:.2} s; b >= 0 violated by {negatives} coordinates",
                    stats.rounds,
                    stats.elapsed.as_secs_f64()
                );
                Ok::<(), String>(())
            })
        });
    cluster.run_in_process()?;
    let trace = objective.lock().map_err(|_| "poisoned")?.clone();
    for (i, sq) in trace
        .iter()
        .enumerate()
        .step_by(trace.len().div_ceil(10).max(1))
    {
        println!("round {i:4}: ||y - X b||^2 = {sq:.4}");
    }
    Ok(())
}
