#!/usr/bin/env bash
# test_plan_rank_memory.sh — `llm4d plan` checks the memory of each rank's own device, not only the host's (issue 46):
# a GPU's memory is its rank's alone, and a rank over it does not fit even when its host's ranks together are under
# the host's sum. A layout fits when its fullest host is within --memory_per_node and, where ranks have memory of
# their own (--memory_per_rank, or the profile's memory_per_rank_bytes), its largest rank within that.
#   (1) a CPU profile (ranks share the host's memory) given --memory_per_rank: gpt2-tiny on 2 hosts x 2 ranks. The
#       oracle is the search without a rank limit, every fitting layout listed (--top 1000) with its largest rank
#       and fullest host; filtered here by both limits, it must be exactly the layouts the limited search lists, in
#       its order, and its fit count. Two settings: a rank limit that binds with a host that holds every layout, and
#       both limits binding (layouts over each alone). Each rejected layout's --explain reason names the limit it
#       is over ("rank R needs ... of its device's" or the host's), the rank's need against the oracle's peak; and
#       the search without --explain (the early rejection by a rank's bytes before its collectives' temporaries)
#       lists the same layouts;
#   (2) llama3-8b at sequence 8192, global batch 512 (4M tokens) on 4 hosts of 8 A100 80GB (the published profile,
#       bench/profiles/a100_selene.json: 80 GiB a GPU): the search's first layout has no rank over 81920 MiB
#       (`plan --evaluate` of its flags, every rank's peak), where before it chose dp4 sh4/z1 pp2 1F1B mb1, whose
#       rank 0 needs 82312.5 MiB; that layout, whose host is within the host's memory, evaluates as not fitting,
#       over the rank's limit ("fits": false, "over_limit": "rank", and the text's reason);
#   (3) bad inputs (a negative --memory_per_rank or profile memory_per_rank_bytes; no layout within the rank's
#       memory) are one line and exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
echo '{"llm4d_machine_profile": 1, "cores": 2, "memory_bytes": 8589934592}' >"$tmp/cpu.json"

# ---- (1) a rank limit on a CPU profile, against the unlimited search filtered ---------------------------------------
T=(--machine_profile "$tmp/cpu.json" --model_name_or_path gpt2-tiny --max_seq_len 32 -o Model.num_layers=4
   --global_batch_size 8 --nodes 2 --ranks_per_node 2 --input_dir "$tmp/no_data" --top 1000)
"$LLM4D" plan --json "${T[@]}" >"$tmp/all.json" 2>"$tmp/all.err"
# the limits in GiB: the rank's at the median largest rank of the fitting layouts (about half over it); the host's
# 8 GiB (every layout's host fits), then at 1.9 x that rank limit (hosts of two ranks near it are over)
lim=$(/usr/bin/python3 - "$tmp/all.json" <<'PY'
import json, statistics, sys
try:
    L = json.load(open(sys.argv[1]))["layouts"]
    r = statistics.median(l["peak_mib"] for l in L) / 1024
    print(f"{r:.6f} 8 {r:.6f} {1.9 * r:.6f}")
except Exception:
    print("0 0 0 0")
PY
)
read -r r1 n1 r2 n2 <<<"$lim"
for setting in "rank $r1 $n1" "both $r2 $n2"; do
  read -r name rank node <<<"$setting"
  "$LLM4D" plan --json --explain --explain_lines 0 "${T[@]}" --memory_per_rank "$rank" --memory_per_node "$node" \
    >"$tmp/$name.explain.json" 2>"$tmp/$name.explain.err"
  "$LLM4D" plan --json "${T[@]}" --memory_per_rank "$rank" --memory_per_node "$node" \
    >"$tmp/$name.fast.json" 2>"$tmp/$name.fast.err"
  /usr/bin/python3 - "$tmp" "$name" "$rank" "$node" >"$tmp/$name.txt" <<'PY'
