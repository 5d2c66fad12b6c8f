//! A new model-parallel algorithm on the STRADS kit: non-negative least squares
//! `min ||y - X b||^2, b >= 0` by scheduled coordinate descent over blocks of variables.
//! The app is a marker type with its wire types (`StradsApp`), a scheduler half
//! (`Schedule`), a worker half (`Push`) and a `StradsJob` impl (roles, how each half is
//! built, the outputs); the kit turns it into cluster roles (`register`) and a serial run
//! (`run_serial`). [`petrel::launcher`] runs the cluster as the command line says:
//!
//! ```text
//! # every node a thread of this process (the default)
//! cargo run --release --example strads_custom -- --in-process
//! # one process per node on this host (the program re-executes itself per node)
//! cargo run --release --example strads_custom -- --processes
//! # one node per host (scheduler w0 w1), after `petrel certs --bundle`
//! cargo run --release --example strads_custom -- --node w0 --config cluster.toml
//! ```

use petrel::actors::{Cluster, Topology, Transport};
use petrel::launcher::{LaunchArgs, LaunchMode, launch};
use petrel::messages::tensor::f32_bytes;
use petrel::strads::prelude::*;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::time::Duration;

const ROWS: usize = 300;
const COLS: usize = 40;
const BLOCK: usize = 8;
const BLOCKS: u64 = COLS.div_ceil(BLOCK) as u64;
const SWEEPS: u64 = 60;

