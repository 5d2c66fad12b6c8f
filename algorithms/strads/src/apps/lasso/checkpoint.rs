//! What a Lasso round checkpoint must match: the scheduled Lasso checkpoints with the kit's
//! round checkpoints ([`crate::shells::checkpoint`]); its scheduler half saves the cluster
//! shape with its state and refuses to restore a checkpoint of another design, lambda or
//! seed.

use petrel_actors::durable::Fnv1a64;
use petrel_ml::data::SparseColumns;
use serde::{Deserialize, Serialize};

/// What must match between a checkpoint and a job resuming from it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClusterShape {
    n_samples: u64,
    n_features: u64,
    nnz: u64,
    lambda_bits: u32,
    seed: u64,
    data_fnv64: u64,
}

impl ClusterShape {
    /// The shape of a job on `(x, y)`.
    pub fn of(x: &SparseColumns, y: &[f32], lambda: f32, seed: u64) -> Self {
        ClusterShape {
            n_samples: x.n_rows as u64,
            n_features: x.n_columns() as u64,
            nnz: x.values.len() as u64,
            lambda_bits: lambda.to_bits(),
            seed,
            data_fnv64: data_fingerprint(x, y),
        }
    }

    /// [`data_fingerprint`] of the job's data.
    pub fn data_fnv64(&self) -> u64 {
        self.data_fnv64
    }

    /// What differs between this checkpoint's shape and `job`'s, if anything.
    pub fn difference(&self, job: &ClusterShape) -> Option<String> {
        let lambda = |bits: u32| f32::from_bits(bits).to_string();
        let fields = [
            (
                "n_samples",
                self.n_samples.to_string(),
                job.n_samples.to_string(),
            ),
            (
                "n_features",
                self.n_features.to_string(),
                job.n_features.to_string(),
            ),
            ("nnz", self.nnz.to_string(), job.nnz.to_string()),
            ("lambda", lambda(self.lambda_bits), lambda(job.lambda_bits)),
            ("seed", self.seed.to_string(), job.seed.to_string()),
        ];
        if let Some((field, saved, this)) = fields.iter().find(|(_, a, b)| a != b) {
            return Some(format!(
                "cluster shape differs: {field} is {saved} in the checkpoint but {this} in this job"
            ));
        }
        (self.data_fnv64 != job.data_fnv64).then(|| {
            format!(
                "cluster shape differs: data fingerprint is {:016x} in the checkpoint but {:016x} in this job",
                self.data_fnv64, job.data_fnv64
            )
        })
    }
}

/// FNV-1a 64 over the design's structure and values and the targets.
pub fn data_fingerprint(x: &SparseColumns, y: &[f32]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(&(x.n_rows as u64).to_le_bytes());
    for &s in &x.column_starts {
        h.update(&(s as u64).to_le_bytes());
    }
    for &i in &x.row_indices {
        h.update(&i.to_le_bytes());
    }
    for &v in x.values.iter().chain(y) {
        h.update(&v.to_bits().to_le_bytes());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_of_another_lambda_seed_or_data_is_named() {
        let x = SparseColumns::from_dense(&ndarray::array![[1.0, 0.0], [0.0, 2.0]]);
        let job = ClusterShape::of(&x, &[1.0, 2.0], 0.1, 3);
        assert_eq!(job.difference(&job), None);
        let other = ClusterShape::of(&x, &[1.0, 2.0], 0.2, 3);
        assert!(other.difference(&job).unwrap().contains("lambda is 0.2"));
        let other = ClusterShape::of(&x, &[1.0, 2.0], 0.1, 4);
        assert!(other.difference(&job).unwrap().contains("seed is 4"));
        let other = ClusterShape::of(&x, &[1.0, 2.5], 0.1, 3);
        assert!(other.difference(&job).unwrap().contains("data fingerprint"));
    }
}
