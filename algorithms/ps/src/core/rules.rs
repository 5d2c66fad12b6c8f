//! Server-side update rules: how a shard folds a worker's delta into a stored row.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::error::PsCoreError;
use crate::core::types::{Row, RowId, UpdateRuleSpec};

/// A server-side update rule. One instance per table per shard, so stateful rules (momentum,
/// Adagrad) keep per-row state keyed by row id.
pub trait UpdateRule: Send {
    /// Folds `delta` into `row`. `delta` has been validated against the table's shape.
    fn apply(&mut self, row: &mut Row, delta: &Row);

    /// Row-aware entry point the shard calls. Stateless rules keep the default; stateful ones
    /// override it to find their per-row state.
    fn apply_row(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let _ = id;
        self.apply(row, delta);
    }
}

/// `value += delta`.
#[derive(Debug, Default, Clone)]
pub struct Sum;

impl UpdateRule for Sum {
    fn apply(&mut self, row: &mut Row, delta: &Row) {
        row.add(delta);
    }
}

/// Plain SGD: the delta is a gradient, `value -= learning_rate * gradient`.
#[derive(Debug, Clone)]
pub struct Sgd {
    /// Step size.
    pub learning_rate: f32,
}

impl UpdateRule for Sgd {
    fn apply(&mut self, row: &mut Row, delta: &Row) {
        row.add_scaled(delta, -self.learning_rate);
    }
}

/// SGD with momentum: `v = momentum * v + g; value -= learning_rate * v`, per row.
///
/// Only the entries present in the delta decay their velocity (the lazy variant common for
/// sparse updates); a row's velocity is a dense copy of the row's shape.
#[derive(Debug, Clone)]
pub struct SgdMomentum {
    /// Step size.
    pub learning_rate: f32,
    /// Velocity decay.
    pub momentum: f32,
    velocity: HashMap<RowId, Row>,
}

impl SgdMomentum {
    /// The rule with these hyper-parameters.
    pub fn new(learning_rate: f32, momentum: f32) -> Self {
        SgdMomentum {
            learning_rate,
            momentum,
            velocity: HashMap::new(),
        }
    }
}

impl UpdateRule for SgdMomentum {
    /// Without a row id there is no state: behaves as a single step from zero velocity.
    fn apply(&mut self, row: &mut Row, delta: &Row) {
        row.add_scaled(delta, -self.learning_rate);
    }

    fn apply_row(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let empty = match row {
            Row::Dense(v) => Row::Dense(vec![0.0; v.len()]),
            Row::Sparse(_) => Row::Sparse(Vec::new()),
        };
        let v = self.velocity.entry(id).or_insert(empty);
        let m = self.momentum;
        v.apply_with(delta, |x, g| *x = m * *x + g);
        // Step only along the touched entries, using their new velocity.
        let step = project(v, delta);
        row.add_scaled(&step, -self.learning_rate);
    }
}

/// Adagrad: `G += g^2; value -= learning_rate * g / (sqrt(G) + eps)`, per row.
#[derive(Debug, Clone)]
pub struct Adagrad {
    /// Step size.
    pub learning_rate: f32,
    /// Added to the root of the accumulator.
    pub eps: f32,
    accum: HashMap<RowId, Row>,
}

impl Adagrad {
    /// The rule with these hyper-parameters.
    pub fn new(learning_rate: f32, eps: f32) -> Self {
        Adagrad {
            learning_rate,
            eps,
            accum: HashMap::new(),
        }
    }

    fn step(&self, acc: &Row, row: &mut Row, delta: &Row) {
        let (lr, eps) = (self.learning_rate, self.eps);
        match delta {
            Row::Dense(d) => {
                for (c, &g) in d.iter().enumerate() {
                    let s = acc.get(c as u32);
                    row.inc(c as u32, -lr * g / (s.sqrt() + eps));
                }
            }
            Row::Sparse(d) => {
                for &(c, g) in d {
                    let s = acc.get(c);
                    row.inc(c, -lr * g / (s.sqrt() + eps));
                }
            }
        }
    }
}

impl UpdateRule for Adagrad {
    /// Without a row id: one step with `G = g^2`.
    fn apply(&mut self, row: &mut Row, delta: &Row) {
        let mut acc = Row::Sparse(Vec::new());
        acc.apply_with(delta, |x, g| *x += g * g);
        self.step(&acc, row, delta);
    }

    fn apply_row(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let empty = match row {
            Row::Dense(v) => Row::Dense(vec![0.0; v.len()]),
            Row::Sparse(_) => Row::Sparse(Vec::new()),
        };
        let mut acc = self.accum.remove(&id).unwrap_or(empty);
        acc.apply_with(delta, |x, g| *x += g * g);
        self.step(&acc, row, delta);
        self.accum.insert(id, acc);
    }
}

/// The entries of `v` at the positions present in `mask`, as a sparse row.
fn project(v: &Row, mask: &Row) -> Row {
    let pairs = match mask {
        Row::Dense(d) => (0..d.len() as u32).map(|c| (c, v.get(c))).collect(),
        Row::Sparse(d) => d.iter().map(|&(c, _)| (c, v.get(c))).collect(),
    };
    Row::Sparse(pairs)
}

