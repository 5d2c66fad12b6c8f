use super::*;
use clap::Parser;

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    job: LassoSettings,
}

#[test]
fn an_empty_section_reads_the_flag_defaults() {
    let job: LassoSettings = toml::from_str("").unwrap();
    assert_eq!(job, LassoSettings::default());
    assert_eq!(job.rho, Some(0.3));
    assert_eq!(job.synthetic.noise_std, 0.1);
}

#[test]
fn no_dependency_check_survives_a_job_file() {
    // `--no-filter` (rho unset) must reach the nodes, whose settings are TOML.
    let job = LassoSettings {
        rho: None,
        ..LassoSettings::default()
    };
    let text = toml::to_string(&job).unwrap();
    assert!(text.contains("rho = false"), "{text}");
    let back: LassoSettings = toml::from_str(&text).unwrap();
    assert_eq!(back.rho, None);
    let set: LassoSettings = toml::from_str("rho = 0.5").unwrap();
    assert_eq!(set.rho, Some(0.5));
    let err = toml::from_str::<LassoSettings>("rho = true")
        .unwrap_err()
        .to_string();
    assert!(err.contains("rho"), "{err}");
    assert_eq!(LassoSettings::default().rho, Some(0.3));
}

#[test]
fn a_bad_mode_is_rejected_naming_the_valid_ones() {
    let err = Flags::try_parse_from(["lasso", "--mode", "bogus"])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("dynamic") && err.contains("random") && err.contains("cyclic"),
        "{err}"
    );
    let err = toml::from_str::<LassoSettings>("mode = \"bogus\"")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dynamic") && err.contains("random") && err.contains("cyclic"),
        "{err}"
    );
    let job: LassoSettings = toml::from_str("mode = \"cyclic\"\nseed = 3").unwrap();
    assert_eq!((job.mode, job.seed), (ScheduleMode::Cyclic, 3));
}

/// The sparse synthetic design of `job` written as a LIBSVM file, every column `j` with
/// `j % 7 == 3` left out (empty columns weigh in the cut too).
fn write_libsvm(job: &LassoSettings, path: &std::path::Path) {
    let (x, y) = job.load().unwrap();
    let mut rows: Vec<Vec<(usize, f32)>> = vec![Vec::new(); x.n_rows];
    for j in (0..x.n_columns()).filter(|j| j % 7 != 3) {
        let (r, v) = x.column(j);
        for (&i, &v) in r.iter().zip(v) {
            rows[i as usize].push((j, v));
        }
    }
    let text: String = rows
        .iter()
        .zip(&y)
        .map(|(row, label)| {
            let features: String = row.iter().map(|(j, v)| format!(" {}:{v}", j + 1)).collect();
            format!("{label}{features}\n")
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

fn sparse_job() -> LassoSettings {
    LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 200,
            n_features: 700,
            nnz_per_column: 8,
            n_nonzero: 12,
            ..SyntheticLasso::default()
        },
        ..LassoSettings::default()
    }
}

/// Every worker's share (and the scheduler's, no columns) against the whole design:
/// the same columns, `y` and `lambda_max`, bit for bit.
fn assert_shares_are_the_whole_designs(job: &LassoSettings) {
    use crate::apps::lasso::gs::column_ranges_of;
    use crate::apps::lasso::gs::tests::column_ranges;
    let (x, y) = job.load().unwrap();
    let lambda_max = job.lambda_max(&x, &y);
    let whole = DesignShape::of(&x);
    for workers in [1, 3] {
        let ranges = column_ranges(&x, workers).unwrap();
        for (index, range) in ranges.iter().enumerate() {
            let share = job
                .load_column_share(|shape| {
                    assert_eq!(*shape, whole);
                    Ok(column_ranges_of(shape, workers)?[index].clone())
                })
                .unwrap();
            assert_eq!(share.columns, *range, "{workers} workers, worker {index}");
            assert_eq!(share.x, x.columns(range.clone()), "worker {index}");
            assert_eq!(share.y, y);
            assert_eq!(share.lambda_max.to_bits(), lambda_max.to_bits());
            assert_eq!(share.shape, whole);
        }
    }
    // The intercept's terms, read without the design, are the whole design's.
    let (xu, yu) = job.load_uncentred().unwrap();
    let (means, y_mean) = column_means(&xu, &yu);
    let terms = job.intercept_terms().unwrap();
    if job.fit_intercept {
        let terms = terms.unwrap();
        assert_eq!(terms, InterceptTerms { means, y_mean });
        let bits = |m: &[f64]| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(terms.y_mean.to_bits(), y_mean.to_bits());
        assert_eq!(bits(&terms.means), bits(&column_means(&xu, &yu).0));
    } else {
        assert_eq!(terms, None);
    }
    let scheduler = job.load_column_share(|_| Ok(0..0)).unwrap();
    assert_eq!(scheduler.x.n_columns(), 0);
    assert!(scheduler.x.values.is_empty());
    assert_eq!(
        (scheduler.y, scheduler.lambda_max.to_bits()),
        (y, lambda_max.to_bits())
    );
}

#[test]
fn a_column_share_is_the_whole_designs_columns_y_and_lambda_max() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("design.svm");
    write_libsvm(&sparse_job(), &path);
    let file = LassoSettings {
        data: Some(path),
        ..LassoSettings::default()
    };
    let dense = LassoSettings {
        synthetic: SyntheticLasso {
            n_samples: 50,
            n_features: 40,
            ..SyntheticLasso::default()
        },
        ..LassoSettings::default()
    };
    let (x, _) = file.load().unwrap();
    assert_eq!(x.column(3).0.len(), 0, "the file has empty columns");
    for fit_intercept in [false, true] {
        for job in [&sparse_job(), &file, &dense] {
            assert_shares_are_the_whole_designs(&LassoSettings {
                fit_intercept,
                ..job.clone()
            });
        }
    }
}

#[test]
fn a_share_outside_the_design_or_a_file_changed_between_reads_is_an_error() {
    let err = sparse_job()
        .load_column_share(|shape| Ok(0..shape.n_columns() + 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside") && err.contains("700"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("design.svm");
    write_libsvm(&sparse_job(), &path);
    let file = LassoSettings {
        data: Some(path.clone()),
        ..LassoSettings::default()
    };
    // A row appended, a column grown or a label changed between the count and the read.
    let edits: [&dyn Fn(String) -> String; 3] = [
        &|text| text + "1.5 1:0.25\n",
        &|text| text + "1.5 100000:0.25\n",
        &|text| {
            let (label, rest) = text.split_once(' ').unwrap();
            format!("{} {rest}", label.parse::<f32>().unwrap() + 1.0)
        },
    ];
    for edit in edits {
        write_libsvm(&sparse_job(), &path);
        let err = file
            .load_column_share(|_| {
                let text = std::fs::read_to_string(&path).unwrap();
                std::fs::write(&path, edit(text)).unwrap();
                Ok(0..10)
            })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("design.svm") && err.contains("changed while it was read"),
            "{err}"
        );
    }
}