/// Deterministic data every node can build: the columns of X (entries in [-1, 1]) and
/// y = X b_true, with negative entries in b_true so the constraint is active.
fn data() -> (Vec<Vec<f32>>, Vec<f32>) {
    let mut state = 12345u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
        ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    let cols: Vec<Vec<f32>> = (0..COLS)
        .map(|_| (0..ROWS).map(|_| next()).collect())
        .collect();
    let b_true = |j: usize| [-1.0, 0.5, 1.5][j % 3];
    let y = (0..ROWS).map(|i| (0..COLS).map(|j| cols[j][i] * b_true(j)).sum());
    let y = y.collect();
    (cols, y)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// The coordinates of block `round mod BLOCKS`.
fn block(round: u64) -> Range<usize> {
    let start = (round % BLOCKS) as usize * BLOCK;
    start..(start + BLOCK).min(COLS)
}

struct Nnls;

/// Worker -> scheduler: `x_j^T r` over the worker's rows for the block's coordinates.
#[derive(Serialize, Deserialize)]
struct Partial {
    #[serde(with = "f32_bytes")]
    x_t_r: Vec<f32>,
    sq_residual: f32,
}

/// Scheduler -> workers: the block's deltas (the block is `round mod BLOCKS`).
#[derive(Clone, Serialize, Deserialize)]
struct Deltas(#[serde(with = "f32_bytes")] Vec<f32>);

impl StradsApp for Nnls {
    const DISPATCH_NAME: &'static str = "example.nnls.dispatch";
    const COMMIT_NAME: &'static str = "example.nnls.commit";
    type Task = u64; // the block
    type Partial = Partial;
    type Commit = Deltas;
}

/// Scheduler half: the blocks in a fixed rotation; projected coordinate steps.
struct NnlsScheduler {
    b: Vec<f32>,
    col_sq_norms: Vec<f32>,
    objective: Vec<f32>,
}

impl Schedule<Nnls> for NnlsScheduler {
    fn schedule(&mut self, round: u64, _in_flight: usize) -> Step<u64> {
        match round < SWEEPS * BLOCKS {
            true => Step::Run(Plan::All(round % BLOCKS)),
            false => Step::Done,
        }
    }

    fn pull(
        &mut self,
        round: u64,
        parts: Vec<Partial>,
        _: Duration,
    ) -> Result<Deltas, StradsModelError> {
        self.objective
            .push(parts.iter().map(|p| p.sq_residual).sum());
        // Jacobi step on the block (columns here are nearly orthogonal), projected on b >= 0.
        let step = |(k, j): (usize, usize)| {
            let g: f32 = parts.iter().map(|p| p.x_t_r[k]).sum();
            let old = self.b[j];
            self.b[j] = (old + g / self.col_sq_norms[j]).max(0.0);
            self.b[j] - old
        };
        Ok(Deltas(block(round).enumerate().map(step).collect()))
    }
}

/// Worker half: its rows of every column of X, and the residual r = y - X b on them.
struct NnlsWorker {
    cols: Vec<Vec<f32>>,
    r: Vec<f32>,
}

impl Push<Nnls> for NnlsWorker {
    fn push(&mut self, _round: u64, &blk: &u64) -> Result<Partial, StradsModelError> {
        let x_t_r = block(blk).map(|j| dot(&self.cols[j], &self.r)).collect();
        let sq_residual = dot(&self.r, &self.r);
        Ok(Partial { x_t_r, sq_residual })
    }

    fn commit(&mut self, round: u64, deltas: &Deltas) -> Result<(), StradsModelError> {
        for (j, d) in block(round).zip(&deltas.0) {
            for (r, x) in self.r.iter_mut().zip(&self.cols[j]) {
                *r -= x * d;
            }
        }
        Ok(())
    }
}

impl StradsJob for Nnls {
    const SECTION: &'static str = "nnls";
    const SCHEDULER_ROLE: &'static str = "nnls-scheduler";
    const WORKER_ROLE: &'static str = "nnls-worker";
    type Config = (); // [app.nnls]: nothing to set
    type Scheduler = NnlsScheduler;
    type Worker = StarHalf<NnlsWorker>;

    fn scheduler(_: &(), _: &JobShape) -> Result<NnlsScheduler, StradsError> {
        let col_sq_norms = data().0.iter().map(|c| dot(c, c)).collect();
        let (b, objective) = (vec![0.0; COLS], Vec::new());
        Ok(NnlsScheduler {
            b,
            col_sq_norms,
            objective,
        })
    }

    fn worker(_: &(), me: usize, shape: &JobShape) -> Result<StarHalf<NnlsWorker>, StradsError> {
        let (cols, y) = data();
        let rows = (me * ROWS / shape.workers)..((me + 1) * ROWS / shape.workers);
        let cols = cols.iter().map(|c| c[rows.clone()].to_vec()).collect();
        Ok(StarHalf(NnlsWorker {
            cols,
            r: y[rows].to_vec(),
        }))
    }

    fn finish(_: &(), s: NnlsScheduler, run: &FinishedRun) -> Result<(), StradsError> {
        let negatives = s.b.iter().filter(|v| **v < 0.0).count();
        let (rounds, last) = (run.stats.rounds, s.objective.last());
        println!("cluster: {rounds} rounds; ||y - X b||^2 = {last:?}; {negatives} b_j < 0");
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = LaunchArgs::from_env();
    // A cluster of one scheduler and two workers: threads of this process (talking through
    // memory), or processes and hosts (over QUIC).
    let settings = Topology::builder("nnls")
        .transport(Transport::Memory)
        .node("scheduler", &[Nnls::SCHEDULER_ROLE])
        .node("w0", &[Nnls::WORKER_ROLE])
        .node("w1", &[Nnls::WORKER_ROLE])
        .build()?;
    let cluster = register::<Nnls>(Cluster::new(settings));
    if let LaunchMode::Node { .. } = args.mode() {
        // One node of a larger run: the scheduler's process prints the result.
        launch(&cluster, &args)?;
        return Ok(());
    }
    // The same halves in one thread, in the cluster's message order (what tests run).
    let (serial, run) = run_serial::<Nnls>(&(), 2, Delivery::Late)?;
    let (first, last) = (
        serial.objective[0],
        serial.objective[serial.objective.len() - 1],
    );
    println!(
        "serial: {} rounds; ||y - X b||^2 {first} -> {last}",
        run.rounds
    );
    if last.is_nan() || last >= 0.5 * first || serial.b.iter().any(|b| *b < 0.0) {
        return Err(format!("NNLS did not converge: {first} -> {last}").into());
    }
    launch(&cluster, &args)?;
    Ok(())
}
