use super::roles::check_pull;
use super::*;
use petrel_ps::core::types::shard_of;

/// Seen under load with 2 workers: a pull after 9 pushes each held 19, one push of the
/// other worker's next clock. That is within BSP; a missing push or a second extra is
/// not.
#[test]
fn a_pull_holds_every_push_and_at_most_one_more_of_each_other_worker() {
    assert_eq!(check_pull(18.0, 9, 2.0, 1.0), Ok(()));
    assert_eq!(check_pull(19.0, 9, 2.0, 1.0), Ok(()));
    assert_eq!(check_pull(17.0, 9, 2.0, 1.0), Err((18.0, 19.0)));
    assert_eq!(check_pull(20.0, 9, 2.0, 1.0), Err((18.0, 19.0)));
    assert_eq!(check_pull(18.5, 9, 2.0, 1.0), Err((18.0, 19.0)));
    assert_eq!(check_pull(5.0, 5, 1.0, 1.0), Ok(()));
    assert_eq!(check_pull(6.0, 5, 1.0, 1.0), Err((5.0, 5.0)));
    assert!(check_pull(f32::NAN, 5, 1.0, 1.0).is_err());
}

#[test]
fn topologies_parse_and_bad_ones_are_refused() {
    assert_eq!(parse_topology("2x2").unwrap(), (2, 2));
    assert_eq!(parse_topology("1X3").unwrap(), (1, 3));
    assert!(parse_topology("0x1").is_err());
    assert!(parse_topology("two").is_err());
}

#[test]
fn rows_land_one_per_shard_and_sizes_must_split() {
    let (width, rows) = rows_for(4096 * 2, 2).unwrap();
    assert_eq!(width, 1024);
    assert_eq!(shard_of(TABLE, rows[0], 2), 0);
    assert_eq!(shard_of(TABLE, rows[1], 2), 1);
    assert!(rows_for(6, 1).is_err());
    assert!(rows_for(0, 1).is_err());
}

#[test]
fn the_breakdown_runs_a_real_iteration() {
    let b = breakdown(4096, 3, true).unwrap();
    assert!(b.total_ms > 0.0);
    let b = breakdown(4096, 3, false).unwrap();
    assert!(b.total_ms > 0.0);
}
