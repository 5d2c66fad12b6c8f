//! The apps of `petrel bench chaos`: their jobs, their nodes and how a run's model is
//! compared with the reference's.

use super::{BenchError, ChaosBenchArgs};
use crate::common::name_of;
use std::path::Path;

/// An app whose multi-process `petrel train` job checkpoints and restarts by itself.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChaosApp {
    /// STRADS Lasso (scheduler + workers).
    Lasso,
    /// STRADS sparse logistic regression (scheduler + workers).
    Logistic,
    /// STRADS CCD++ matrix factorization (scheduler + workers).
    StradsMf,
    /// STRADS LDA (scheduler + workers).
    Lda,
    /// P3 data-parallel training of an MLP (workers + two shards, shaped links).
    P3,
    /// Parameter-server matrix factorization under BSP (workers + two shards).
    PsMf,
    /// Parameter-server logistic regression under BSP (workers + two shards).
    PsLr,
}

/// What a run's model is compared by: the output files byte for byte, or (PS runs, not
/// deterministic: shards sum float deltas in arrival order) `metrics.json`'s final figure.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    Bytes(Vec<u8>),
    Figure(f64),
}

impl ChaosApp {
    pub(super) fn name(self) -> String {
        name_of(&self)
    }

    /// The job's flags besides workers, restarts and output: small jobs that still write
    /// several checkpoints.
    pub(super) fn job_flags(self, args: &ChaosBenchArgs) -> Vec<String> {
        let flags = match self {
            // The default solver (Gauss-Seidel): no scheduled-mode knob, or `auto` would
            // pick the scheduled mode.
            ChaosApp::Lasso => format!(
                "--max-rounds {} --gap-tolerance 0 --checkpoint-every 150 \
                 --synthetic-samples 150 --synthetic-features 300",
                args.max_rounds
            ),
            ChaosApp::Logistic => "--block-size 8 --candidate-pool 32 --max-rounds 3000 \
                --checkpoint-every 200 --seed 3 --synthetic-samples 150 --synthetic-features 300"
                .into(),
            ChaosApp::StradsMf => "--iterations 80 --seed 1".into(),
            ChaosApp::Lda => "--iterations 200 --topics 5 --seed 1".into(),
            // Shaped links (P3) and emulated compute (PS) keep the job going long enough to
            // be hit mid-way.
            ChaosApp::P3 => "--net mlp --mode p3 --epochs 4 --width 2 --batch 8 --lr 0.05 \
                --seed 2 --train-data synthetic:256 --test-data synthetic:64 \
                --bandwidth-mbit 40 --checkpoint-every 4 --shards 2"
                .into(),
            ChaosApp::PsMf => {
                "--consistency bsp --max-clocks 80 --clock-ms 40 --checkpoint-every 10".into()
            }
            ChaosApp::PsLr => {
                "--consistency bsp --clocks 80 --clock-ms 40 --checkpoint-every 10".into()
            }
        };
        flags.split_whitespace().map(String::from).collect()
    }

    /// The final figure a run is compared by: PS runs, and the elastic jobs of every app.
    pub(super) fn figure(self, elastic: bool) -> Option<Tolerance> {
        let within = |figure, tolerance, relative| {
            Some(Tolerance {
                figure,
                tolerance,
                relative,
            })
        };
        // PS runs are not deterministic (shards sum float deltas in arrival order): their
        // held-out figures, relative to the CLI restart tests' tolerances, and absolute to
        // the elastic tests' (a change moves the gradient steps per clock). An elastic
        // STRADS job regroups its sums: its objective, to 1e-6 relative.
        match (self, elastic) {
            (ChaosApp::PsMf, _) => within("/final/test_rmse", 0.02, !elastic),
            (ChaosApp::PsLr, _) => within("/final/test_log_loss", 0.05, !elastic),
            (_, true) => within("/final_objective", 1e-6, true),
            (_, false) => None,
        }
    }

