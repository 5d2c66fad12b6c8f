// Over 600 lines: the Gauss-Seidel core's unit tests, one per invariant.
use super::*;
use crate::apps::lasso::lambda_max;

/// A tiny sparse design with correlated neighbours (columns `j` and `j + 1` share rows).
fn tiny(n: usize, d: usize) -> (SparseColumns, Vec<f32>) {
    let mut starts = vec![0usize];
    let (mut rows, mut values) = (Vec::new(), Vec::new());
    for j in 0..d {
        let mut col: Vec<(u32, f32)> = (0..4)
            .map(|k| {
                let i = (j * 3 + k * 7 + (j * j) % 5) % n;
                (
                    i as u32,
                    1.0 + ((j + k) % 3) as f32 * 0.5 - (k % 2) as f32 * 1.7,
                )
            })
            .collect();
        col.sort_by_key(|c| c.0);
        col.dedup_by_key(|c| c.0);
        for (i, v) in col {
            rows.push(i);
            values.push(v);
        }
        starts.push(rows.len());
    }
    let x = SparseColumns {
        n_rows: n,
        column_starts: starts,
        row_indices: rows,
        values,
    };
    let y = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3).collect();
    (x, y)
}

/// The reference a worker must match: plain cyclic coordinate descent, one
/// [`column_step`] after the other on the whole residual.
struct Plain<'a> {
    x: &'a SparseColumns,
    norms: Vec<f64>,
    centring: Option<Centring>,
    b: Vec<f64>,
    r: Vec<f64>,
    sq: f64,
    l1: f64,
    lambda: f64,
}

impl<'a> Plain<'a> {
    /// At `b = 0`; `centred`: the columns centred implicitly (`y` centred by the caller).
    fn new(x: &'a SparseColumns, y: &[f32], lambda: f32, centred: bool) -> Self {
        let r: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        let (centring, norms) = if centred {
            let (c, norms) = Centring::of(x, &r);
            (Some(c), norms)
        } else {
            (None, x.column_sq_norms())
        };
        Plain {
            x,
            norms,
            centring,
            b: vec![0.0; x.n_columns()],
            sq: r.iter().map(|v| v * v).sum(),
            r,
            l1: 0.0,
            lambda: f64::from(lambda),
        }
    }

    fn update(&mut self, j: usize) {
        let (rows, vals) = self.x.column(j);
        column_step(
            self.centring.as_mut(),
            j,
            rows,
            vals,
            self.norms[j],
            self.lambda,
            &mut self.b[j],
            &mut self.r,
            &mut self.sq,
            &mut self.l1,
        );
    }

    fn objective(&self) -> f64 {
        0.5 * self.sq + self.lambda * self.l1
    }

    /// Folds the centring's offset into the residual and recomputes the running sums
    /// exactly, as a worker's certification does; returns the objective.
    fn certify(&mut self) -> f64 {
        if let Some(c) = &mut self.centring {
            c.fold(&mut self.r);
        }
        self.sq = self.r.iter().map(|r| r * r).sum();
        self.l1 = self.b.iter().map(|b| b.abs()).sum();
        self.objective()
    }

    fn coefficients(&self) -> Vec<f32> {
        self.b.iter().map(|&b| b as f32).collect()
    }
}

fn objective(x: &SparseColumns, y: &[f32], b: &[f64], lambda: f64) -> f64 {
    let mut r: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
    for (j, &bj) in b.iter().enumerate() {
        let (rows, vals) = x.column(j);
        for (&i, &v) in rows.iter().zip(vals) {
            r[i as usize] -= f64::from(v) * bj;
        }
    }
    0.5 * r.iter().map(|v| v * v).sum::<f64>() + lambda * b.iter().map(|v| v.abs()).sum::<f64>()
}

/// One pass over the active set (taken afresh with `fresh`), no settle threshold or target.
fn one_active_pass(fresh: bool) -> SweepOrder {
    SweepOrder {
        coords: Coords::Active { fresh },
        max_passes: 1,
        settle: 0.0,
        target: None,
        decrease: None,
    }
}

