//! Held-out figures during training for the linear apps (Lasso, sparse logistic
//! regression): the job's `test_data` is read and checked once when the scheduler half is
//! built (the parser and errors of the final evaluation), then each history point scores
//! it against the coefficients the scheduler holds, with the formulas of the final
//! evaluation ([`petrel_ml::model::linear_figures`]): O(non-zeros of the test set) per
//! point.

use std::collections::{BTreeMap, HashMap, VecDeque};

use petrel_ml::data::{SparseDataset, load_libsvm};
use petrel_ml::model::{LinearTask, heldout_names, linear_figures};

use super::config::{InterceptTerms, LassoSettings};
use crate::error::StradsError;

/// The test set of a linear app and what scoring it needs besides the coefficients.
#[derive(Debug, Clone)]
pub struct LinearHeldout {
    task: LinearTask,
    lambda: f64,
    data: SparseDataset,
    intercept: Option<InterceptTerms>,
}

/// Held-out figures by name (`heldout_mse`, `heldout_accuracy`, ...), as in the final
/// figures.
pub type HeldoutFigures = BTreeMap<String, f64>;

impl LinearHeldout {
    /// The job's test set (`None` without `test_data`), for a model of `task` with L1
    /// weight `lambda`; with `fit_intercept` the training data's means are read too.
    pub fn of(
        job: &LassoSettings,
        task: LinearTask,
        lambda: f32,
    ) -> Result<Option<LinearHeldout>, StradsError> {
        let Some(path) = &job.test_data else {
            return Ok(None);
        };
        let data = load_libsvm(path)?;
        Ok(Some(LinearHeldout {
            task,
            lambda: f64::from(lambda),
            data,
            intercept: job.intercept_terms()?,
        }))
    }

    /// The figures of a solver's f64 coefficients as the model files store them (f32),
    /// with that f32 model's own L1 norm, as the final figures compute it. The f32 copy is
    /// made here, so an evaluation without held-out data never pays for it.
    pub fn figures_of_solver(&self, coefficients: &[f64]) -> HeldoutFigures {
        let model: Vec<f32> = coefficients.iter().map(|&b| b as f32).collect();
        let l1: f64 = model.iter().map(|b| f64::from(b.abs())).sum();
        self.figures(&model, &HashMap::new(), l1)
    }

    /// The figures of the model with coefficients `b` (L1 norm `l1`), except where
    /// `overrides` gives a coefficient another value.
    pub fn figures(&self, b: &[f32], overrides: &HashMap<usize, f32>, l1: f64) -> HeldoutFigures {
        let intercept = self.intercept.as_ref().map_or(0.0, |t| {
            if overrides.is_empty() {
                t.intercept(b)
            } else {
                let mut b = b.to_vec();
                overrides.iter().for_each(|(&j, &v)| b[j] = v);
                t.intercept(&b)
            }
        });
        // The sum of LinearModel::score, so that the last point equals the final figures.
        let score = |x: &petrel_ml::data::SparseRow| {
            intercept
                + x.indices
                    .iter()
                    .zip(&x.values)
                    .filter_map(|(&j, &v)| {
                        let j = j as usize;
                        overrides
                            .get(&j)
                            .or_else(|| b.get(j))
                            .map(|&w| f64::from(w) * f64::from(v))
                    })
                    .sum::<f64>()
        };
        let figures = linear_figures(self.task, self.lambda, l1, &self.data, score);
        heldout_names(figures, &["rows"]).into_iter().collect()
    }
}

/// The old values of the coefficients each recent commit changed, so that a partial
/// computed on an older state (a pipeline deeper than one round) is matched with the
/// held-out figures of that same state.
#[derive(Debug, Clone, Default)]
pub struct CommitLog {
    /// Commit count of the state before `entries[0]`.
    start: u64,
    entries: VecDeque<Vec<(usize, f32)>>,
}

impl CommitLog {
    /// The commit after the current last one changed coefficients `(j, old value)`.
    pub fn push(&mut self, old_values: Vec<(usize, f32)>) {
        self.entries.push_back(old_values);
    }

