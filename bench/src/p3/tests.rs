use super::*;

#[test]
fn median_iteration_ignores_one_slow_iteration() {
    // Warm-up 1 s, then 0.3 s iterations with one 1.3 s loss recovery.
    let marks = [0.0, 1.0, 1.3, 1.6, 2.9, 3.2, 3.5];
    let med = median_iteration_s(&marks, 1).unwrap();
    assert!((med - 0.3).abs() < 1e-9, "{med}");
    // Even count: the middle two's mean.
    let m = median_iteration_s(&[0.0, 0.2, 0.6, 0.9, 1.0], 0).unwrap();
    assert!((m - 0.25).abs() < 1e-9, "{m}");
    assert_eq!(median_iteration_s(&marks, 6), None);
}

#[test]
fn the_default_credit_is_two_slices_in_process_and_the_transports_across_namespaces() {
    // 8192 f32 parameters per slice: 64 KiB for two.
    assert_eq!(default_credit_bytes(8192, false), 64 * 1024);
    // Tiny slices still leave a few packets in flight.
    assert_eq!(default_credit_bytes(16, false), 16 * 1024);
    assert_eq!(
        default_credit_bytes(8192, true),
        NetConfig::default().outbox_inflight_bytes
    );
    // Absurd slice sizes saturate instead of overflowing.
    assert_eq!(default_credit_bytes(u64::MAX, false), usize::MAX);
}
