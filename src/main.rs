//! The `petrel` command line ([`petrel::cli`]); `petrel bench` runs the `petrel-bench` binary.

use petrel::observe::heap::CountingAllocator;
use std::process::ExitCode;

/// The system allocator, counted (`petrel_observe::heap`).
#[global_allocator]
static HEAP: CountingAllocator = CountingAllocator;

fn main() -> ExitCode {
    petrel::cli::main(petrel::cli::exec_bench)
}