fn full(end: usize) -> SweepOrder {
    SweepOrder {
        coords: Coords::Range {
            start: 0,
            end: end as u32,
        },
        max_passes: 1,
        settle: 0.0,
        target: None,
        decrease: None,
    }
}

#[test]
fn a_lone_worker_sweep_is_the_baselines_update_bit_for_bit() {
    let (x, y) = tiny(30, 40);
    let lambda = 0.1 * lambda_max(&x, &y) as f32;
    let mut base = Plain::new(&x, &y, lambda, false);
    let mut worker =
        GsWorkerCore::build(x.clone(), y.clone(), f64::from(lambda), false, false).unwrap();
    for _ in 0..5 {
        for j in 0..x.n_columns() {
            base.update(j);
        }
        let r = worker.sweep(&full(x.n_columns())).unwrap();
        assert_eq!(r.updates, x.n_columns() as u64);
        assert_eq!(
            r.residual_delta,
            RowVector::zero(),
            "a lone worker sends no delta"
        );
        worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
        assert_eq!(
            0.5 * r.sq_residual + f64::from(lambda) * r.l1,
            base.objective(),
            "the running objective is the baseline's, bit for bit"
        );
    }
    let ours: Vec<f32> = worker.coefficients().iter().map(|&b| b as f32).collect();
    assert_eq!(ours, base.coefficients());
    assert!(ours.iter().any(|b| *b != 0.0));
    // Active-set passes settle like the baseline's.
    let active: Vec<usize> = (0..x.n_columns())
        .filter(|&j| worker.coefficients()[j] != 0.0)
        .collect();
    let r = worker
        .sweep(&SweepOrder {
            coords: Coords::Active { fresh: true },
            max_passes: 3,
            settle: 0.0,
            target: None,
            decrease: None,
        })
        .unwrap();
    // The baseline's passes, shrinking as it does: a coordinate left at zero drops out.
    let mut list = active.clone();
    let mut updates = 0;
    for _ in 0..3 {
        for &j in &list {
            base.update(j);
        }
        updates += list.len() as u64;
        list.retain(|&j| base.coefficients()[j] != 0.0);
    }
    assert_eq!(r.updates, updates);
    worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
    let ours: Vec<f32> = worker.coefficients().iter().map(|&b| b as f32).collect();
    assert_eq!(ours, base.coefficients());
}

#[test]
fn active_passes_drop_the_coordinates_they_leave_at_zero_until_the_set_is_taken_afresh() {
    let (x, y) = tiny(30, 60);
    let lambda = 0.05 * lambda_max(&x, &y);
    let nonzero = |w: &GsWorkerCore| -> Vec<usize> {
        (0..x.n_columns())
            .filter(|&j| w.coefficients()[j] != 0.0)
            .collect()
    };
    let mut worker = GsWorkerCore::build(x.clone(), y.clone(), lambda, false, false).unwrap();
    worker.sweep(&full(x.n_columns())).unwrap();
    worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
    let mut before = nonzero(&worker);
    let mut dropped = 0;
    // One pass a round: each round sweeps exactly what the rounds before left non-zero.
    for round in 0..30 {
        let r = worker.sweep(&one_active_pass(round == 0)).unwrap();
        worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
        assert_eq!(r.updates, before.len() as u64, "round {round}");
        let after = nonzero(&worker);
        assert!(after.iter().all(|j| before.contains(j)), "round {round}");
        dropped += before.len() - after.len();
        before = after;
    }
    assert!(
        dropped > 0,
        "no coordinate went back to zero: the test shows nothing"
    );
}

