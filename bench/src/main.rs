//! `petrel-bench`: `petrel-bench <bench> [flags]` runs one of petrel's benchmarks (the
//! same as `petrel bench <bench>`). Given a `petrel` command instead (`node`, `run`,
//! `train`, …) it is the `petrel` command line with the benches' roles added: the node
//! processes a bench launches re-execute this binary.

use petrel::observe::heap::CountingAllocator;
use std::process::ExitCode;

/// The system allocator, counted, as in `petrel`: nodes report their heap's peak.
#[global_allocator]
static HEAP: CountingAllocator = CountingAllocator;

fn main() -> ExitCode {
    petrel::roles::extend_builtin(petrel_bench::register_roles);
    let first = std::env::args().nth(1);
    if first.as_deref().is_some_and(petrel::cli::is_command) {
        return petrel::cli::main(petrel_bench::run_args);
    }
    petrel::cli::main_with_args(
        std::iter::once("petrel".into())
            .chain(std::iter::once("bench".into()))
            .chain(std::env::args_os().skip(1))
            .collect(),
        petrel_bench::run_args,
    )
}
