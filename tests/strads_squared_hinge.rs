//! `petrel train logistic --loss squared-hinge`: the L1-regularised L2-loss SVM on the
//! logistic job's Gauss-Seidel solver, end to end on a shipped LIBSVM file.

use crate::common::{coefficients, data, f, failure, last_json_line, metrics, ok, train_data};

/// `sum_i max(0, 1 - y_i x_i^T b)^2 + lambda ||b||_1` on a LIBSVM file (labels 0/1).
fn hinge_objective(file: &std::path::Path, b: &[f64], lambda: f64) -> f64 {
    let text = std::fs::read_to_string(file).unwrap();
    let loss: f64 = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let y = if fields.next().unwrap().parse::<f64>().unwrap() > 0.0 {
                1.0
            } else {
                -1.0
            };
            let margin: f64 = fields
                .map(|kv| {
                    let (k, v) = kv.split_once(':').unwrap();
                    b[k.parse::<usize>().unwrap() - 1] * v.parse::<f64>().unwrap()
                })
                .sum();
            (1.0 - y * margin).max(0.0).powi(2)
        })
        .sum();
    loss + lambda * b.iter().map(|b| b.abs()).sum::<f64>()
}

#[test]
fn squared_hinge_trains_serially_and_over_workers_to_one_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let (serial, three) = (dir.path().join("serial"), dir.path().join("three"));
    let files = [("--data", "classes.train")];
    let hinge = ["--loss", "squared-hinge", "--lambda-fraction", "0.05"];
    let none: Vec<&str> = hinge
        .iter()
        .copied()
        .chain(["--transport", "none"])
        .collect();
    train_data("logistic", &serial, &files, &none);
    let workers = ["--transport", "memory", "--workers", "3"];
    let memory: Vec<&str> = hinge.iter().copied().chain(workers).collect();
    train_data("logistic", &three, &files, &memory);
    let (s, t) = (metrics(&serial), metrics(&three));
    assert_eq!(s["settings"]["loss"], "squared-hinge", "{s}");
    assert_eq!(s["converged"], true, "{s}");
    assert_eq!(t["converged"], true, "{t}");
    assert!(f(&s, "final_training_accuracy") > 0.9, "{s}");
    let (a, b) = (f(&t, "final_objective"), f(&s, "final_objective"));
    assert!((a - b).abs() <= 1e-6 * b, "three workers {a}, serial {b}");
    // The objective is the squared hinge's, recomputed from the written model.
    let model: Vec<f64> = coefficients(&serial);
    let recomputed = hinge_objective(&data("classes.train"), &model, f(&s, "lambda"));
    assert!(
        (recomputed - b).abs() <= 1e-5 * b,
        "{recomputed} from coefficients.tsv, {b} in metrics.json"
    );
    // `petrel eval` classifies by the margin's sign and scores the model by its own loss:
    // on the training file, the objective the job minimised.
    let eval = |file: &str| {
        let stdout = ok(&[
            "eval",
            "logistic",
            "--model",
            serial.to_str().unwrap(),
            "--data",
            data(file).to_str().unwrap(),
        ]);
        last_json_line(&stdout)["figures"].clone()
    };
    let figures = eval("classes.test");
    assert!(f(&figures, "accuracy") > 0.8, "{figures}");
    let figures = eval("classes.train");
    assert!(figures.get("log_loss").is_none(), "{figures}");
    assert!(f(&figures, "squared_hinge") > 0.0, "{figures}");
    let evaluated = f(&figures, "objective");
    assert!(
        (evaluated - b).abs() <= 1e-5 * b,
        "eval's objective {evaluated}, training's {b}"
    );
}

#[test]
fn squared_hinge_is_refused_on_the_scheduled_solver_and_by_the_lasso() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let train = data("classes.train");
    let (out, train) = (out.to_str().unwrap(), train.to_str().unwrap());
    let err = failure(&[
        "train",
        "logistic",
        "--out",
        out,
        "--data",
        train,
        "--loss",
        "squared-hinge",
        "--solver",
        "scheduled",
        "--transport",
        "none",
    ]);
    assert!(err.contains("loss") && err.contains("solver"), "{err}");
    let regression = data("regression.train");
    let err = failure(&[
        "train",
        "lasso",
        "--out",
        out,
        "--data",
        regression.to_str().unwrap(),
        "--loss",
        "logistic",
        "--transport",
        "none",
    ]);
    assert!(
        err.contains("loss") && err.contains("squared loss"),
        "{err}"
    );
}
