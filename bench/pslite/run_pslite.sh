#!/bin/bash
# Runs one ps-lite push+pull benchmark on 127.0.0.1:
#   run_pslite.sh BYTES ITERS WORKERS SHARDS
# Starts 1 scheduler, SHARDS servers and WORKERS workers of pslite_bench as
# separate processes. Prints only the workers' JSON lines on stdout (one per
# worker, in worker order); everything else goes to stderr. Exits non-zero if
# any process fails (the others are then killed), on timeout
# (PSLITE_TIMEOUT_S, default 900 s) or when interrupted (INT/TERM/HUP: the
# children are killed).
set -u

usage() { echo "usage: $0 BYTES ITERS WORKERS SHARDS" >&2; exit 2; }
[ $# -eq 4 ] || usage
for a in "$@"; do [[ "$a" =~ ^[1-9][0-9]*$ ]] || usage; done
BYTES=$1 ITERS=$2 WORKERS=$3 SHARDS=$4

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${PSLITE_BENCH_BIN:-$HERE/pslite_bench}
[ -x "$BIN" ] || { echo "run_pslite: $BIN not found (run $HERE/build.sh)" >&2; exit 2; }
TIMEOUT_S=${PSLITE_TIMEOUT_S:-900}

# Scheduler port: random, below the kernel's ephemeral range (so it cannot
# collide with the local end of some outgoing connection, nor with the ports
# the servers/workers get from the kernel), and not used by any socket in any
# state.
eph_lo=32768
read -r eph_lo _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
lo=10000 hi=$(( eph_lo - 1 ))
[ "$hi" -gt $(( lo + 1000 )) ] || { lo=$(( eph_lo > 61000 ? 20000 : 61001 )); hi=$(( lo + 4000 )); }
port_free() {
  if command -v ss >/dev/null 2>&1; then
    [ -z "$(ss -Htan "( sport = :$1 or dport = :$1 )" 2>/dev/null)" ]
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
ROOT_PORT=
for _ in $(seq 1 50); do
  p=$(( lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1) ))
  if port_free "$p"; then ROOT_PORT=$p; break; fi
done
[ -n "$ROOT_PORT" ] || { echo "run_pslite: no free port found" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/run_pslite.XXXXXX")
PIDS=()
NAMES=()

kill_all() {
  local p
  [ ${#PIDS[@]} -gt 0 ] || return 0
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
on_signal() {
  trap - INT TERM HUP
  echo "run_pslite: interrupted, killing children" >&2
  kill_all
  rm -rf "$TMP"
  exit 130
}
trap on_signal INT TERM HUP
trap 'rm -rf "$TMP"' EXIT

# Keep inherited settings from changing how ps-lite places nodes.
unset PORT DMLC_RANK DMLC_PS_VAN_TYPE PS_RESEND PS_DROP_MSG HEAPPROFILE
export DMLC_PS_ROOT_URI=127.0.0.1
export DMLC_PS_ROOT_PORT=$ROOT_PORT
export DMLC_NUM_SERVER=$SHARDS
export DMLC_NUM_WORKER=$WORKERS
export DMLC_INTERFACE=lo
export DMLC_NODE_HOST=127.0.0.1

echo "run_pslite: bytes=$BYTES iters=$ITERS workers=$WORKERS shards=$SHARDS port=$ROOT_PORT" >&2

start() {  # start ROLE NAME STDOUT
  DMLC_ROLE=$1 "$BIN" "$BYTES" "$ITERS" >"$3" &
  PIDS+=($!)
  NAMES+=("$2")
}
start scheduler scheduler /dev/null
for ((i = 0; i < SHARDS; i++)); do start server "server$i" /dev/null; done
for ((i = 0; i < WORKERS; i++)); do start worker "worker$i" "$TMP/worker$i.out"; done

# Poll: a child that has exited (and been reaped by bash) no longer answers
# kill -0; `wait PID` then gives its status. (`wait -n PID...` is not used: it
# reports "no such job" for a child that already exited.)
rc=0
start_s=$SECONDS
while [ ${#PIDS[@]} -gt 0 ]; do
  for j in "${!PIDS[@]}"; do
    p=${PIDS[$j]}
    if ! kill -0 "$p" 2>/dev/null; then
      wait "$p"; st=$?
      unset 'PIDS[j]'
      if [ "$st" -ne 0 ]; then
        echo "run_pslite: ${NAMES[$j]} (pid $p) exited with $st" >&2
        rc=1
      fi
    fi
  done
  [ "$rc" -eq 0 ] || break
  if [ $(( SECONDS - start_s )) -ge "$TIMEOUT_S" ]; then
    echo "run_pslite: timeout after ${TIMEOUT_S}s" >&2
    rc=124
    break
  fi
  [ ${#PIDS[@]} -gt 0 ] && sleep 0.05
done
kill_all

if [ "$rc" -eq 0 ]; then
  for ((i = 0; i < WORKERS; i++)); do
    line=$(grep -o '{"mbps".*}' "$TMP/worker$i.out" | tail -n 1)
    if [ -z "$line" ]; then
      echo "run_pslite: worker$i printed no JSON line" >&2
      rc=1
    else
      echo "$line"
    fi
  done
fi
exit "$rc"
