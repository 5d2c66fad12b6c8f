use super::*;
use clap::Parser;

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    job: LassoJob,
}

#[test]
fn flag_defaults_are_the_toml_defaults() {
    let flags = Flags::try_parse_from(["lasso"]).unwrap();
    assert_eq!(flags.job, LassoJob::default());
}

#[test]
fn no_dependency_check_survives_a_job_file() {
    // `--no-filter` (rho unset) must reach the nodes, whose settings are TOML.
    let job = LassoJob {
        rho: None,
        ..LassoJob::default()
    };
    let text = toml::to_string(&job).unwrap();
    assert!(text.contains("rho = false"), "{text}");
    let back: LassoJob = toml::from_str(&text).unwrap();
    assert_eq!(back.rho, None);
    let set: LassoJob = toml::from_str("rho = 0.5").unwrap();
    assert_eq!(set.rho, Some(0.5));
    let err = toml::from_str::<LassoJob>("rho = true")
        .unwrap_err()
        .to_string();
    assert!(err.contains("rho"), "{err}");
    assert_eq!(LassoJob::default().rho, Some(0.3));
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
    let err = toml::from_str::<LassoJob>("mode = \"bogus\"")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dynamic") && err.contains("random") && err.contains("cyclic"),
        "{err}"
    );
    let job: LassoJob = toml::from_str("mode = \"cyclic\"\nseed = 3").unwrap();
    assert_eq!((job.mode, job.seed), (ScheduleMode::Cyclic, 3));
}
