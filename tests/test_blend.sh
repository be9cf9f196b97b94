#!/usr/bin/env bash
# test_blend.sh — training on several corpora: Megatron's blending against Python, and `llm4d train` on a
# directory holding a Paddle npz corpus and a Megatron corpus, and on a Megatron corpus alone.
#
# Corpora: the shipped fortunes_ids.npz; a Megatron pair made by `llm4d prepare-data --format mmap` from about
# 1.5 MB of the copyright notices in /usr/share/doc; a small npz made by prepare-data from other notices.
# Checked:
#   - for several input_dir forms (a directory, weighted and plain lists, skewed weights, tiny sizes) the corpora,
#     their token counts and normalised weights, and every (corpus, sample) of the blend equal a Python
#     re-implementation of Megatron's get_datasets_weights_and_num_samples + build_blending_indices (the token
#     counts read by numpy from the files);
#   - training on the directory and on the Megatron prefix alone: every loss finite, the loss falls, the
#     validation loss is finite, the log names both corpora and their draws; the blended run under dp 2 gives the
#     one-process loss curve (samples do not depend on the layout);
#   - bad input (a directory with nothing readable, a weight list that does not parse, a negative weight, a
#     Megatron corpus with ids beyond vocab_size): exit 2 and one line on stderr.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
DRV=$BUILD_DIR/test_blend_unit
PY=/usr/bin/python3
VOCAB=$(gpt2_vocab_dir) || { bad "no GPT-2 vocabulary"; finish; }
export LLM4D_VOCAB_DIR=$VOCAB
export OMP_NUM_THREADS=1
MIX=$tmp/mix
mkdir -p "$MIX" "$tmp/other"

# ---- corpora ------------------------------------------------------------------------------------------------------
"$PY" - "$tmp" <<'EOF'
import glob, sys
tmp = sys.argv[1]
texts = []
# the copyright notices; where a minimal system has few, the fortune files fill up
files = sorted(glob.glob('/usr/share/doc/*/copyright')) + sorted(glob.glob('/usr/share/games/fortunes/*'))
for f in files:
    if f.endswith('.dat') or f.endswith('.u8'):
        continue
    try:
        texts.append(open(f, encoding='utf-8').read())
    except (UnicodeDecodeError, OSError):
        pass
big, small, n = [], [], 0
for i, t in enumerate(texts):
    (small if i % 10 == 9 else big).append(t)
    n += len(t)
    if n > 1_700_000:
        break
if n <= 1_700_000:  # the fortunes come from Debian's fortunes package (scripts/setup.sh, LLM4D_TEST_DEPS=1)
    sys.exit(f'corpora: only {n} characters of text found (want 1.7 M): install Debian\'s fortunes package')
open(f'{tmp}/doc.txt', 'w', encoding='utf-8').write('\n\n'.join(big))
open(f'{tmp}/small.txt', 'w', encoding='utf-8').write('\n\n'.join(small))
EOF
cp "$SRC_DIR/data/fortunes_ids.npz" "$MIX/fortunes_ids.npz"
if "$LLM4D" prepare-data --input "$tmp/doc.txt" --split-on-blank-lines --append-eos --format mmap \
        --output-prefix "$MIX/doc" --no-progress >"$tmp/prep.log" 2>&1 &&
   "$LLM4D" prepare-data --input "$tmp/small.txt" --split-on-blank-lines --append-eos --format npz \
        --output-prefix "$tmp/other/small" --no-progress >>"$tmp/prep.log" 2>&1; then
    ok "$(head -1 "$tmp/prep.log" | sed 's/ in [0-9.]* s.*//')"
else
    bad "prepare-data failed:"; cat "$tmp/prep.log"; finish
fi