    /// Whether a run's outcome matches the reference's: `Some(true)` identical bytes,
    /// `Some(false)` within tolerance only, `None` neither.
    pub(super) fn matches(self, elastic: bool, reference: &Outcome, got: &Outcome) -> Option<bool> {
        match (reference, got, self.figure(elastic)) {
            (Outcome::Bytes(a), Outcome::Bytes(b), _) => (a == b).then_some(true),
            (Outcome::Figure(a), Outcome::Figure(b), Some(t)) => t.holds(*a, *b).then_some(false),
            _ => None,
        }
    }

    /// The worker and the server (shard or scheduler) node names.
    pub(super) fn roles(self, workers: usize) -> (Vec<String>, Vec<String>) {
        let (worker, servers): (&str, &[&str]) = match self {
            ChaosApp::P3 => ("w", &["s0", "s1"]),
            ChaosApp::PsMf | ChaosApp::PsLr => ("worker-", &["shard-0", "shard-1"]),
            _ => ("w", &["scheduler"]),
        };
        let workers = (0..workers).map(|w| format!("{worker}{w}")).collect();
        (workers, servers.iter().map(|s| s.to_string()).collect())
    }

    /// Every node name (a STRADS scheduler first).
    pub(super) fn nodes(self, workers: usize) -> Vec<String> {
        let (workers, servers) = self.roles(workers);
        match self {
            ChaosApp::P3 | ChaosApp::PsMf | ChaosApp::PsLr => [workers, servers].concat(),
            _ => [servers, workers].concat(),
        }
    }

    /// (victim, impostor) pairs: the impostor is a node that sends the victim data, so a
    /// stolen key, were it admitted, would hold up traffic the job needs.
    pub(super) fn hostile_pairs(self, workers: usize) -> Vec<(String, String)> {
        let n = workers.max(2);
        let (workers, servers) = self.roles(n);
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (i, w) in workers.iter().enumerate() {
            let server = &servers[i % servers.len()];
            pairs.push((server.clone(), w.clone()));
            pairs.push((w.clone(), server.clone()));
            if matches!(self, ChaosApp::StradsMf | ChaosApp::Lda) {
                // Ring: worker i passes its blocks on to worker i + 1.
                pairs.push((workers[(i + 1) % n].clone(), w.clone()));
            }
        }
        pairs
    }

    /// The trained model a run in `out` wrote.
    pub(super) fn model(self, out: &Path, elastic: bool) -> Result<Outcome, BenchError> {
        if let Some(Tolerance { figure, .. }) = self.figure(elastic) {
            let text = std::fs::read_to_string(out.join("metrics.json"))
                .map_err(BenchError::io("metrics.json"))?;
            let metrics: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| BenchError::Incomplete(format!("metrics.json: {e}")))?;
            return (metrics.pointer(figure).and_then(serde_json::Value::as_f64))
                .map(Outcome::Figure)
                .ok_or_else(|| BenchError::Incomplete(format!("no {figure} in metrics.json")));
        }
        let files: &[&str] = match self {
            ChaosApp::PsMf | ChaosApp::PsLr => &[],
            ChaosApp::Lasso | ChaosApp::Logistic => &["coefficients.tsv"],
            ChaosApp::StradsMf => &["user_factors.tsv", "item_factors.tsv"],
            ChaosApp::Lda => &["topic_word.tsv", "topics.txt"],
            ChaosApp::P3 => &["model.safetensors"],
        };
        let mut bytes = Vec::new();
        for file in files {
            bytes.extend(std::fs::read(out.join(file)).map_err(BenchError::io("the model"))?);
        }
        Ok(Outcome::Bytes(bytes))
    }
}

/// A final figure (a JSON pointer into `metrics.json`) and how close a run's must be to
/// the reference's.
pub(super) struct Tolerance {
    figure: &'static str,
    tolerance: f64,
    relative: bool,
}

impl Tolerance {
    pub(super) fn holds(&self, reference: f64, got: f64) -> bool {
        let scale = if self.relative { reference.abs() } else { 1.0 };
        (reference - got).abs() <= self.tolerance * scale
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.figure.rsplit('/').next().unwrap_or(self.figure);
        match (self.relative, self.tolerance >= 0.01) {
            (true, true) => write!(f, "{name} within {}%", self.tolerance * 100.0),
            (true, false) => write!(f, "{name} within {:e} relative", self.tolerance),
            (false, _) => write!(f, "{name} within {}", self.tolerance),
        }
    }
}
