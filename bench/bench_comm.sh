#!/usr/bin/env bash
# bench_comm.sh — the collectives' bus bandwidth on this host, llm4d's path beside Open MPI's own, beside the host's
# copy bandwidth, all in one run (issue 27, item 6).
#
# For 2..N ranks (one OpenMP thread each) and each size, bench/comm_bench.c times all-reduce, reduce-scatter and
# all-gather three ways in turn, one call each per round (so the machine's load hits them alike): llm4d's path
# (comm_path auto: shared memory on one host, through its slots), llm4d's path over buffers shared in place (l4sh,
# all-reduce: how the data-parallel gradients are reduced), llm4d on MPI (comm_path mpi: Open MPI's non-blocking collectives,
# polled, what training used before), and Open MPI's own blocking MPI_Allreduce / MPI_Reduce_scatter_block /
# MPI_Allgather. Bus bandwidth as nccl-tests define it (all-reduce 2 (n-1)/n x bytes / time, the others
# (n-1)/n x bytes / time; bytes: the whole buffer), the median over the rounds. The yardstick is one thread's
# memcpy, measured first by bench/mem_bandwidth (OMP_NUM_THREADS=1): bytes copied per second (its copy_gbps counts
# read + write, twice that).
#   bench/bench_comm.sh [max_ranks] [sizes_MB] [rounds] [dtype]
#   defaults: the host's cores, 1,4,16,25,64,100,256, 7 rounds, f32 (bf16: llm4d's contenders only)
# Prints the table, the ratio llm4d / MPI_Allreduce and the share of one thread's memcpy, and the load before and
# after (the figures are worth what the load lets them be; run it on an idle machine).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-$(nproc)}
SIZES=${2:-1,4,16,25,64,100,256}
ROUNDS=${3:-7}
DTYPE=${4:-f32}
B=${BUILD_DIR:-build}
[ -x "$B/comm_bench" ] && [ -x "$B/mem_bandwidth" ] ||
    { echo "bench_comm: build first (cmake --build $B --target comm_bench mem_bandwidth)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), $(ompi_info --version 2>/dev/null | head -1)"
OMP_NUM_THREADS=1 "$B/mem_bandwidth" --mib 256 --reps 5 | tee "$tmp/mem.txt" | sed 's/^/# /'
for n in $(seq 2 "$N"); do
    OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -np "$n" \
        "$B/comm_bench" --mb "$SIZES" --rounds "$ROUNDS" --dtype "$DTYPE" | tee -a "$tmp/runs.txt" | grep '^#' || true
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$tmp" "$load0" "$load1" <<'PY'
import re, sys
tmp, load0, load1 = sys.argv[1:4]
mem = open(f"{tmp}/mem.txt").read()
m = re.search(r"memcpy ([\d.]+) GB/s", mem)
memcpy = float(m.group(1)) / 2 if m else float("nan")   # bytes copied per second
rows = {}
for line in open(f"{tmp}/runs.txt"):
    f = line.split()
    if not line.startswith("op "):
        continue
    d = dict(zip(f[0::2], f[1::2]))
    rows.setdefault((d["op"], int(d["ranks"]), int(d["bytes"])), {})[d["path"]] = float(d["busbw_gbps"])
print(f"\none thread's memcpy: {memcpy:.2f} GB/s copied (mem_bandwidth, 1 thread)")
print("llm4d: the slots; l4sh: buffers shared in place (the data-parallel gradients' all-reduce)")
print(f"{'op':<15} {'ranks':>5} {'MB':>6} {'llm4d':>8} {'l4sh':>8} {'l4mpi':>8} {'MPI':>8} {'llm4d/MPI':>9} {'l4sh/MPI':>9} {'% memcpy':>8}   (bus GB/s)")
for (op, n, b), p in sorted(rows.items()):
    l, ls, lm, mp = p.get("llm4d"), p.get("l4sh"), p.get("l4mpi"), p.get("mpi")
    fmt = lambda x: f"{x:8.2f}" if x is not None else f"{'-':>8}"
    ratio = lambda x: f"{x / mp:9.2f}" if x and mp else f"{'-':>9}"
    best = max(x for x in (l, ls) if x is not None)
    print(f"{op:<15} {n:>5} {b / 1e6:>6.0f} {fmt(l)} {fmt(ls)} {fmt(lm)} {fmt(mp)} {ratio(l)} {ratio(ls)} {100 * best / memcpy:>7.0f}%")
print(f"\nload average {load0} at start, {load1} at end")
PY
