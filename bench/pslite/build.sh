#!/bin/bash
# Builds ps-lite from source against the system's ZeroMQ and protobuf, then the push+pull
# peer of `petrel bench ps` (pslite_bench.cc) next to this script.
#
#   bench/pslite/build.sh [PSLITE_SOURCE_DIR]
#
# PSLITE_SOURCE_DIR is a checkout of https://github.com/dmlc/ps-lite (the figures in
# BENCHMARKS.md used commit 15b8adf); default: bench/pslite/ps-lite. Needs cmake,
# g++, libzmq3-dev and libprotobuf-dev + protobuf-compiler (Debian: apt-get install cmake
# g++ libzmq3-dev libprotobuf-dev protobuf-compiler). Then:
#   petrel bench ps --peer-cmd bench/pslite/run_pslite.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PL=$(cd "${1:-$HERE/ps-lite}" 2>/dev/null && pwd) || {
  echo "build.sh: no ps-lite checkout at ${1:-$HERE/ps-lite}" >&2
  echo "  git clone https://github.com/dmlc/ps-lite $HERE/ps-lite" >&2
  exit 2
}
[ -f "$PL/CMakeLists.txt" ] || { echo "build.sh: $PL is not a ps-lite checkout" >&2; exit 2; }
for tool in cmake g++ protoc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "build.sh: $tool is not installed" >&2; exit 2; }
done
cmake -S "$PL" -B "$PL/build" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$PL/build" --target pslite -j2 >&2
g++ -std=c++14 -O3 -pthread -Wall -I"$PL/include" -I"$PL/build" "$HERE/pslite_bench.cc" \
  "$PL/build/libpslite.a" -lzmq -lprotobuf -o "$HERE/pslite_bench"
echo "built $HERE/pslite_bench" >&2