import json, re, sys
tmp, name, rank, node = sys.argv[1], sys.argv[2], float(sys.argv[3]) * 1024, float(sys.argv[4]) * 1024
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        print(f"FAIL {name}: {p}: {e}: " + open(p.replace('.json', '.err')).read()[:300]); sys.exit()
full, ex, fast = load(f"{tmp}/all.json"), load(f"{tmp}/{name}.explain.json"), load(f"{tmp}/{name}.fast.json")
L = full["layouts"]
over_r = {l["layout"] for l in L if l["peak_mib"] > rank}
over_h = {l["layout"] for l in L if l["host_mib"] > node}
want = [l["layout"] for l in L if l["layout"] not in over_r | over_h]
peak = {l["layout"]: l["peak_mib"] for l in L}
got = [l["layout"] for l in ex["layouts"]]
only_h = over_h - over_r
ok = got == want and ex["fit"] == len(want) and over_r and (name == "rank" or only_h) and len(want) > 0
print(("ok   " if ok else "FAIL ") + f"{name}: {rank:.1f} MiB a rank, {node:.1f} MiB a host: {ex['fit']} of "
      f"{len(L)} layouts fit, the unlimited search's filtered by both limits {len(want)} ({len(over_r)} over the "
      f"rank's, {len(only_h)} over the host's alone); the same list in the same order: {got == want}")
fast_got = [l["layout"] for l in fast["layouts"]]
print(("ok   " if fast_got == want else "FAIL ") + f"{name}: the search without --explain (early rejection) lists "
      f"the same {len(fast_got)} layouts")
# every rejection by memory names its limit, the rank's need as the oracle's peak (0.01 GiB printed)
rej = {r["layout"]: r["reason"] for r in ex["rejected"]}
wrong = []
for l in over_r:
    m = re.match(r"rank \d+ needs ([\d.]+) GiB of its device's ([\d.]+) GiB", rej.get(l, ""))
    gib = lambda i: float(m.group(i)) * 1024  # printed to 0.01 GiB
    if not m or abs(gib(1) - peak[l]) > 0.01 * 1024 or abs(gib(2) - rank) > 0.01 * 1024:
        wrong.append((l, rej.get(l)))
for l in only_h:
    if not re.match(r"needs [\d.]+ GiB on its fullest host", rej.get(l, "")):
        wrong.append((l, rej.get(l)))
print(("ok   " if not wrong else "FAIL ") + f"{name}: each of the {len(over_r)} layouts over the rank's limit is "
      f"rejected naming the rank's device and its need, each of the {len(only_h)} over the host's alone naming "
      f"the host{'; first wrong: ' + str(wrong[0]) if wrong else ''}")
PY
  [ "$(grep -c -E '^(ok|FAIL) ' "$tmp/$name.txt")" = 3 ] || bad "$name: the checks' helper judged $(cat "$tmp/$name.txt")"
  tally_lines <"$tmp/$name.txt"
done

# ---- (2) llama3-8b on 4 x 8 A100 80GB --------------------------------------------------------------------------------
PROF=$SRC_DIR/bench/profiles/a100_selene.json
J=(--model_name_or_path llama3-8b --max_seq_len 8192 --nodes 4 --ranks_per_node 8 --use_amp true
   --machine_profile "$PROF" --input_dir "(planning)")
"$LLM4D" plan "${J[@]}" --global_batch_size 512 --top 1 >"$tmp/8b.out" 2>"$tmp/8b.err"
flags=$(grep -m1 -E '^ +flags: ' "$tmp/8b.out" | sed -E 's/^ +flags: //')
# shellcheck disable=SC2086
"$LLM4D" plan --evaluate --json "${J[@]}" $flags >"$tmp/top.json" 2>"$tmp/top.err"
"$LLM4D" plan --evaluate --json "${J[@]}" --dp_degree 4 --sharding_degree 4 --sharding_stage 1 --pp_degree 2 \
  --pp_schedule 1F1B --micro_batch_size 1 --global_batch_size 512 --use_recompute false >"$tmp/old.json" 2>"$tmp/old.err"
