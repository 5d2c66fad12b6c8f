//! Jobs and cluster files that several test files run.

use std::path::Path;

use petrel_strads::apps::lasso::{LassoSettings, SyntheticLasso};
use petrel_strads::core::scheduler::ScheduleMode;

/// A three-node demo cluster file: `hub` aggregates (with `hub` lines added to its node),
/// `w1` and `w2` work; `cluster` and `demo` are the lines of `[cluster]` and `[app.demo]`.
pub fn demo_cluster(cluster: &str, hub: &str, demo: &str) -> String {
    format!(
        "\n[cluster]\n{cluster}\n\
         [[nodes]]\nname = \"hub\"\nroles = [\"demo-aggregator\"]\n{hub}\
         [[nodes]]\nname = \"w1\"\nroles = [\"demo-worker\"]\n\
         [[nodes]]\nname = \"w2\"\nroles = [\"demo-worker\"]\n\
         [app.demo]\n{demo}\n"
    )
}

/// A dynamically scheduled Lasso writing to `out`, on a `n_samples` x `n_features` design of
/// correlated groups with 6 true non-zeros (every seed fixed).
pub fn small_lasso(out: &Path, n_samples: usize, n_features: usize) -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples,
            n_features,
            group_size: 10,
            correlation: 0.8,
            n_nonzero: 6,
            noise_std: 0.1,
            nnz_per_column: 0,
            seed: 7,
        },
        mode: ScheduleMode::Dynamic,
        block_size: 8,
        candidate_pool: 32,
        eval_every: 100,
        seed: 5,
        out_dir: Some(out.to_path_buf()),
        ..LassoSettings::default()
    }
}

/// [`small_lasso`] on 150 x 300, run to a relative gap of 1e-6 with `depth` rounds in
/// flight.
pub fn converging_lasso(out: &Path, depth: usize) -> LassoSettings {
    LassoSettings {
        depth,
        max_rounds: 4000,
        gap_tolerance: Some(1e-6),
        ..small_lasso(out, 150, 300)
    }
}

/// The `[app.lasso]` section of a pipelined synthetic Lasso that writes under `out`: the
/// cluster tests' STRADS job, `rounds` long, on `rows` x `features` with `seed`.
pub fn lasso_section(out: &Path, rounds: usize, rows: usize, features: usize, seed: u64) -> String {
    format!(
        r#"
[app.lasso]
block_size = 8
candidate_pool = 32
rho = 0.3
depth = 2
max_rounds = {rounds}
eval_every = 50
gap_tolerance = 1e-12
out_dir = "{out}/lasso"

[app.lasso.synthetic]
n_samples = {rows}
n_features = {features}
seed = {seed}
"#,
        out = out.display()
    )
}