#[test]
fn a_lone_centring_worker_is_the_centred_baseline_bit_for_bit() {
    let (x, y) = tiny(30, 40);
    let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / y.len() as f64;
    let y: Vec<f32> = y.iter().map(|&v| v - mean as f32).collect();
    let lambda = 0.1 * crate::apps::lasso::config::centred_lambda_max(&x, &y) as f32;
    let mut base = Plain::new(&x, &y, lambda, true);
    let mut worker =
        GsWorkerCore::build(x.clone(), y.clone(), f64::from(lambda), false, true).unwrap();
    for sweep in 0..5 {
        for j in 0..x.n_columns() {
            base.update(j);
        }
        let r = worker.sweep(&full(x.n_columns())).unwrap();
        worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
        assert_eq!(
            0.5 * r.sq_residual + f64::from(lambda) * r.l1,
            base.objective(),
            "sweep {sweep}: the running objective is the centred baseline's, bit for bit"
        );
        if sweep == 2 {
            // Both fold the offset into the residual at a certification.
            let f = base.certify();
            let c = worker.certify();
            assert_eq!(0.5 * c.rr + f64::from(lambda) * c.l1, f);
        }
    }
    let ours: Vec<f32> = worker.coefficients().iter().map(|&b| b as f32).collect();
    assert_eq!(ours, base.coefficients());
    assert!(ours.iter().any(|b| *b != 0.0));
}

#[test]
fn two_centring_workers_keep_equal_residuals_and_report_the_exact_delta() {
    // u_p = r_start - r_end, with r = s + c 1 dense: the stored part plus the offset.
    const N: usize = 90;
    let (x, y) = tiny(N, 60);
    let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / N as f64;
    let y: Vec<f32> = y.iter().map(|&v| v - mean as f32).collect();
    let lambda = 0.05 * crate::apps::lasso::config::centred_lambda_max(&x, &y);
    let cut = 30;
    let mut w = [
        GsWorkerCore::build(x.columns(0..cut), y.clone(), lambda, true, true).unwrap(),
        GsWorkerCore::build(x.columns(cut..60), y.clone(), lambda, true, true).unwrap(),
    ];
    let dense = |w: &GsWorkerCore| -> Vec<f64> {
        let c = w.centring.as_ref().map_or(0.0, |c| c.offset);
        w.residual().iter().map(|s| s + c).collect()
    };
    for _ in 0..5 {
        let start = dense(&w[0]);
        let r = [
            w[0].sweep(&full(cut)).unwrap(),
            w[1].sweep(&full(30)).unwrap(),
        ];
        for p in 0..2 {
            let u: Vec<f64> = r[p]
                .residual_delta
                .to_dense(N)
                .unwrap()
                .iter()
                .map(|v| v + r[p].residual_offset)
                .collect();
            let end = dense(&w[p]);
            for i in 0..N {
                assert!((start[i] - end[i] - u[i]).abs() <= 1e-9, "row {i}");
            }
            let r_dot_u: f64 = start.iter().zip(&u).map(|(a, b)| a * b).sum();
            assert!((r_dot_u - r[p].r_dot_u).abs() <= 1e-9 * r_dot_u.abs().max(1.0));
        }
        // Commit with weights 1/2 each: every worker ends at start - V.
        let mut combined = vec![0.0; N];
        let mut offset = 0.0;
        for r in &r {
            r.residual_delta.add_scaled_to(0.5, &mut combined).unwrap();
            offset += 0.5 * r.residual_offset;
        }
        let combined = RowVector::from_dense(combined);
        for w in &mut w {
            w.commit(0.5, &combined, offset).unwrap();
        }
        assert_eq!(dense(&w[0]), dense(&w[1]), "residuals stay equal");
    }
}

