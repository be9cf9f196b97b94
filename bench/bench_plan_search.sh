#!/usr/bin/env bash
# bench_plan_search.sh — how long `llm4d plan` takes to search the layouts of large GPT models on large A100 clusters
# (issue 46, item 5: under 10 s each on 2 threads of the project's 2-vCPU VM). Three searches, each with the published
# A100 profile (bench/profiles/a100_selene.json) and bf16 (--use_amp true), sequence 2048, the top 3 printed:
#   39B   Narayanan et al. 2021 (arXiv 2104.04473) Table 1's 39.1B: hidden 8192, 48 layers, 64 heads, vocabulary
#         51200, global batch 1536, on 64 hosts of 8 ranks (512 GPUs);
#   145B  the same table's 145.6B: hidden 12288, 80 layers, 96 heads, vocabulary 51200, global batch 2304, on 192
#         hosts of 8 (1536 GPUs);
#   175B  GPT-3 175B (the gpt3-175b preset), global batch 1536, on 1024 hosts of 8 (8192 GPUs).
# Each line: the layouts considered, valid and fitting (the search's own count line; fitting among those whose memory
# was judged: the search sets aside a layout bound to be slower than the fastest found before judging its memory,
# "aside"), the wall-clock seconds, and
# the process's user and system CPU seconds (/usr/bin/time; on a loaded machine the wall clock grows with the load,
# the CPU seconds far less), and the fastest layout with its step time.
#   bench/bench_plan_search.sh [llm4d binary] [search threads (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
LLM4D=${1:-build/llm4d}
THREADS=${2:-2}
PROF=bench/profiles/a100_selene.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m39=(--model_name_or_path gpt3-175b -o Model.vocab_size=51200 -o Model.hidden_size=8192 -o Model.num_layers=48
     -o Model.num_attention_heads=64 --global_batch_size 1536 --nodes 64)
m145=(--model_name_or_path gpt3-175b -o Model.vocab_size=51200 -o Model.hidden_size=12288 -o Model.num_layers=80
      -o Model.num_attention_heads=96 --global_batch_size 2304 --nodes 192)
m175=(--model_name_or_path gpt3-175b --global_batch_size 1536 --nodes 1024)
echo "# llm4d plan searches, profile $PROF, --use_amp true, --search_threads $THREADS, $(nproc) processors here," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %9s %8s %8s %8s %8s %8s %8s  %s\n' case layouts valid fit aside wall_s user_s sys_s "fastest"
for name in 39B 145B 175B; do
  case $name in
    39B) args=("${m39[@]}") ;;
    145B) args=("${m145[@]}") ;;
    175B) args=("${m175[@]}") ;;
  esac
  if ! /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$LLM4D" plan "${args[@]}" --max_seq_len 2048 --ranks_per_node 8 \
      --machine_profile "$PROF" --use_amp true --search_threads "$THREADS" --top 3 >"$tmp/out" 2>"$tmp/err"; then
    echo "$name: llm4d plan failed: $(head -c 300 "$tmp/err")"
    exit 1
  fi
  read -r wall user sys <"$tmp/time"
  counts=$(grep -m1 'layouts considered' "$tmp/out")
  n=$(awk '{print $1}' <<<"$counts")
  valid=$(sed -E 's/.*: ([0-9]+) pass.*/\1/' <<<"$counts")
  fit=$(sed -E 's/.*, ([0-9]+) fit in memory.*/\1/' <<<"$counts")
  aside=0
  [[ $counts == *"bound to be slower"* ]] && aside=$(sed -E 's/.*; ([0-9]+) more were bound.*/\1/' <<<"$counts")
  best=$(grep -m1 -E '^ *1\. ' "$tmp/out" | sed -E 's/^ *1\. +//; s/ +[0-9]+ tokens\/s.*//; s/  +/ /g')
  printf '%-5s %9s %8s %8s %8s %8s %8s %8s  %s\n' "$name" "$n" "$valid" "$fit" "$aside" "$wall" "$user" "$sys" "$best"
done
echo "# target (issue 46): each under 10 s wall on 2 threads of the 2-vCPU VM"
