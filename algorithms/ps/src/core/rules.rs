//! Server-side update rules: how a shard folds a worker's delta into a stored row.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::error::PsCoreError;
use crate::core::types::{Row, RowId, UpdateRuleSpec};

/// A server-side update rule: one instance per table per shard (state keyed by row id).
pub trait UpdateRule: Send {
    /// Folds `delta` into `row`, the value of row `id` (the key of any per-row state).
    /// `delta` has been validated against the table's shape.
    fn apply(&mut self, id: RowId, row: &mut Row, delta: &Row);
}

/// `value += delta`.
#[derive(Debug, Default, Clone)]
pub struct Sum;

impl UpdateRule for Sum {
    fn apply(&mut self, _: RowId, row: &mut Row, delta: &Row) {
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
    fn apply(&mut self, _: RowId, row: &mut Row, delta: &Row) {
        row.add_scaled(delta, -self.learning_rate);
    }
}

/// SGD with momentum: `v = momentum * v + g; value -= learning_rate * v`, per row; only the
/// entries present in the delta decay their velocity (lazy variant).
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
    fn apply(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let v = self.velocity.entry(id).or_insert_with(|| zeros_like(row));
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
}

impl UpdateRule for Adagrad {
    fn apply(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let acc = self.accum.entry(id).or_insert_with(|| zeros_like(row));
        acc.apply_with(delta, |x, g| *x += g * g);
        for (c, g) in delta.entries() {
            row.inc(c, -self.learning_rate * g / (acc.get(c).sqrt() + self.eps));
        }
    }
}

/// AdaRevision (McMahan & Streeter, "Delay-tolerant algorithms for asynchronous distributed
/// online learning", NIPS 2014), per coordinate, on the shard.
///
/// A row is `[x_0 .. x_{k-1} | z_0 .. z_{k-1}]`: the values and, per value, the sum `z` of
/// every gradient applied to it. A worker reads both, computes its gradient `g` at the `x` it
/// read and sends `[g | z_old]`, the `z` it read (client bookkeeping: [`adarevision_delta`]).
/// The shard then knows the *backlog* `g_bck = z - z_old`, the gradients applied since that
/// read, which the worker's gradient did not see, and per coordinate:
///
/// ```text
/// eta_old = alpha / sqrt(G_max)
/// G      += g^2 + 2 g g_bck          // accounts for g's interaction with the backlog
/// G_max   = max(G_max, G)
/// eta     = alpha / sqrt(G_max)
/// x      += -eta g + (eta_old - eta) g_bck   // and revises the backlog's steps to eta
/// z      += g
/// ```
///
/// With no delay (`g_bck = 0`) this is Adagrad; with delay the step shrinks by the overlap
/// the stale gradient has with the updates it missed. Deltas must not be coalesced: one
/// gradient per row and clock (a sum of two `z_old` would be wrong), which is how a worker
/// uses it (read, one gradient, clock).
#[derive(Debug, Clone)]
pub struct AdaRevision {
    /// Base step size `alpha`.
    pub learning_rate: f32,
    /// `G` and `G_max` start here (> 0).
    pub initial_accumulator: f32,
    /// Value columns per row.
    pub width: u32,
    /// Per row: `(G, G_max)` per value column.
    accum: HashMap<RowId, Vec<(f64, f64)>>,
}

impl AdaRevision {
    /// The rule with these hyper-parameters.
    pub fn new(learning_rate: f32, initial_accumulator: f32, width: u32) -> Self {
        AdaRevision {
            learning_rate,
            initial_accumulator: initial_accumulator.max(f32::MIN_POSITIVE),
            width,
            accum: HashMap::new(),
        }
    }
}

impl UpdateRule for AdaRevision {
    fn apply(&mut self, id: RowId, row: &mut Row, delta: &Row) {
        let (k, a0) = (self.width, f64::from(self.initial_accumulator));
        let alpha = f64::from(self.learning_rate);
        let acc = self
            .accum
            .entry(id)
            .or_insert_with(|| vec![(a0, a0); k as usize]);
        for (c, g) in delta.entries().filter(|&(c, _)| c < k) {
            let Some(slot) = acc.get_mut(c as usize) else {
                continue;
            };
            let g = f64::from(g);
            let z = f64::from(row.get(k + c));
            let z_old = f64::from(delta.get(k + c));
            let backlog = z - z_old;
            let eta_old = alpha / slot.1.sqrt();
            slot.0 += g * g + 2.0 * g * backlog;
            slot.1 = slot.1.max(slot.0);
            let eta = alpha / slot.1.sqrt();
            row.inc(c, (-eta * g + (eta_old - eta) * backlog) as f32);
            row.inc(k + c, g as f32);
        }
    }
}

/// The gradient rules an app offers (`--rule`) for a table whose deltas are gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerRule {
    /// `x -= alpha g` (fixed step).
    Sgd,
    /// `x -= alpha g / sqrt(sum g^2)`.
    Adagrad,
    /// [`AdaRevision`]: Adagrad revised for the updates a stale gradient missed.
    AdaRevision,
}

