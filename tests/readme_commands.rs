//! The README's commands run as shown: every `petrel …` line of its `sh` blocks (and the
//! `cargo run --bin petrel -- …` first command) runs, in order, against the built binary
//! in a directory where `examples/` is the repository's, and must succeed and write what
//! its `--out` names. Lines that need a multi-host cluster of the reader's own (`petrel
//! node`, placeholders such as `<node>`, `--node`) are left to `tests/netns.rs`, and the
//! custom-topology examples to `tests/examples_run.rs`.

use crate::common;
use common::PETREL;
use std::path::Path;
use std::process::Command;

/// The README's shell commands that name the `petrel` binary, with `\` continuations
/// joined and comments removed, as argument lists.
fn readme_petrel_commands(readme: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = line.split(" #").next().unwrap_or("").trim_end();
        if let Some(part) = code.strip_suffix('\\') {
            pending.push_str(part);
            continue;
        }
        pending.push_str(code);
        let full = std::mem::take(&mut pending);
        let full = full.trim();
        let args = full
            .strip_prefix("cargo run --bin petrel -- ")
            .or_else(|| full.strip_prefix("petrel "));
        let Some(args) = args else { continue };
        if args.contains('<') || args.contains("--node") || args.starts_with("node ") {
            continue;
        }
        commands.push(args.split_whitespace().map(String::from).collect());
    }
    commands
}

#[test]
fn the_readme_parser_finds_commands_and_joins_continuations() {
    let text = "```sh\npetrel train a --x 1 \\\n    --y 2   # why\n# note\npetrel node --config <n>/c\ncargo test\n```\n```rust\npetrel skip\n```\n";
    assert_eq!(
        readme_petrel_commands(text),
        vec![vec!["train", "a", "--x", "1", "--y", "2"]]
    );
}

#[test]
fn every_petrel_command_in_the_readme_runs_as_shown() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let commands = readme_petrel_commands(&readme);
    assert!(
        commands.len() >= 10,
        "only {} commands found",
        commands.len()
    );
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo.join("examples"), dir.path().join("examples")).unwrap();
    // `petrel certs --config cluster.toml` reads the reader's own settings: the demo's.
    std::fs::copy(
        repo.join("examples/cluster.toml"),
        dir.path().join("cluster.toml"),
    )
    .unwrap();
    for args in &commands {
        let out = Command::new(PETREL)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let shown = args.join(" ");
        assert!(
            out.status.success(),
            "`petrel {shown}` failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(i) = args.iter().position(|a| a == "--out") {
            let written = dir.path().join(&args[i + 1]);
            assert!(
                written.exists(),
                "`petrel {shown}` wrote no {}",
                written.display()
            );
        }
    }
}
