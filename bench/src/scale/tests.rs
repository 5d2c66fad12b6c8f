use super::*;

fn run(petrel_s: Option<f64>, baseline_s: f64, rounds: u64) -> CdRun<()> {
    let ratio = petrel_s.map(|s| s / baseline_s);
    CdRun {
        workers: 2,
        petrel_s,
        petrel_updates: petrel_s.map(|_| 100),
        ratio,
        ratios: vec![ratio],
        runs_s: vec![petrel_s],
        us_per_update: None,
        wall_s: 1.0,
        rounds,
        rss_mb: Some(1.0),
        final_objective: 1.0,
        memory: NodeMemory::default(),
        extra: (),
    }
}

#[test]
fn the_median_of_odd_and_even_counts_and_of_nothing() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
}

#[test]
fn a_runner_reports_its_median_run_and_the_median_of_its_repeats_ratios() {
    // Ratios 1.2, 0.9 and 1.0 against three different baselines; times 0.12, 0.09,
    // 0.11: the median run (0.11 s, the third) is not the run of the median ratio.
    let f = CdRun::median_of(vec![
        run(Some(0.12), 0.10, 1),
        run(Some(0.09), 0.10, 2),
        run(Some(0.11), 0.11, 3),
    ])
    .unwrap();
    assert_eq!(f.rounds, 3);
    assert_eq!(f.petrel_s, Some(0.11));
    assert!((f.ratio.unwrap() - 1.0).abs() < 1e-12, "{:?}", f.ratio);
    assert_eq!(f.runs_s, vec![Some(0.12), Some(0.09), Some(0.11)]);
    assert_eq!(f.ratios.len(), 3);
    // A run that missed the target is the slowest, and a median that lands on one
    // is no ratio at all.
    let missed = CdRun::median_of(vec![
        run(None, 0.1, 1),
        run(Some(0.2), 0.1, 2),
        run(None, 0.1, 3),
    ])
    .unwrap();
    assert_eq!(missed.ratio, None);
    assert_eq!(missed.petrel_s, None);
    let one_missed = CdRun::median_of(vec![
        run(None, 0.1, 1),
        run(Some(0.2), 0.1, 2),
        run(Some(0.1), 0.1, 3),
    ])
    .unwrap();
    assert_eq!(one_missed.petrel_s, Some(0.2));
    assert!((one_missed.ratio.unwrap() - 2.0).abs() < 1e-12);
    assert!(CdRun::<()>::median_of(Vec::new()).is_none());
}

#[test]
fn sizes_parse_and_bad_ones_name_the_format() {
    let s: DesignSize = "2000x20000x20".parse().unwrap();
    assert_eq!(
        (s.n_samples, s.n_features, s.nnz_per_column),
        (2000, 20000, 20)
    );
    for bad in ["2000x20000", "0x10x1", "axbxc", "1x2x3x4"] {
        let e = bad.parse::<DesignSize>().unwrap_err().to_string();
        assert!(e.contains("ROWSxFEATURESxNNZ"), "{e}");
    }
}