impl ServerRule {
    /// Initial accumulator of AdaRevision (`G` and `G_max`) and Adagrad (as `eps`, its
    /// root), Bösen's: the first step is `alpha * g / sqrt(1 + g^2)`, so it scales with the
    /// gradient instead of being about `alpha` whatever the gradient.
    pub const INITIAL_ACCUMULATOR: f32 = 1.0;

    /// The untuned step `alpha` of Adagrad and AdaRevision, Bösen's default.
    pub const DEFAULT_ALPHA: f32 = 0.1;

    /// The table's update rule for `width` values per row with step `alpha`.
    pub fn spec(self, alpha: f32, width: u32) -> UpdateRuleSpec {
        match self {
            ServerRule::Sgd => UpdateRuleSpec::Sgd {
                learning_rate: alpha,
            },
            ServerRule::Adagrad => UpdateRuleSpec::Adagrad {
                learning_rate: alpha,
                eps: Self::INITIAL_ACCUMULATOR.sqrt(),
            },
            ServerRule::AdaRevision => UpdateRuleSpec::AdaRevision {
                learning_rate: alpha,
                initial_accumulator: Self::INITIAL_ACCUMULATOR,
                width,
            },
        }
    }

    /// Whether a cached row with own deltas at the local scale equals the shard's when no
    /// one else writes it (`sgd` only; see `UpdateRuleSpec::local_scale`). Under the others,
    /// a read after an own write waits for the shard's copy (`ClientCore::get_shared`).
    pub fn local_view_exact(self) -> bool {
        matches!(self, ServerRule::Sgd)
    }

    /// Stored columns per row for `width` values (AdaRevision keeps `z` beside them).
    pub fn row_width(self, width: u32) -> u32 {
        match self {
            ServerRule::AdaRevision => 2 * width,
            ServerRule::Sgd | ServerRule::Adagrad => width,
        }
    }
}

/// The step `alpha` of [`AdaRevision`] (and [`Adagrad`]) for a solution within
/// `[-radius, radius]`: `sqrt(2) * radius`. Here `alpha` is a length, not a rate (the first
/// step of a coordinate); the regret analysis sets it from the diameter `2 * radius`.
pub fn alpha_for_radius(radius: f64) -> f32 {
    (std::f64::consts::SQRT_2 * radius.abs()) as f32
}

/// Client-side bookkeeping of [`AdaRevision`]: the delta for `gradient` taken at `read`.
pub fn adarevision_delta(gradient: &[f32], read: &Row) -> Row {
    let k = gradient.len() as u32;
    let mut d = gradient.to_vec();
    d.extend((0..k).map(|c| read.get(k + c)));
    Row::Dense(d)
}

/// An all-zero row of `row`'s kind and width.
fn zeros_like(row: &Row) -> Row {
    match row {
        Row::Dense(v) => Row::Dense(vec![0.0; v.len()]),
        Row::Sparse(_) => Row::Sparse(Vec::new()),
    }
}