"$LLM4D" plan --evaluate "${J[@]}" --dp_degree 4 --sharding_degree 4 --sharding_stage 1 --pp_degree 2 \
  --pp_schedule 1F1B --micro_batch_size 1 --global_batch_size 512 --use_recompute false >"$tmp/old.txt" 2>&1
/usr/bin/python3 - "$tmp" "$(grep -m1 -E '^ *1\. ' "$tmp/8b.out")" >"$tmp/8b.txt" <<'PY'
import json, re, sys
tmp, first = sys.argv[1], sys.argv[2]
gpu = 80 * 1024  # an A100-SXM4-80GB: 81920 MiB
try:
    top, old = json.load(open(f"{tmp}/top.json")), json.load(open(f"{tmp}/old.json"))
except Exception as e:
    print(f"FAIL llama3-8b: {e}: " + open(f"{tmp}/8b.err").read()[:200] + open(f"{tmp}/top.err").read()[:200]); sys.exit()
peak = max(top["peak_mib_per_rank"])
m = re.match(r" *1\. +(.*?) +[\d.]+ s/step", first)
name = m.group(1) if m else "(none)"
ok = 0 < peak <= gpu and top["fits"] and top.get("over_limit") == ""
print(("ok   " if ok else "FAIL ") + f"llama3-8b 8192 x 512 on 4 x 8 A100 80GB: the search's first layout "
      f"{name} has its largest rank at {peak:.1f} MiB (plan --evaluate, every "
      f"rank), an A100 80GB holds {gpu}; it fits: {top['fits']}")
opeak, ohost = max(old["peak_mib_per_rank"]), old["host_mib"]
ok = opeak > gpu and ohost <= old["memory_per_node_mib"] and not old["fits"] and old.get("over_limit") == "rank"
print(("ok   " if ok else "FAIL ") + f"llama3-8b dp4 sh4/z1 pp2 1F1B mb1 (the first layout before issue 46's rank "
      f"check): rank peak {opeak:.1f} MiB over {gpu}, host {ohost:.1f} MiB within its {old['memory_per_node_mib']:.1f}: "
      f"fits {old['fits']}, over_limit {old.get('over_limit')!r}")
line = open(f"{tmp}/old.txt").read()
m = re.search(r"\(does not fit: rank (\d+) needs ([\d.]+) GiB of its device's ([\d.]+) GiB", line)
ok = m is not None and abs(float(m.group(2)) * 1024 - opeak) <= 0.01 * 1024 and float(m.group(3)) * 1024 == gpu
print(("ok   " if ok else "FAIL ") + "its text answer names the rank's limit: " + (m.group(0) if m else line[:300]))
PY
[ "$(grep -c -E '^(ok|FAIL) ' "$tmp/8b.txt")" = 3 ] || bad "llama3-8b: the checks' helper judged $(cat "$tmp/8b.txt")"
tally_lines <"$tmp/8b.txt"

# ---- (3) bad inputs: one line, exit 2 --------------------------------------------------------------------------------
echo '{"llm4d_machine_profile": 1, "cores": 2, "memory_bytes": 8589934592, "memory_per_rank_bytes": -1}' >"$tmp/neg.json"
S=(--model_name_or_path gpt2-tiny --max_seq_len 32 -o Model.num_layers=4 --global_batch_size 8 --ranks_per_node 2
   --input_dir "$tmp/no_data")
refused "a negative memory per rank" "memory_per_rank" "$LLM4D" plan --machine_profile "$tmp/cpu.json" "${S[@]}" \
  --memory_per_rank -1
refused "a profile's negative memory per rank" "memory_per_rank_bytes" "$LLM4D" plan --machine_profile "$tmp/neg.json" \
  "${S[@]}"
refused "no layout fits a rank's memory" "per rank (--memory_per_rank)" "$LLM4D" plan --machine_profile "$tmp/cpu.json" \
  "${S[@]}" --memory_per_rank 0.001
finish