#[test]
fn a_lone_worker_stops_at_the_target_after_the_same_update_as_the_baseline() {
    let (x, y) = tiny(30, 40);
    let lambda = 0.1 * lambda_max(&x, &y) as f32;
    let mut base = Plain::new(&x, &y, lambda, false);
    let start = base.objective();
    let target = start * 0.6;
    let mut base_updates = 0;
    'outer: for _ in 0..50 {
        for j in 0..x.n_columns() {
            base.update(j);
            base_updates += 1;
            if base.objective() <= target {
                break 'outer;
            }
        }
    }
    let mut worker = GsWorkerCore::build(x.clone(), y, f64::from(lambda), false, false).unwrap();
    let mut updates = 0;
    for _ in 0..50 {
        let mut order = full(x.n_columns());
        order.target = Some(target);
        let r = worker.sweep(&order).unwrap();
        worker.commit(1.0, &RowVector::zero(), 0.0).unwrap();
        updates += r.updates;
        if r.reached_target {
            break;
        }
    }
    assert_eq!(updates, base_updates);
}

#[test]
fn a_sweep_asked_for_a_decrease_stops_at_the_update_that_makes_it_mid_pass() {
    // One worker with several coordinates' worth of progress to make: asked for a
    // decrease of its own view, it stops after the same update as when asked for the
    // target that decrease reaches, in the middle of a pass, and says so.
    let (x, y) = tiny(30, 40);
    let lambda = 0.1 * lambda_max(&x, &y) as f32;
    let mut by_target =
        GsWorkerCore::build(x.clone(), y.clone(), f64::from(lambda), true, false).unwrap();
    let mut by_decrease = by_target.clone();
    let start = 0.5 * y.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
    let decrease = 0.3 * start;
    let mut order = full(x.n_columns());
    order.max_passes = 50;
    let reached = by_decrease
        .sweep(&SweepOrder {
            decrease: Some(decrease),
            ..order.clone()
        })
        .unwrap();
    let target = by_target
        .sweep(&SweepOrder {
            target: Some(start - decrease),
            ..order.clone()
        })
        .unwrap();
    assert!(reached.reached_target);
    assert_eq!(reached.updates, target.updates);
    assert_eq!(by_decrease.coefficients(), by_target.coefficients());
    assert!(
        !reached.updates.is_multiple_of(x.n_columns() as u64),
        "{}",
        reached.updates
    );
    // Without it the same order runs its passes out.
    let mut free = GsWorkerCore::build(x.clone(), y, f64::from(lambda), true, false).unwrap();
    let all = free.sweep(&order).unwrap();
    assert!(!all.reached_target);
    assert!(all.updates > reached.updates);
}