/// The entries of `v` at the positions present in `mask`, as a sparse row.
fn project(v: &Row, mask: &Row) -> Row {
    Row::Sparse(mask.entries().map(|(c, _)| (c, v.get(c))).collect())
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
            UpdateRuleSpec::AdaRevision {
                learning_rate,
                initial_accumulator,
                width,
            } => Box::new(AdaRevision::new(
                *learning_rate,
                *initial_accumulator,
                *width,
            )),
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
        Sum.apply(RowId(0), &mut r, &Row::Dense(vec![1.0, 2.0]));
        assert_eq!(r, Row::Dense(vec![2.0, 3.0]));
        let mut sgd = Sgd { learning_rate: 0.5 };
        sgd.apply(RowId(0), &mut r, &Row::Sparse(vec![(1, 2.0)]));
        assert_eq!(r, Row::Dense(vec![2.0, 2.0]));
    }

    #[test]
    fn momentum_accumulates_velocity_per_row() {
        let mut m = SgdMomentum::new(1.0, 0.5);
        let mut r = Row::Dense(vec![0.0]);
        m.apply(RowId(1), &mut r, &Row::Dense(vec![1.0])); // v = 1
        m.apply(RowId(1), &mut r, &Row::Dense(vec![1.0])); // v = 1.5
        assert!(close(r.get(0), -2.5));
        let mut other = Row::Dense(vec![0.0]);
        m.apply(RowId(2), &mut other, &Row::Dense(vec![1.0]));
        assert!(close(other.get(0), -1.0));
    }

    #[test]
    fn adagrad_scales_by_accumulated_squares() {
        let mut a = Adagrad::new(1.0, 0.0);
        let mut r = Row::Sparse(vec![]);
        a.apply(RowId(0), &mut r, &Row::Sparse(vec![(3, 2.0)])); // G=4, step 2/2 = 1
        assert!(close(r.get(3), -1.0));
        a.apply(RowId(0), &mut r, &Row::Sparse(vec![(3, 3.0)])); // G=13, step 3/sqrt13
        assert!(close(r.get(3), -1.0 - 3.0 / 13f32.sqrt()));
    }

    #[test]
    fn adarevision_without_delay_is_adagrad() {
        let mut ada = AdaRevision::new(1.0, 1e-12, 1);
        let mut adagrad = Adagrad::new(1.0, 0.0);
        let (mut r, mut q) = (Row::Dense(vec![0.0, 0.0]), Row::Dense(vec![0.0]));
        for g in [2.0f32, -1.0, 0.5] {
            // Fresh read every time: z_old = z, so no backlog.
            let d = adarevision_delta(&[g], &r);
            ada.apply(RowId(0), &mut r, &d);
            adagrad.apply(RowId(0), &mut q, &Row::Dense(vec![g]));
            assert!(close(r.get(0), q.get(0)), "{r:?} vs {q:?}");
        }
        // z is the sum of the gradients.
        assert!(close(r.get(1), 1.5));
    }

    #[test]
    fn adarevision_revises_a_stale_gradient() {
        // Two workers read x = 0, z = 0. A's gradient 1 arrives first; B's gradient 1 was
        // computed without A's update (backlog 1).
        let mut ada = AdaRevision::new(1.0, 1.0, 1);
        let mut row = Row::Dense(vec![0.0, 0.0]);
        let read = row.clone();
        ada.apply(RowId(0), &mut row, &adarevision_delta(&[1.0], &read));
        // G = 1 + 1 = 2: x = -1/sqrt(2).
        let after_a = -1.0 / 2f32.sqrt();
        assert!(close(row.get(0), after_a));
        ada.apply(RowId(0), &mut row, &adarevision_delta(&[1.0], &read));
        // eta_old = 1/sqrt2; G = 2 + 1 + 2*1*1 = 5; eta = 1/sqrt5.
        let (eta_old, eta) = (1.0 / 2f32.sqrt(), 1.0 / 5f32.sqrt());
        let expect = after_a - eta + (eta_old - eta);
        assert!(close(row.get(0), expect), "{} vs {expect}", row.get(0));
        assert!(close(row.get(1), 2.0));
        // The same gradient without the delay (a fresh read) takes a larger accumulator
        // increase away: G = 2 + 1 = 3 < 5, so the stale step is the more cautious one.
        let mut fresh = AdaRevision::new(1.0, 1.0, 1);
        let mut r2 = Row::Dense(vec![0.0, 0.0]);
        let read0 = r2.clone();
        fresh.apply(RowId(0), &mut r2, &adarevision_delta(&[1.0], &read0));
        let read1 = r2.clone();
        fresh.apply(RowId(0), &mut r2, &adarevision_delta(&[1.0], &read1));
        assert!(
            r2.get(0) < row.get(0),
            "a fresh gradient steps further: {r2:?} {row:?}"
        );
    }

    #[test]
    fn adarevision_keeps_state_per_row_and_builds_from_its_spec() {
        let reg = RuleRegistry::new();
        let mut rule = reg
            .build(&UpdateRuleSpec::AdaRevision {
                learning_rate: 1.0,
                initial_accumulator: 1.0,
                width: 2,
            })
            .unwrap();
        let mut a = Row::Dense(vec![0.0; 4]);
        let mut b = Row::Dense(vec![0.0; 4]);
        let read = a.clone();
        rule.apply(RowId(0), &mut a, &adarevision_delta(&[3.0, 0.0], &read));
        rule.apply(RowId(1), &mut b, &adarevision_delta(&[3.0, 0.0], &read));
        assert_eq!(a, b, "row 1 starts from a fresh accumulator");
        // G = 1 + 9 = 10: x0 = -3/sqrt(10); column 1 had a zero gradient.
        assert!(close(a.get(0), -3.0 / 10f32.sqrt()));
        assert!(close(a.get(1), 0.0));
        assert_eq!(
            UpdateRuleSpec::AdaRevision {
                learning_rate: 0.1,
                initial_accumulator: 1.0,
                width: 2
            }
            .local_scale(),
            0.0
        );
        // Adagrad's cache is left as read too: `-alpha * g` is not its step.
        assert_eq!(
            UpdateRuleSpec::Adagrad {
                learning_rate: 0.1,
                eps: 1e-3
            }
            .local_scale(),
            0.0
        );
        assert!(ServerRule::Sgd.local_view_exact());
        assert!(!ServerRule::Adagrad.local_view_exact());
        assert!(!ServerRule::AdaRevision.local_view_exact());
    }

    #[test]
    fn default_first_steps_scale_with_the_gradient() {
        // Bösen's start: G = G_max = 1, so a small gradient takes a small first step (an
        // accumulator near 0 would step about alpha whatever the gradient).
        let reg = RuleRegistry::new();
        let alpha = ServerRule::DEFAULT_ALPHA;
        assert_eq!(alpha, 0.1);
        for rule in [ServerRule::AdaRevision, ServerRule::Adagrad] {
            let mut r = reg.build(&rule.spec(alpha, 1)).unwrap();
            let mut row = Row::Dense(vec![0.0; rule.row_width(1) as usize]);
            let read = row.clone();
            let delta = match rule {
                ServerRule::AdaRevision => adarevision_delta(&[0.01], &read),
                _ => Row::Dense(vec![0.01]),
            };
            r.apply(RowId(0), &mut row, &delta);
            // AdaRevision: 0.1 * 0.01 / sqrt(1 + 1e-4); Adagrad: 0.1 * 0.01 / (0.01 + 1).
            assert!((row.get(0) + 0.001).abs() < 2e-5, "{rule:?}: {row:?}");
        }
    }

    #[test]
    fn alpha_is_the_comparator_radius_times_sqrt2() {
        assert!(close(alpha_for_radius(1.0), std::f32::consts::SQRT_2));
        assert!(close(
            alpha_for_radius(-0.5),
            0.5 * std::f32::consts::SQRT_2
        ));
    }

    struct Max;
    impl UpdateRule for Max {
        fn apply(&mut self, _: RowId, row: &mut Row, delta: &Row) {
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
        rule.apply(RowId(0), &mut r, &Row::Dense(vec![3.0, 2.0]));
        assert_eq!(r, Row::Dense(vec![3.0, 5.0]));
        let mut sgd = reg
            .build(&UpdateRuleSpec::Sgd { learning_rate: 2.0 })
            .unwrap();
        sgd.apply(RowId(0), &mut r, &Row::Dense(vec![1.0, 1.0]));
        assert_eq!(r, Row::Dense(vec![1.0, 3.0]));
        assert!(format!("{reg:?}").contains("max"));
    }
}
