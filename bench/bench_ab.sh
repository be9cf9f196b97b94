#!/usr/bin/env bash
# bench_ab.sh — two llm4d builds against each other on GPT-2 124M (gpt2-en) training, alternated run by run so that
# the machine's noise affects both alike: per round and shape, build A then build B, each the median step time of
# its steps after the first; prints B / A per round. For "no slower than before" checks of a change (issue 25: the
# device boundary against b4bf68d, both shapes within 3 %).
#   bench/bench_ab.sh A_LLM4D B_LLM4D [rounds] [threads] [shape ...]   shape: "B T" (default "4 64" "2 1024")
# AB_AMP=true compares them in bf16 (--use_amp; default fp32); BENCH_PY names the python that reads the metrics.
# The closing lines summarise each shape over the rounds: the median of the rounds' B / A, and the ratio of each
# build's fastest step of all its rounds (on a shared VM, where another tenant slows whole runs by 10-20 %, the
# least-disturbed step of each build is the steadier figure of the two).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/bench_ab.sh A_LLM4D B_LLM4D [rounds] [threads] [shape ...]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${3:-3} THREADS=${4:-2} AMP=${AB_AMP:-false} PY=${BENCH_PY:-/usr/bin/python3}
shift $(( $# < 4 ? $# : 4 ))
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=("4 64" "2 1024")
for x in "$A" "$B"; do [ -x "$x" ] || { echo "bench_ab: $x is not an executable" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # binary B T -> "median min" step seconds (steps 2-4)
  rm -rf "$tmp/out"
  OMP_NUM_THREADS=$THREADS "$1" train --model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz \
    --output_dir "$tmp/out" --max_seq_len "$3" --micro_batch_size "$2" --global_batch_size "$2" --max_steps 4 \
    --logging_freq 1000 --save_steps 1000000 --threads "$THREADS" --use_amp "$AMP" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; exit 1; }
  $PY -c "import json, statistics, sys
c = [json.loads(l)['batch_cost'] for l in list(open(sys.argv[1]))[1:]]
print(statistics.median(c), min(c))" "$tmp/out/metrics.jsonl"
}
prec=fp32
[ "$AMP" = true ] && prec=bf16
echo "# bench_ab: A=$A B=$B, $THREADS threads, $prec, $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p'))"
for ((r = 1; r <= ROUNDS; r++)); do
  for shape in "${SHAPES[@]}"; do
    set -- $shape
    ra=$(run "$A" "$1" "$2")
    rb=$(run "$B" "$1" "$2")
    read -r a amin <<<"$ra"
    read -r b bmin <<<"$rb"
    echo "round $r B=$1 T=$2: A $a s, B $b s, B/A $($PY -c "print(f'{$b / $a:.4f}')")," \
         "load $(cut -d' ' -f1 /proc/loadavg)"
    echo "$1 $2 $a $b $amin $bmin" >>"$tmp/rounds"
  done
done
$PY - "$tmp/rounds" <<'PYEOF'
import statistics, sys
by = {}
for l in open(sys.argv[1]):
    B, T, a, b, amin, bmin = l.split()
    by.setdefault((B, T), []).append(tuple(map(float, (a, b, amin, bmin))))
for (B, T), rs in by.items():
    med = statistics.median(b / a for a, b, _, _ in rs)
    fast = min(r[3] for r in rs) / min(r[2] for r in rs)
    print(f"summary B={B} T={T}: median B/A {med:.4f} over {len(rs)} rounds, fastest step B/A {fast:.4f}")
PYEOF