#[test]
fn two_workers_keep_equal_exact_residuals_and_never_raise_the_objective() {
    const N: usize = 90;
    let (x, y) = tiny(N, 60);
    let lambda = f64::from(0.05 * lambda_max(&x, &y) as f32);
    let cut = 30;
    let mut w = [
        GsWorkerCore::build(x.columns(0..cut), y.clone(), lambda, true, false).unwrap(),
        GsWorkerCore::build(x.columns(cut..60), y.clone(), lambda, true, false).unwrap(),
    ];
    let all = |w: &[GsWorkerCore; 2]| -> Vec<f64> {
        w[0].coefficients()
            .iter()
            .chain(w[1].coefficients())
            .copied()
            .collect()
    };
    let mut f = objective(&x, &y, &all(&w), lambda);
    let mut shrunk = false;
    for _ in 0..400 {
        let before: Vec<f64> = all(&w);
        let r = [
            w[0].sweep(&full(cut)).unwrap(),
            w[1].sweep(&full(30)).unwrap(),
        ];
        let u: Vec<Vec<f64>> = r
            .iter()
            .map(|r| r.residual_delta.to_dense(N).unwrap())
            .collect();
        let gram: Vec<Vec<f64>> = (0..2)
            .map(|p| {
                (0..2)
                    .map(|q| u[p].iter().zip(&u[q]).map(|(a, b)| a * b).sum())
                    .collect()
            })
            .collect();
        let omega = (0..N)
            .map(|i| u.iter().filter(|u| u[i] != 0.0).count())
            .max()
            .unwrap();
        let c: Vec<f64> = (0..2)
            .map(|p| {
                let offset = if p == 0 { 0 } else { cut };
                let l1: f64 = r[p]
                    .changed
                    .iter()
                    .zip(&r[p].deltas)
                    .map(|(&j, &d)| {
                        let old = before[offset + j as usize];
                        (old + d).abs() - old.abs()
                    })
                    .sum();
                r[p].r_dot_u - lambda * l1
            })
            .collect();
        let weights = jacobi_weights(&c, &gram, omega);
        shrunk |= weights.iter().any(|&v| v < 1.0);
        let mut combined = vec![0.0; N];
        for p in 0..2 {
            combined
                .iter_mut()
                .zip(&u[p])
                .for_each(|(s, v)| *s += weights[p] * v);
        }
        let combined = RowVector::from_dense(combined);
        for p in 0..2 {
            w[p].commit(weights[p], &combined, 0.0).unwrap();
        }
        assert_eq!(w[0].residual(), w[1].residual(), "residuals stay equal");
        let b = all(&w);
        let exact = objective(&x, &y, &b, lambda);
        let sq: f64 = w[0].residual().iter().map(|v| v * v).sum();
        let l1: f64 = b.iter().map(|v| v.abs()).sum();
        assert!((0.5 * sq + lambda * l1 - exact).abs() <= 1e-9 * exact.abs().max(1.0));
        assert!(
            exact <= f + 1e-12 * f.abs(),
            "objective rose: {f} -> {exact}"
        );
        f = exact;
    }
    assert!(
        shrunk,
        "the design makes the workers interfere at least once"
    );
    // The certificate of the combined state: the optimum is certified by its gap.
    let (c0, c1) = (w[0].certify(), w[1].certify());
    let max_corr = c0.max_abs_corr.max(c1.max_abs_corr);
    let scale = if max_corr > lambda {
        lambda / max_corr
    } else {
        1.0
    };
    let obj = 0.5 * c0.rr + lambda * (c0.l1 + c1.l1);
    let gap = obj - (scale * c0.yr - 0.5 * scale * scale * c0.rr);
    assert!(gap >= -1e-9 && gap <= 1e-6 * obj, "gap {gap} of {obj}");
}

#[test]
fn weights_are_one_without_shared_rows_and_never_worse_than_the_safeguard() {
    let gram = vec![vec![4.0, 3.9], vec![3.9, 4.0]];
    let c = vec![3.0, 3.0];
    assert_eq!(jacobi_weights(&c, &gram, 1), vec![1.0, 1.0]);
    let w = jacobi_weights(&c, &gram, 2);
    let safe = weights_bound(&c, &gram, &[0.5, 0.5]);
    let ones = weights_bound(&c, &gram, &[1.0, 1.0]);
    assert!(ones > safe, "the full step overshoots on aligned deltas");
    assert!(weights_bound(&c, &gram, &w) <= safe);
    assert!(w.iter().all(|v| (0.0..=1.0).contains(v)));
    // Orthogonal deltas: the full step is best.
    let gram = vec![vec![4.0, 0.0], vec![0.0, 4.0]];
    assert_eq!(jacobi_weights(&[4.0, 4.0], &gram, 2), vec![1.0, 1.0]);
}

#[test]
fn a_commit_with_weight_zero_puts_a_worker_back_on_its_state_before_the_sweep() {
    let (x, y) = tiny(60, 40);
    let lambda = f64::from(0.05 * lambda_max(&x, &y) as f32);
    let mut w = GsWorkerCore::build(x.columns(0..20), y, lambda, true, false).unwrap();
    // Move it off b = 0 first, committing its own sweep in full.
    let first = w.sweep(&full(20)).unwrap();
    w.commit(1.0, &first.residual_delta, 0.0).unwrap();
    let (b, r) = (w.coefficients().to_vec(), w.residual().to_vec());
    let second = w.sweep(&full(20)).unwrap();
    assert!(
        !second.changed.is_empty(),
        "the second sweep moves something"
    );
    w.commit(0.0, &RowVector::zero(), 0.0).unwrap();
    assert_eq!(w.coefficients(), &b[..]);
    assert_eq!(w.residual(), &r[..]);
}