# ---- blending against Python --------------------------------------------------------------------------------------
oracle() { # input_dir size
    "$DRV" --blend "$1" "$2" >"$tmp/blend.c" 2>"$tmp/blend.err" || { cat "$tmp/blend.err"; return 1; }
    "$PY" - "$1" "$2" "$tmp/blend.c" <<'EOF'
import math, os, re, sys
import numpy as np
spec, size, got = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read().split('\n')

def tokens(path):  # counted from the files by numpy, following the published layouts
    if path.endswith('.npz'):
        return int(np.load(path)['ids'].shape[0])
    raw = open(path[:-4] + '.idx', 'rb').read()
    n = int(np.frombuffer(raw, np.uint64, 1, 18)[0])
    return int(np.frombuffer(raw, np.int32, n, 34).astype(np.int64).sum())

def listing(d):  # Paddle's rule, then Megatron pairs not twins of a Paddle corpus; sorted by name
    names = sorted(os.listdir(d))
    paddle = [n for n in names if n.endswith('_idx.npz')] or [n for n in names if n.endswith('_ids.npz')]
    mega = [n for n in names if n.endswith('.idx') and not any(p[:-8] == n[:-4] for p in paddle)]
    return [os.path.join(d, n if n in paddle else n[:-4] + '.bin') for n in sorted(paddle + mega)]

def one(p):
    if os.path.isdir(p):
        return listing(p)
    if p.endswith('.npz') or p.endswith('.bin'):
        return [p]
    return [p[:-4] + '.bin' if p.endswith('.idx') else p + '.bin']

def isnum(t):
    try:
        float(t); return True
    except ValueError:
        return False

toks = [t for t in re.split(r'[\s,]+', spec) if t]
if os.path.exists(spec):
    entries = [(None, spec)]
elif isnum(toks[0]):
    entries = [(float(toks[i]), toks[i + 1]) for i in range(0, len(toks), 2)]
else:
    entries = [(None, t) for t in toks]
paths, raw = [], []
for w, p in entries:
    ps = one(p)
    ts = [tokens(q) for q in ps]
    paths += ps
    raw += [float(t) if w is None else w * (t / sum(ts)) for t in ts]
# Megatron's normalisation: a sequential sum (not Python's compensated sum()), each weight divided by it
s = 0.0
for w in raw:
    s += w
weights = [w / s for w in raw]
lines = [l.split(' ') for l in got if l.startswith('corpus ')]
cpaths = [l[1] for l in lines]
ctoks = [int(l[2]) for l in lines]
cweights = [float(l[3]) for l in lines]
if [os.path.normpath(p) for p in cpaths] != [os.path.normpath(p) for p in paths]:
    sys.exit(f'corpora differ: llm4d {cpaths}, oracle {paths}')
if ctoks != [tokens(p) for p in paths]:
    sys.exit(f'token counts differ: llm4d {ctoks}')
if cweights != weights:
    sys.exit(f'weights differ: llm4d {cweights!r}, oracle {weights!r}')
# build_blending_indices (megatron/core/datasets/helpers.cpp)
current = [0] * len(weights)
want = []
for i in range(size):
    x = max(float(i), 1.0)
    best, best_err = 0, weights[0] * x - current[0]
    for d in range(1, len(weights)):
        e = weights[d] * x - current[d]
        if e > best_err:
            best, best_err = d, e
    want.append(f'{best} {current[best]}')
    current[best] += 1
rows = [l for l in got if l and not l.startswith('corpus ')]
if rows != want:
    k = next(i for i, (a, b) in enumerate(zip(rows + [''] * size, want)) if a != b)
    sys.exit(f'item {k}: llm4d {rows[k] if k < len(rows) else None}, oracle {want[k]}')
print(f'{len(paths)} corpora, weights {", ".join(f"{w:.4f}" for w in weights)}, draws {current}')
EOF
}
blend_case() { # name input_dir size
    local out
    if out=$(oracle "$2" "$3" 2>&1); then ok "$1 ($3 items): $out"; else bad "$1: $out"; fi
}
A=$MIX/fortunes_ids.npz
B=$MIX/doc
C=$tmp/other/small_ids.npz
blend_case "directory (npz + Megatron), weights by tokens" "$MIX" 5000
blend_case "Megatron weights '0.3 npz 0.7 prefix'" "0.3 $A 0.7 $B" 10007
blend_case "three corpora '0.1 A 0.2 B.bin 0.3 C'" "0.1 $A 0.2 $B.bin 0.3 $C" 20000
blend_case "comma list 'A,B.idx,C' by tokens" "$A,$B.idx,$C" 3
blend_case "space list, one item" "$A $B $C" 1
blend_case "skewed weights '1e-3 A 1 B'" "1e-3 $A 1 $B" 50000
blend_case "a directory inside a weighted list" "2 $MIX 1 $C" 4000

# ---- training -----------------------------------------------------------------------------------------------------
TRAIN=(--model_name_or_path gpt2-tiny --max_seq_len 32 --global_batch_size 8 --max_steps 12 --max_lr 2e-3
       --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 12 --logging_freq 1 --eval_freq 6 --eval_iters 1 --seed 3)
