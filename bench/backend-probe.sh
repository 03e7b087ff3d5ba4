#!/bin/bash
# Where a backend configuration's Redis CPU goes (bench/RESULTS.md "The Cluster's Redis CPU"): runs one
# configuration of bench/backend.mjs and, once its redis-servers are busy, counts their syscalls and
# context switches (perf stat, tracepoints: little overhead) for 5 s with INFO commandstats read around
# that window, then samples them (perf record -g, cpu-clock) for 5 s. Needs perf and root (or
# perf_event_paranoid <= 1). Run under the bench lock:
#
#   flock /work/bench.lock bench/backend-probe.sh cluster 3 /tmp/probe/cluster
#   perf report -i /tmp/probe/cluster/perf.data --no-children --sort dso,sym
#
# Arguments: the configuration (BENCH_CONFIGS), how many redis-servers it loads (1, or 3 for the
# Cluster), the output directory (bench.txt, stat.txt, cmd.before/cmd.after, perf.data). Other BENCH_*
# variables pass through (BENCH_SECONDS is 22 unless set: the probe needs 14 s of the measured window).
set -u
cfg=$1; want=$2; out=$3
mkdir -p "$out"
env BENCH_CONFIGS="$cfg" BENCH_SECONDS="${BENCH_SECONDS:-22}" BENCH_WRITE=0 BENCH_LATENCY_RATE=0 \
  node "$(dirname "$0")/backend.mjs" > "$out/bench.txt" 2>&1 &
bench=$!
ticks() { local s=0 p; for p in ${1//,/ }; do s=$((s + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$s"; }
# The bench's own redis-servers (its children) that used CPU in the last half second.
busy=""
for _ in $(seq 1 200); do
  declare -A t0=()
  all=$(pgrep -P "$bench" redis-server | tr '\n' ' ')
  for p in $all; do t0[$p]=$(ticks "$p"); done
  sleep 0.5
  busy=""; for p in $all; do [ $(( $(ticks "$p") - ${t0[$p]} )) -ge 2 ] && busy="$busy,$p"; done
  busy=${busy#,}
  [ "$(echo "$busy" | tr ',' '\n' | grep -c .)" -ge "$want" ] && break
done
echo "busy pids: $busy" > "$out/pids"
sleep 4 # the exactness check and the warm-up
# redis-server's process title is "redis-server 127.0.0.1:<port>".
ports=""; for p in ${busy//,/ }; do ports="$ports $(tr '\0' ' ' < "/proc/$p/cmdline" | sed -E 's/^[^:]*:([0-9]+).*/\1/')"; done
stats() { for port in $ports; do redis-cli -p "$port" INFO commandstats | grep -E '^cmdstat_'; done; }
stats > "$out/cmd.before"
c0=$(ticks "$busy")
perf stat -e cpu-clock,context-switches,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_wait,raw_syscalls:sys_enter \
  -p "$busy" -o "$out/stat.txt" -- sleep 5
echo "cpu ticks in the perf stat window: $(( $(ticks "$busy") - c0 ))" >> "$out/pids"
stats > "$out/cmd.after"
perf record -q -F 4999 -e cpu-clock -g -p "$busy" -o "$out/perf.data" -- sleep 5 2>/dev/null
wait "$bench"