#[test]
fn the_kept_share_is_one_without_interference_and_half_for_identical_deltas() {
    // Orthogonal deltas, full steps: the combination keeps every worker's own progress.
    let gram = vec![vec![4.0, 0.0], vec![0.0, 4.0]];
    let w = jacobi_weights(&[4.0, 4.0], &gram, 2);
    assert_eq!(kept_share(&[4.0, 4.0], &gram, &w), 1.0);
    // Two workers found the same step: together they may take it once, half of the sum
    // of what each would have gained alone.
    let gram = vec![vec![1.0, 1.0], vec![1.0, 1.0]];
    let w = jacobi_weights(&[1.0, 1.0], &gram, 2);
    let kept = kept_share(&[1.0, 1.0], &gram, &w);
    assert!((kept - 0.5).abs() < 1e-9, "{kept}");
    // Partly aligned deltas lose part of it.
    let gram = vec![vec![4.0, 2.0], vec![2.0, 4.0]];
    let w = jacobi_weights(&[4.0, 4.0], &gram, 2);
    let kept = kept_share(&[4.0, 4.0], &gram, &w);
    assert!(kept > 0.5 && kept < 0.95, "{kept}");
    // No progress at all: nothing was lost.
    let zero = vec![vec![0.0, 0.0], vec![0.0, 0.0]];
    assert_eq!(kept_share(&[0.0, 0.0], &zero, &[1.0, 1.0]), 1.0);
}

#[test]
fn the_chunk_grows_while_nothing_is_lost_and_shrinks_back_on_interference() {
    let mut g = ChunkGrowth::default();
    assert_eq!(g.factor(), 1);
    for want in [2, 4, 8, 8] {
        g.observe(1.0, 8);
        assert_eq!(g.factor(), want, "grows up to what covers the range");
    }
    g.observe(0.9, 8);
    assert_eq!(g.factor(), 8, "a small loss holds it");
    for want in [4, 2, 1, 1] {
        g.observe(0.5, 8);
        assert_eq!(
            g.factor(),
            want,
            "interference halves it down to the latency chunk"
        );
    }
    // A range shorter than one latency chunk never grows it.
    g.observe(1.0, 1);
    assert_eq!(g.factor(), 1);
}

