use super::*;

/// A column's stored rows and values.
type Column = (Vec<u32>, Vec<f32>);

/// A small design (its columns) with labels +-1 that no single feature separates, and its
/// row count.
fn design() -> (Vec<Column>, Vec<f64>, usize) {
    let n = 24;
    let columns = (0..6)
        .map(|j| {
            let rows: Vec<u32> = (0..n as u32).filter(|i| (i + j) % 3 != 0).collect();
            let vals = rows
                .iter()
                .map(|&i| ((i as usize * 7 + j as usize * 5) % 11) as f32 / 5.0 - 1.0)
                .collect();
            (rows, vals)
        })
        .collect();
    let labels = (0..n)
        .map(|i| if (i * 5 + 3) % 7 < 4 { 1.0 } else { -1.0 })
        .collect();
    (columns, labels, n)
}

fn bound(curvature: f64, vals: &[f32]) -> f64 {
    curvature * vals.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
}

fn hinge_objective(labels: &[f64], margins: &[f64], b: &[f64], lambda: f64) -> f64 {
    let loss: f64 = labels
        .iter()
        .zip(margins)
        .map(|(&y, &m)| SquaredHinge::row_loss(y, m))
        .sum();
    loss + lambda * b.iter().map(|b| b.abs()).sum::<f64>()
}

#[test]
fn the_squared_hinge_descends_at_every_step_and_reaches_its_optimality_conditions() {
    let (columns, labels, n) = design();
    let lambda = 0.5;
    let mut b = vec![0.0; columns.len()];
    let mut margins = vec![0.0; n];
    let mut previous = hinge_objective(&labels, &margins, &b, lambda);
    for _ in 0..200 {
        for (j, (rows, vals)) in columns.iter().enumerate() {
            let mut loss = OnLabels {
                labels: &labels,
                loss: SquaredHinge,
            };
            let bound = bound(SquaredHinge::CURVATURE_BOUND, vals);
            cd_step(
                &mut loss,
                rows,
                vals,
                bound,
                lambda,
                &mut b[j],
                &mut margins,
            );
            let now = hinge_objective(&labels, &margins, &b, lambda);
            assert!(now <= previous + 1e-12, "a step raised {previous} to {now}");
            previous = now;
        }
    }
    assert!(
        b.iter().any(|b| *b != 0.0),
        "lambda too large: the test shows nothing"
    );
    // The margins are X b.
    let mut m = vec![0.0; n];
    for ((rows, vals), &bj) in columns.iter().zip(&b) {
        for (&i, &v) in rows.iter().zip(vals) {
            m[i as usize] += f64::from(v) * bj;
        }
    }
    for (a, e) in margins.iter().zip(&m) {
        assert!((a - e).abs() <= 1e-12, "{a} vs {e}");
    }
    // Optimality: |g_j| <= lambda at zero, g_j = -lambda sign(b_j) elsewhere.
    let loss = OnLabels {
        labels: &labels,
        loss: SquaredHinge,
    };
    for ((rows, vals), &bj) in columns.iter().zip(&b) {
        let (g, _) = loss.gradient_curvature(rows, vals, &margins, 0.0);
        let violation = if bj == 0.0 {
            (g.abs() - lambda).max(0.0)
        } else {
            (g + lambda * bj.signum()).abs()
        };
        assert!(violation <= 1e-6, "coordinate {bj}: gradient {g}");
    }
}

#[test]
fn each_loss_gradient_matches_its_finite_difference() {
    let (columns, labels, n) = design();
    let margins: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let (rows, vals) = &columns[2];
    let eps = 1e-6;
    let check = |g: f64, change: &dyn Fn(f64) -> f64| {
        let numeric = (change(eps) - change(-eps)) / (2.0 * eps);
        assert!(
            (g - numeric).abs() <= 1e-5 * g.abs().max(1.0),
            "{g} vs {numeric}"
        );
    };
    let logistic = OnLabels {
        labels: &labels,
        loss: Logistic,
    };
    let (g, h) = logistic.gradient_curvature(rows, vals, &margins, 0.0);
    assert!(h > 0.0 && h <= bound(Logistic::CURVATURE_BOUND, vals));
    check(g, &|d| logistic.loss_change(rows, vals, &margins, 0.0, d));
    let hinge = OnLabels {
        labels: &labels,
        loss: SquaredHinge,
    };
    let (g, h) = hinge.gradient_curvature(rows, vals, &margins, 0.0);
    assert!(h > 0.0 && h <= bound(SquaredHinge::CURVATURE_BOUND, vals));
    check(g, &|d| hinge.loss_change(rows, vals, &margins, 0.0, d));
    // Squared: the state is the residual, and the default change is exact.
    let mut sq = 0.0;
    let squared = Squared {
        sq_residual: &mut sq,
    };
    let b = bound(1.0, vals);
    let (g, _) = squared.gradient_curvature(rows, vals, &margins, b);
    let exact = |d: f64| -> f64 {
        let mut r = margins.clone();
        for (&i, &v) in rows.iter().zip(vals) {
            r[i as usize] -= f64::from(v) * d;
        }
        0.5 * (r.iter().map(|r| r * r).sum::<f64>() - margins.iter().map(|r| r * r).sum::<f64>())
    };
    check(g, &exact);
    let model = squared.loss_change(rows, vals, &margins, b, 0.3);
    assert!((model - exact(0.3)).abs() <= 1e-12 * exact(0.3).abs().max(1.0));
}

#[test]
fn the_squared_step_is_the_exact_minimiser_and_keeps_the_squared_residual() {
    let (columns, _, n) = design();
    let (rows, vals) = &columns[1];
    let mut r: Vec<f64> = (0..n).map(|i| ((i * 3) % 5) as f64 - 2.0).collect();
    let mut sq: f64 = r.iter().map(|r| r * r).sum();
    let norm = bound(1.0, vals);
    let lambda = 0.7;
    let mut b = 0.2;
    let objective =
        |r: &[f64], b: f64| 0.5 * r.iter().map(|r| r * r).sum::<f64>() + lambda * b.abs();
    let before = r.clone();
    cd_step(
        &mut Squared {
            sq_residual: &mut sq,
        },
        rows,
        vals,
        norm,
        lambda,
        &mut b,
        &mut r,
    );
    assert!((sq - r.iter().map(|r| r * r).sum::<f64>()).abs() <= 1e-9);
    // Any nearby coefficient (with its residual) is no better.
    let at = |c: f64| {
        let mut s = before.clone();
        for (&i, &v) in rows.iter().zip(vals) {
            s[i as usize] -= f64::from(v) * (c - 0.2);
        }
        objective(&s, c)
    };
    for d in [-1e-3, 1e-3] {
        assert!(at(b) <= at(b + d) + 1e-12, "{b} is not the minimiser");
    }
}
