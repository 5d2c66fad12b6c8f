//! The examples are part of the product: each custom-app example (one per paradigm) and the
//! topology example must run to completion. `cargo test` builds the examples before it runs
//! any test, so this test starts the built binaries (`target/<profile>/examples/<name>`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn example_binary(name: &str) -> PathBuf {
    // target/<profile>/deps/examples_run-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

fn run_example(name: &str) {
    let bin = example_binary(name);
    assert!(
        bin.exists(),
        "{} is missing: build the examples first (`cargo test` does; `cargo build --examples`)",
        bin.display()
    );
    let start = Instant::now();
    let mut child = Command::new(&bin)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let limit = Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait for example") {
            assert!(status.success(), "example {name} failed: {status}");
            return;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("example {name} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ps_custom_example_runs() {
    run_example("ps_custom");
}

#[test]
fn strads_custom_example_runs() {
    run_example("strads_custom");
}

#[test]
fn p3_custom_example_runs() {
    run_example("p3_custom");
}

#[test]
fn topology_example_runs() {
    run_example("topology");
}