#[test]
fn row_vectors_pick_the_smaller_encoding_and_refuse_rows_out_of_range() {
    let sparse = RowVector::from_dense(vec![0.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    assert!(matches!(sparse, RowVector::Sparse { .. }));
    assert_eq!(
        sparse.to_dense(6).unwrap(),
        vec![0.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert!(matches!(
        RowVector::from_dense(vec![1.0, 2.0, 3.0]),
        RowVector::Dense(_)
    ));
    let bad = RowVector::Sparse {
        rows: vec![9],
        values: vec![1.0],
    };
    assert!(bad.to_dense(3).is_err());
    assert!(RowVector::Dense(vec![1.0]).to_dense(3).is_err());
}

#[test]
fn sweeps_refuse_columns_out_of_range_and_a_second_sweep_before_the_commit() {
    let (x, y) = tiny(10, 5);
    let mut w = GsWorkerCore::build(x, y, 0.1, true, false).unwrap();
    assert!(w.sweep(&full(6)).is_err());
    w.sweep(&full(5)).unwrap();
    assert!(w.sweep(&full(5)).is_err());
    assert!(w.commit(1.5, &RowVector::zero(), 0.0).is_err());
}

#[test]
fn the_four_lane_dot_product_matches_a_running_sum_at_every_length() {
    for n in 0..=11 {
        let a: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 * 0.25).collect();
        let b: Vec<f64> = (0..n).map(|i| (i % 3) as f64 - 0.5).collect();
        let running: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        // Small integers and quarters: every partial sum is exact in either order.
        assert_eq!(dot(&a, &b), running, "length {n}");
        // The shorter slice bounds it.
        assert_eq!(dot(&a, &b[..n / 2]), dot(&a[..n / 2], &b[..n / 2]));
    }
}

#[test]
fn resident_zeros_are_zeros_of_the_asked_length() {
    for n in [0, 1, 511, 512, 513, 100_000] {
        let v = resident_zeros(n);
        assert_eq!(v.len(), n);
        assert!(v.iter().all(|x| x.to_bits() == 0), "length {n}");
    }
}

#[test]
fn a_sparse_row_vector_keeps_every_non_zero_in_order_wherever_the_zeros_fall() {
    // Zeros at the start, the end, in runs and alone; a non-zero last and first.
    let patterns: [&[f64]; 5] = [
        &[0.0, 0.0, 0.0, 5.0],
        &[7.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        &[0.0, 1.5, 0.0, 0.0, -2.5, 0.0, 0.0, 0.0, 3.0, 0.0],
        &[0.0; 8],
        &[-0.0, 4.0, 0.0, 0.0, 0.0, f64::NAN],
    ];
    for dense in patterns {
        let v = RowVector::from_dense(dense.to_vec());
        let RowVector::Sparse { rows, values } = &v else {
            panic!("{dense:?} should be sparse");
        };
        let expected: Vec<(u32, f64)> = dense
            .iter()
            .enumerate()
            .filter(|(_, x)| **x != 0.0)
            .map(|(i, &x)| (i as u32, x))
            .collect();
        assert_eq!(rows.len(), expected.len());
        for ((&r, &x), &(er, ex)) in rows.iter().zip(values).zip(&expected) {
            assert_eq!((r, x.to_bits()), (er, ex.to_bits()), "{dense:?}");
        }
    }
}

#[test]
fn packed_columns_hold_each_listed_column_s_rows_values_and_norm_in_list_order() {
    let (x, _) = tiny(30, 60);
    let norms = x.column_sq_norms();
    let list = [3usize, 4, 17, 41, 59];
    let packed = PackedColumns::of(&x, &norms, list);
    assert_eq!(packed.len(), list.len());
    for (s, &j) in list.iter().enumerate() {
        let (column, rows, vals, norm) = packed.slot(s);
        assert_eq!(column, j);
        assert_eq!(packed.column_of(s), j);
        assert_eq!((rows, vals), x.column(j));
        assert_eq!(norm.to_bits(), norms[j].to_bits());
    }
    assert_eq!(PackedColumns::of(&x, &norms, []).len(), 0);
}

/// A worker restored from a checkpoint taken between two active-set rounds (its packed
/// active set rebuilt from the saved list) continues exactly as the one that kept running.
#[test]
fn a_worker_restored_between_active_rounds_continues_bit_for_bit() {
    let (x, y) = tiny(30, 60);
    let lambda = 0.05 * lambda_max(&x, &y);
    let mut running = GsWorkerCore::build(x.clone(), y.clone(), lambda, true, false).unwrap();
    let r = running.sweep(&full(x.n_columns())).unwrap();
    running.commit(1.0, &r.residual_delta, 0.0).unwrap();
    let r = running.sweep(&one_active_pass(true)).unwrap();
    running.commit(1.0, &r.residual_delta, 0.0).unwrap();
    let saved = running.snapshot().unwrap();
    let mut restored = GsWorkerCore::build(x.clone(), y.clone(), lambda, true, false).unwrap();
    restored.restore(saved).unwrap();
    let mut swept = 0;
    for round in 0..5 {
        let (a, b) = (
            running.sweep(&one_active_pass(false)).unwrap(),
            restored.sweep(&one_active_pass(false)).unwrap(),
        );
        assert_eq!(a, b, "round {round}");
        swept += a.updates;
        running.commit(0.75, &a.residual_delta, 0.0).unwrap();
        restored.commit(0.75, &b.residual_delta, 0.0).unwrap();
        let bits = |w: &GsWorkerCore| -> Vec<u64> {
            w.coefficients().iter().map(|b| b.to_bits()).collect()
        };
        assert_eq!(bits(&running), bits(&restored), "round {round}");
    }
    assert!(
        swept > 0,
        "the active set was empty: the test shows nothing"
    );
    // A checkpoint whose active list is out of order (edited, or from something else) is
    // refused, not swept in an order the round's list of changes does not expect.
    let mut shuffled = running.snapshot().unwrap();
    shuffled.active = vec![5, 3];
    let mut fresh = GsWorkerCore::build(x.clone(), y.clone(), lambda, true, false).unwrap();
    assert!(fresh.restore(shuffled).is_err());
}

#[test]
fn the_round_deltas_make_the_gram_matrix_and_combine_to_sum_w_u() {
    // Centred workers: each delta is a stored part plus an offset on every row.
    const N: usize = 90;
    let (x, y) = tiny(N, 60);
    let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / N as f64;
    let y: Vec<f32> = y.iter().map(|&v| v - mean as f32).collect();
    let lambda = 0.05 * crate::apps::lasso::config::centred_lambda_max(&x, &y);
    let mut w = [
        GsWorkerCore::build(x.columns(0..30), y.clone(), lambda, true, true).unwrap(),
        GsWorkerCore::build(x.columns(30..60), y.clone(), lambda, true, true).unwrap(),
    ];
    let mut results = [
        w[0].sweep(&full(30)).unwrap(),
        w[1].sweep(&full(30)).unwrap(),
    ];
    let shares: Vec<GsShare> = results.iter_mut().map(GsShare::take_from).collect();
    assert!(
        results
            .iter()
            .all(|r| r.residual_delta == RowVector::zero())
    );
    let dense: Vec<Vec<f64>> = shares
        .iter()
        .map(|s| {
            let stored = s.residual_delta.to_dense(N).unwrap();
            stored.iter().map(|v| v + s.residual_offset).collect()
        })
        .collect();
    assert!(shares.iter().all(|s| s.residual_offset != 0.0));
    let deltas = RoundDeltas::of(&shares, N).unwrap();
    let (gram, omega) = deltas.gram_and_omega();
    assert_eq!(omega, 2, "offsets touch every row");
    for p in 0..2 {
        for q in 0..2 {
            let naive: f64 = dense[p].iter().zip(&dense[q]).map(|(a, b)| a * b).sum();
            assert!(
                (gram[p][q] - naive).abs() <= 1e-9 * naive.abs().max(1.0),
                "({p}, {q})"
            );
        }
    }
    let weights = [0.25, 0.75];
    let (stored, offset) = deltas.combine(&weights).unwrap();
    let stored = stored.to_dense(N).unwrap();
    for i in 0..N {
        let naive = weights[0] * dense[0][i] + weights[1] * dense[1][i];
        assert!((stored[i] + offset - naive).abs() <= 1e-12 * naive.abs().max(1.0));
    }
    assert!(deltas.combine(&[1.0]).is_err());

    // Deltas on disjoint rows, no offsets: nobody shares a row.
    let apart = [
        GsShare {
            residual_delta: RowVector::Sparse {
                rows: vec![1, 4],
                values: vec![1.0, -2.0],
            },
            residual_offset: 0.0,
        },
        GsShare {
            residual_delta: RowVector::Sparse {
                rows: vec![2],
                values: vec![3.0],
            },
            residual_offset: 0.0,
        },
    ];
    let (gram, omega) = RoundDeltas::of(&apart, 6).unwrap().gram_and_omega();
    assert_eq!(omega, 1);
    assert_eq!(gram, vec![vec![5.0, 0.0], vec![0.0, 9.0]]);
}

// Only the tests read this.
impl GsWorkerCore {
    /// Its coefficients.
    pub(crate) fn coefficients(&self) -> &[f64] {
        &self.coefficients
    }
}

// Only the tests read this.
impl GsWorkerCore {
    /// The residual.
    pub(crate) fn residual(&self) -> &[f64] {
        &self.residual
    }
}