train_case() { # name input_dir [extra args]
    local name=$1 dir=$2 out=$tmp/run_$3
    shift 3
    if ! timeout 120 "$LLM4D" train "${TRAIN[@]}" --input_dir "$dir" --micro_batch_size 8 --output_dir "$out" "$@" \
            >"$out.log" 2>&1; then
        bad "$name: llm4d train failed"; tail -5 "$out.log"; return
    fi
    local res
    if res=$("$PY" - "$out/metrics.jsonl" <<'EOF'
import json, math, sys
m = [json.loads(l) for l in open(sys.argv[1])]
steps = [x['loss'] for x in m if 'loss' in x]
evals = [x['eval_loss'] for x in m if 'eval_loss' in x]
first, last = sum(steps[:3]) / 3, sum(steps[-3:]) / 3
ok = len(steps) == 12 and all(map(math.isfinite, steps + evals)) and len(evals) == 2 and last < first - 0.2
print(f'12 steps, loss {first:.3f} -> {last:.3f} (first/last 3 steps), eval {", ".join(f"{e:.3f}" for e in evals)}')
sys.exit(0 if ok else 1)
EOF
    ); then ok "$name: $res"; else bad "$name: $res"; fi
}
train_case "train on a directory with an npz corpus and a Megatron corpus" "$MIX" mix
# the shares the log gives each corpus's samples against the token counts read from the files themselves (numpy;
# the Megatron .bin by its size over the .idx's dtype): Megatron weighs a directory's corpora by their tokens
if grep -q "data: 2 corpora blended" "$tmp/run_mix.log" && share=$("$PY" - "$tmp/run_mix.log" "$MIX" <<'EOF'
import os, re, sys
import numpy as np
log, mix = open(sys.argv[1]).read(), sys.argv[2]
with open(f"{mix}/doc.idx", "rb") as f:
    f.read(17)
    size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 4, 7: 8, 8: 2}[f.read(1)[0]]
a = os.path.getsize(f"{mix}/doc.bin") // size
b = len(np.load(f"{mix}/fortunes_ids.npz")["ids"])
want = a / (a + b)
ok = True
for split in ("train", "validation"):
    m = re.search(split + r" split .*blended from:\n.*doc\.bin: (\d+) samples.*\n.*fortunes_ids\.npz: (\d+) samples", log)
    if not m:
        print(f"no {split} split lines"); sys.exit(1)
    na, nb = int(m.group(1)), int(m.group(2))
    got = na / (na + nb)
    ok &= abs(got - want) <= 1 / (na + nb) + 0.01
    print(f"{split}: doc.bin {na} of {na + nb} samples = {got:.4f} (tokens {a} / {a + b} = {want:.4f})")
sys.exit(0 if ok else 1)
EOF
); then
    ok "the log lists both corpora, their samples' shares as their tokens': $(echo $share)"
else
    bad "the log does not describe the blend:"; grep -A8 "data:" "$tmp/run_mix.log"
fi
train_case "train on a Megatron corpus alone (prefix)" "$B" mega
if grep -q "data: $B.bin: [0-9]* tokens" "$tmp/run_mega.log"; then ok "the Megatron-only log names $B.bin"
else bad "the Megatron-only log does not name the corpus"; grep "data:" "$tmp/run_mega.log"; fi

# the blend under data parallelism: same global batch, same samples, same losses
if timeout 120 "$LLM4D" launch --nproc 2 --log_dir "$tmp/dp2log" -- train "${TRAIN[@]}" --input_dir "$MIX" \
        --micro_batch_size 4 --dp_degree 2 --output_dir "$tmp/run_dp2" >"$tmp/dp2.log" 2>&1; then
    if d=$("$PY" - "$tmp/run_mix/metrics.jsonl" "$tmp/run_dp2/metrics.jsonl" <<'EOF'
import json, sys
a, b = ([json.loads(l)['loss'] for l in open(p) if '"loss"' in l] for p in sys.argv[1:])
d = max(abs(x - y) for x, y in zip(a, b))
print(f'{d:.2e}')
sys.exit(0 if len(a) == len(b) == 12 and d <= 1e-5 else 1)
EOF
    ); then ok "blended run under dp 2 equals one process: max |loss diff| $d"; else bad "dp 2 blended losses differ: $d"; fi
else
    bad "dp 2 blended run failed"; tail -5 "$tmp/dp2.log"
fi

# ---- bad input ----------------------------------------------------------------------------------------------------
expect() { # name, word, input_dir [extra]
    local name=$1 word=$2 dir=$3
    shift 3
    timeout 60 "$LLM4D" train "${TRAIN[@]}" --micro_batch_size 8 --input_dir "$dir" --output_dir "$tmp/bad" "$@" \
        >"$tmp/stdout" 2>"$tmp/stderr"
    local rc=$? lines
    lines=$(wc -l <"$tmp/stderr")
    if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qi -- "$word" "$tmp/stderr"; then ok "$name: $(cat "$tmp/stderr")"
    else bad "$name: exit $rc, $lines stderr lines (want 2, 1, containing '$word'):"; cat "$tmp/stderr"; fi
}
mkdir -p "$tmp/junk"
echo "not a corpus" >"$tmp/junk/notes.txt"
cp "$MIX/doc.bin" "$tmp/junk/orphan.bin"
expect "a directory with nothing readable" "no corpus in this directory" "$tmp/junk"
expect "a weight list that does not parse" "has no path after it" "0.3 $A 0.7"
expect "a weight where a path belongs" "looks like a weight" "$A 0.5 $B"
expect "a negative weight" "negative" "-0.3 $A 1.3 $B"
expect "Megatron ids beyond vocab_size" "vocab_size" "$B" -o Model.vocab_size=1000

finish