/// Builds a custom rule instance (one per table per shard).
pub type RuleFactory = Arc<dyn Fn() -> Box<dyn UpdateRule> + Send + Sync>;

/// Builds rules from `UpdateRuleSpec`s; users add named custom rules with `register`.
#[derive(Clone, Default)]
pub struct RuleRegistry {
    custom: HashMap<String, RuleFactory>,
}

impl std::fmt::Debug for RuleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.custom.keys().collect();
        names.sort();
        f.debug_struct("RuleRegistry")
            .field("custom", &names)
            .finish()
    }
}

impl RuleRegistry {
    /// The built-in rules only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the custom rule `name`, used by `UpdateRuleSpec::Custom { name }`.
    pub fn register<F>(&mut self, name: &str, factory: F)
    where
        F: Fn() -> Box<dyn UpdateRule> + Send + Sync + 'static,
    {
        self.custom.insert(name.to_string(), Arc::new(factory));
    }

    /// A fresh rule instance for `spec`; `UnknownRule` for an unregistered custom name.
    pub fn build(&self, spec: &UpdateRuleSpec) -> Result<Box<dyn UpdateRule>, PsCoreError> {
        Ok(match spec {
            UpdateRuleSpec::Sum => Box::new(Sum),
            UpdateRuleSpec::Sgd { learning_rate } => Box::new(Sgd {
                learning_rate: *learning_rate,
            }),
            UpdateRuleSpec::SgdMomentum {
                learning_rate,
                momentum,
            } => Box::new(SgdMomentum::new(*learning_rate, *momentum)),
            UpdateRuleSpec::Adagrad { learning_rate, eps } => {
                Box::new(Adagrad::new(*learning_rate, *eps))
            }
            UpdateRuleSpec::Custom { name } => match self.custom.get(name) {
                Some(f) => f(),
                None => return Err(PsCoreError::UnknownRule(name.clone())),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-5
    }

    #[test]
    fn sum_and_sgd() {
        let mut r = Row::Dense(vec![1.0, 1.0]);
        Sum.apply(&mut r, &Row::Dense(vec![1.0, 2.0]));
        assert_eq!(r, Row::Dense(vec![2.0, 3.0]));
        let mut sgd = Sgd { learning_rate: 0.5 };
        sgd.apply_row(RowId(0), &mut r, &Row::Sparse(vec![(1, 2.0)]));
        assert_eq!(r, Row::Dense(vec![2.0, 2.0]));
    }

    #[test]
    fn momentum_accumulates_velocity_per_row() {
        let mut m = SgdMomentum::new(1.0, 0.5);
        let mut r = Row::Dense(vec![0.0]);
        m.apply_row(RowId(1), &mut r, &Row::Dense(vec![1.0])); // v = 1
        m.apply_row(RowId(1), &mut r, &Row::Dense(vec![1.0])); // v = 1.5
        assert!(close(r.get(0), -2.5));
        let mut other = Row::Dense(vec![0.0]);
        m.apply_row(RowId(2), &mut other, &Row::Dense(vec![1.0]));
        assert!(close(other.get(0), -1.0));
    }

    #[test]
    fn adagrad_scales_by_accumulated_squares() {
        let mut a = Adagrad::new(1.0, 0.0);
        let mut r = Row::Sparse(vec![]);
        a.apply_row(RowId(0), &mut r, &Row::Sparse(vec![(3, 2.0)])); // G=4, step 2/2 = 1
        assert!(close(r.get(3), -1.0));
        a.apply_row(RowId(0), &mut r, &Row::Sparse(vec![(3, 3.0)])); // G=13, step 3/sqrt13
        assert!(close(r.get(3), -1.0 - 3.0 / 13f32.sqrt()));
    }

    struct Max;
    impl UpdateRule for Max {
        fn apply(&mut self, row: &mut Row, delta: &Row) {
            row.apply_with(delta, |x, g| *x = x.max(g));
        }
    }

    #[test]
    fn registry_builds_builtin_and_custom() {
        let mut reg = RuleRegistry::new();
        assert!(matches!(
            reg.build(&UpdateRuleSpec::Custom { name: "max".into() }),
            Err(PsCoreError::UnknownRule(_))
        ));
        reg.register("max", || Box::new(Max));
        let mut rule = reg
            .build(&UpdateRuleSpec::Custom { name: "max".into() })
            .unwrap();
        let mut r = Row::Dense(vec![1.0, 5.0]);
        rule.apply_row(RowId(0), &mut r, &Row::Dense(vec![3.0, 2.0]));
        assert_eq!(r, Row::Dense(vec![3.0, 5.0]));
        let mut sgd = reg
            .build(&UpdateRuleSpec::Sgd { learning_rate: 2.0 })
            .unwrap();
        sgd.apply_row(RowId(0), &mut r, &Row::Dense(vec![1.0, 1.0]));
        assert_eq!(r, Row::Dense(vec![1.0, 3.0]));
        assert!(format!("{reg:?}").contains("max"));
    }
}
