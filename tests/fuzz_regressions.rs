//! Replays every input kept in `fuzz/regressions/<target>/` (fuzzer findings, once fixed,
//! plus hand-written nasty cases) through the same entry points the fuzzers use.

use std::path::Path;

#[test]
fn fuzz_regressions_do_not_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut replayed = 0;
    for (name, target) in petrel::fuzzing::TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let data = std::fs::read(entry.path()).unwrap();
            target(&data);
            replayed += 1;
        }
    }
    assert!(
        replayed > 0,
        "no regression inputs found under {}",
        root.display()
    );
}
