#!/usr/bin/env bash
# compare_bits.sh — two llm4d builds trained side by side on the same layouts, compared bit for bit: every step's
# loss and gradient norm (metrics.jsonl) and the final checkpoint's tensor files (sha256). For changes that must not
# move a bit (issue 42: the fp32 path of a typed backend; a refactoring): build the base commit in a worktree, then
#   scripts/compare_bits.sh /path/to/base/build/llm4d build/llm4d [extra train args...]
# gpt2-tiny, 12 steps, dropout on, eight layouts from 1 to 16 processes (one process, recompute, dp2, mp2 with
# sequence parallelism, pp2 ZB-H1, ZeRO-3 over 2, interleaved pp2 with ZeRO-2, the 16-rank 4D layout). Prints one
# line per layout and exits 1 when any differs.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/compare_bits.sh A_LLM4D B_LLM4D [extra train args...]" >&2; exit 2; }
A=$1 B=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-tiny --input_dir data/fortunes_ids.npz --max_seq_len 32 --global_batch_size 8
   --max_steps 12 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1 -o Model.attention_probs_dropout_prob=0.1
   --save_steps 12 "$@")
layouts=("single 1 --micro_batch_size,8" "single_rc 1 --micro_batch_size,4,--use_recompute,true"
         "dp2 2 --dp_degree,2,--micro_batch_size,4"
         "mp2_sp 2 --mp_degree,2,--sequence_parallel,true,--micro_batch_size,8"
         "pp2_zb 2 --pp_degree,2,--pp_schedule,ZBH1,--micro_batch_size,2"
         "sh2_s3 2 --sharding_degree,2,--sharding_stage,3,--micro_batch_size,4"
         "pp2_v2_sh2 4 --pp_degree,2,--virtual_pp_degree,2,--sharding_degree,2,--sharding_stage,2,--micro_batch_size,2"
         "4d16 16 --dp_degree,2,--pp_degree,2,--sharding_degree,2,--sharding_stage,3,--mp_degree,2,--micro_batch_size,1")
differ=0
for l in "${layouts[@]}"; do
  set -- $l
  IFS=, read -ra x <<<"$3"
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    "$bin" launch --nproc "$2" --log_dir "$tmp/$1.$side.log" -- train "${C[@]}" "${x[@]}" --output_dir "$tmp/$1.$side" \
      >"$tmp/$1.$side.stdout" 2>&1 || echo "$1: build $side failed: $(tail -1 "$tmp/$1.$side.stdout")"
  done
  /usr/bin/python3 - "$tmp/$1.A" "$tmp/$1.B" "$1" <<'PY' || differ=1
import glob, hashlib, json, os, sys
a, b, name = sys.argv[1:]
def metrics(d):
    p = d + "/metrics.jsonl"
    return [(x["loss"], x.get("grad_norm")) for x in map(json.loads, open(p)) if "step" in x] if os.path.exists(p) else []
def tensors(d):
    return {os.path.relpath(f, d): hashlib.sha256(open(f, "rb").read()).hexdigest()
            for f in sorted(glob.glob(d + "/step_*/**/*.safetensors", recursive=True))}
ma, mb, ta, tb = metrics(a), metrics(b), tensors(a), tensors(b)
same_m, same_t = ma == mb and len(ma) > 0, ta == tb and len(ta) > 0
print(f"{name}: {len(ma)} steps' losses and gradient norms {'identical' if same_m else 'DIFFER'}; "
      f"{len(ta)} checkpoint tensor files {'identical' if same_t else 'DIFFER'}")
sys.exit(0 if same_m and same_t else 1)
PY
done
exit $differ