    /// Forgets everything before state `applied`, then gives the coefficients whose
    /// value at state `applied` differs from the current one, with that value.
    pub fn values_at(&mut self, applied: u64) -> HashMap<usize, f32> {
        while self.start < applied && self.entries.pop_front().is_some() {
            self.start += 1;
        }
        let mut at = HashMap::new();
        for entry in &self.entries {
            for &(j, old) in entry {
                at.entry(j).or_insert(old);
            }
        }
        at
    }

    /// After a restore at `commits` commits: nothing older is known.
    pub fn reset(&mut self, commits: u64) {
        self.start = commits;
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use petrel_ml::data::SparseRow;
    use petrel_ml::model::LinearModel;

    fn heldout(task: LinearTask) -> LinearHeldout {
        let row = |pairs: &[(u32, f32)]| SparseRow {
            indices: pairs.iter().map(|p| p.0).collect(),
            values: pairs.iter().map(|p| p.1).collect(),
        };
        LinearHeldout {
            task,
            lambda: 0.5,
            data: SparseDataset {
                n_features: 3,
                labels: vec![3.0, -1.0, 1.0],
                rows: vec![
                    row(&[(0, 1.0)]),
                    row(&[(2, 2.0), (1, 1.0)]),
                    row(&[(5, 1.0)]),
                ],
            },
            intercept: None,
        }
    }

    #[test]
    fn figures_are_the_final_evaluation_s_with_overrides_applied() {
        for task in [
            LinearTask::Regression,
            LinearTask::BinaryClassification,
            LinearTask::SquaredHingeClassification,
        ] {
            let h = heldout(task);
            let b = [2.0f32, 0.5, -1.0];
            let l1 = 3.5;
            let model = |coefficients: Vec<f32>| {
                let m = LinearModel {
                    task,
                    lambda: 0.5,
                    intercept: 0.0,
                    coefficients,
                };
                heldout_names(m.evaluate(&h.data), &["rows"])
                    .into_iter()
                    .collect::<HeldoutFigures>()
            };
            assert_eq!(h.figures(&b, &HashMap::new(), l1), model(b.to_vec()));
            let older = [(1usize, 0.0f32)].into_iter().collect();
            let at = h.figures(&b, &older, 3.0);
            assert_eq!(at, model(vec![2.0, 0.0, -1.0]));
            assert_ne!(at, h.figures(&b, &HashMap::new(), l1));
            let key = match task {
                LinearTask::Regression => "heldout_mse",
                LinearTask::BinaryClassification => "heldout_log_loss",
                LinearTask::SquaredHingeClassification => "heldout_squared_hinge",
            };
            assert!(at.contains_key(key) && !at.contains_key("heldout_rows"));
        }
    }

    #[test]
    fn a_solver_s_f64_coefficients_are_scored_as_the_f32_model_it_writes() {
        for task in [LinearTask::Regression, LinearTask::BinaryClassification] {
            let h = heldout(task);
            // 1e-50 is a non-zero f64 that the f32 model stores as zero.
            let solver = [2.0f64, 1e-50, -1.000_000_000_1];
            let model: Vec<f32> = solver.iter().map(|&b| b as f32).collect();
            assert_eq!(model[1], 0.0);
            let l1: f64 = model.iter().map(|b| f64::from(b.abs())).sum();
            assert_eq!(
                h.figures_of_solver(&solver),
                h.figures(&model, &HashMap::new(), l1)
            );
        }
    }

    #[test]
    fn the_commit_log_gives_the_values_of_an_older_state() {
        let mut log = CommitLog::default();
        // Commit 1 set b0 (was 0.0), commit 2 set b0 again (was 1.0) and b1 (was 0.0).
        log.push(vec![(0, 0.0)]);
        log.push(vec![(0, 1.0), (1, 0.0)]);
        let at0 = log.values_at(0);
        assert_eq!(at0, [(0, 0.0), (1, 0.0)].into_iter().collect());
        let at1 = log.values_at(1);
        assert_eq!(at1, [(0, 1.0), (1, 0.0)].into_iter().collect());
        assert!(log.values_at(2).is_empty());
        log.push(vec![(2, 5.0)]);
        assert_eq!(log.values_at(2), [(2, 5.0)].into_iter().collect());
        log.reset(7);
        assert!(log.values_at(7).is_empty());
    }
}
