#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) and prints the executions
# per target. Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Crashes land in fuzz/artifacts/<target>/; copy each into fuzz/regressions/<target>/ once
# fixed, so `cargo test` replays it forever.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^petrel-fuzz$')
for t in $targets; do
  mkdir -p "corpus/$t"
  cp -n regressions/"$t"/* "corpus/$t/" 2>/dev/null || true
  log=$(mktemp)
  if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
      -max_len=65536 >"$log" 2>&1; then status=ok; else status=FAILED; fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  printf '%-16s %-7s executions=%s\n' "$t" "$status" "$execs"
  [ "$status" = ok ] || tail -n 30 "$log"
  rm -f "$log"
done
