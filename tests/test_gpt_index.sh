#!/usr/bin/env bash
# test_gpt_index.sh — llm4d's GPT sample index against numpy (tests/gpt_index_oracle.py, run by Debian's python3).
#
# Synthetic corpora in every format llm4d reads (Paddle's old P_ids.npz, the new P_ids.npy + P_idx.npz, a
# Megatron pair written by Python from the published layout), with empty, one-token and very long documents.
# For several splits, split kinds, seeds, sequence lengths and sample counts (one epoch; several epochs with and
# without a separate last epoch) the cached doc_idx, sample_idx and shuffle_idx .npy files llm4d writes must equal
# numpy's element for element and in dtype, and the first items (tokens and epoch) must equal the oracle's
# __getitem__. Also: MT19937 outputs and bounded draws (32- and 64-bit) equal numpy RandomState's, a second build
# reads the cache, and a stale cache left under PaddleNLP's names with another seed is rebuilt.
set -euo pipefail
SRC_DIR=${SRC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
DRV=$BUILD_DIR/test_gpt_index_unit
ORACLE=$SRC_DIR/tests/gpt_index_oracle.py
PY=/usr/bin/python3
source "$SRC_DIR/tests/lib.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# ---- MT19937 and bounded draws against numpy ----------------------------------------------------------------------
mt_case() { # seed
    "$DRV" --mt "$1" 2000 > "$TMP/mt.c"
    "$PY" -c "import numpy as np; print('\n'.join(map(str, np.random.RandomState($1).randint(0, 2**32, size=2000, dtype=np.uint64))))" > "$TMP/mt.py"
    cmp -s "$TMP/mt.c" "$TMP/mt.py"
}
interval_case() { # seed max
    "$DRV" --interval "$1" "$2" 1000 > "$TMP/iv.c"
    "$PY" -c "import numpy as np; print('\n'.join(map(str, np.random.RandomState($1).randint(0, $2 + 1, size=1000, dtype=np.int64))))" > "$TMP/iv.py"
    cmp -s "$TMP/iv.c" "$TMP/iv.py"
}
for s in 0 1 1234 4294967295; do check "MT19937 seed $s: 2000 outputs equal numpy's" mt_case $s; done
for m in 1 6 1000 2147483648 4294967295 4294967301 1099511627775 4611686018427387904; do
    check "random_interval($m) draws equal numpy's masked randint" interval_case 99 $m
done

# ---- corpora ---------------------------------------------------------------------------------------------------
"$PY" - "$TMP" <<'EOF'
import struct, sys, numpy as np
tmp = sys.argv[1]
r = np.random.RandomState(20240601)
# A: old format, 300 documents of 0..400 tokens (some empty, some of one token), uint16 ids
lens = r.randint(1, 400, size=300).astype(np.int32)
lens[[3, 50, 51, 52, 299]] = 0
lens[[10, 11, 12]] = 1
ids = r.randint(0, 50257, size=int(lens.sum())).astype(np.uint16)
np.savez(f'{tmp}/a_ids.npz', ids=ids, lens=lens)
# B: the same data as a Megatron pair (layout of megatron/data/indexed_dataset.py, MMIDIDX version 1, uint16)
with open(f'{tmp}/b.idx', 'wb') as f:
    f.write(b'MMIDIDX\x00\x00' + struct.pack('<Q', 1) + struct.pack('<B', 8))
    f.write(struct.pack('<Q', len(lens)) + struct.pack('<Q', len(lens) + 1))
    f.write(lens.astype(np.int32).tobytes())
    f.write((np.concatenate([[0], np.cumsum(lens)[:-1]]) * 2).astype(np.int64).tobytes())
    f.write(np.arange(len(lens) + 1, dtype=np.int64).tobytes())
ids.tofile(f'{tmp}/b.bin')
# C: new format, 2000 tiny documents (1..5 tokens), int32 ids
lens_c = r.randint(1, 6, size=2000).astype(np.int32)
np.save(f'{tmp}/c_ids.npy', r.randint(0, 50257, size=int(lens_c.sum())).astype(np.int32))
np.savez(f'{tmp}/c_idx.npz', lens=lens_c, docs=np.arange(2001, dtype=np.int64))
# D: one long document
np.savez(f'{tmp}/d_ids.npz', ids=r.randint(0, 50257, size=5000).astype(np.uint16), lens=np.array([5000], np.int32))
# sample counts that give several epochs, with and without a separate last epoch (split "1", L = 64 on A)
T, L = int(lens.sum()), 64
per = (T - 1) // L
with open(f'{tmp}/n.txt', 'w') as f:
    f.write(f'{2 * per + 3} {3 * per - 2}\n')
EOF
read -r N_SEP N_NOSEP < "$TMP/n.txt"

compare() { # corpus split kind N L seed items: build with llm4d (cache) and the oracle, compare
    local corpus=$1 split=$2 kind=$3 n=$4 l=$5 seed=$6 items=$7
    local prefix=${corpus%_ids.npz}
    prefix=${prefix%_ids.npy}
    prefix=${prefix%.bin}
    local out=$TMP/oracle_${kind}_${n}_${l}_${seed}
    rm -rf "$out" && mkdir -p "$out"
    "$DRV" --build "$corpus" "$split" "$kind" "$n" "$l" "$seed" "$items" > "$TMP/llm4d.txt" || return 1
    "$PY" "$ORACLE" "$corpus" "$split" "$kind" "$n" "$l" "$seed" "$out" "$items" > "$TMP/oracle.txt" || return 1
    local base=${prefix}_gpt_${kind}_indexmap_${n}ns_${l}sl
    head -n 1 "$TMP/llm4d.txt" | sed 's/ from_cache.*//' > "$TMP/summary.c"
    if ! cmp -s "$TMP/summary.c" "$TMP/oracle.txt"; then
        echo "  summary: llm4d '$(cat "$TMP/summary.c")' oracle '$(cat "$TMP/oracle.txt")'"
        return 1
    fi
    echo "  $(cat "$TMP/oracle.txt")"
    "$PY" - "$base" "$out" <<'EOF' || return 1
import sys, numpy as np
base, out = sys.argv[1:3]
for k in ('doc', 'sample', 'shuffle'):
    a, b = np.load(f'{base}_{k}_idx.npy'), np.load(f'{out}/{k}_idx.npy')
    if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b):
        print(f'  {k}_idx differs: llm4d {a.dtype}{a.shape} oracle {b.dtype}{b.shape}')
        sys.exit(1)
EOF
    tail -n +2 "$TMP/llm4d.txt" > "$TMP/items.c"
    cmp -s "$TMP/items.c" "$out/items.txt" || { echo "  items differ"; return 1; }
}

A=$TMP/a_ids.npz B=$TMP/b.bin C=$TMP/c_ids.npy D=$TMP/d_ids.npz
check "A 949,50,1 train N=500 L=64 seed 1234 (one epoch)" compare "$A" 949,50,1 train 500 64 1234 40
check "A 949,50,1 valid N=300 L=32 seed 1234 (several epochs)" compare "$A" 949,50,1 valid 300 32 1234 40
check "A 90,7,3 test N=77 L=16 seed 0" compare "$A" 90,7,3 test 77 16 0 40
check "A split 1 N=$N_SEP L=64 (separate last epoch)" compare "$A" 1 train "$N_SEP" 64 7 40
check "A split 1 N=$N_NOSEP L=64 (3 epochs, no separate last epoch)" compare "$A" 1 train "$N_NOSEP" 64 7 40
check "B (Megatron pair of A) 949,50,1 train N=500 L=64 seed 1234" compare "$B" 949,50,1 train 500 64 1234 40
check "B (Megatron) split 1 N=$N_SEP L=64 (separate last epoch)" compare "$B" 1 train "$N_SEP" 64 7 40
check "C (npy+npz, tiny documents) 949,50,1 train N=3000 L=8 seed 4294967295" compare "$C" 949,50,1 train 3000 8 4294967295 40
check "C 8/1/1 valid N=1000 L=5 seed 5" compare "$C" 8/1/1 valid 1000 5 5 40
check "D (one 5000-token document) split 1 N=10000 L=7 seed 42 (15 epochs)" compare "$D" 1 train 10000 7 42 40

check "B's cache holds what A's does (same data, other format)" "$PY" -c "
import numpy as np, sys
for k in ('doc', 'sample', 'shuffle'):
    a = np.load('$TMP/a_gpt_train_indexmap_500ns_64sl_%s_idx.npy' % k); b = np.load('$TMP/b_gpt_train_indexmap_500ns_64sl_%s_idx.npy' % k)
    assert np.array_equal(a, b)"
check "a second build reads the cache" bash -c "'$DRV' --build '$A' 949,50,1 train 500 64 1234 | grep -q 'from_cache 1'"
# a stale cache under PaddleNLP's names (another seed, no llm4d sidecar) must be rebuilt, not reused
stale() {
    rm -f "$TMP"/a_gpt_train_indexmap_400ns_64sl*
    mkdir -p "$TMP/stale"
    "$PY" "$ORACLE" "$A" 949,50,1 train 400 64 999 "$TMP/stale" 0 > /dev/null
    for k in doc sample shuffle; do cp "$TMP/stale/${k}_idx.npy" "$TMP/a_gpt_train_indexmap_400ns_64sl_${k}_idx.npy"; done
    compare "$A" 949,50,1 train 400 64 1234 10 && grep -q "from_cache 0" "$TMP/llm4d.txt"
}
check "a stale PaddleNLP cache (seed 999, no sidecar) is rebuilt for seed 1234" stale
check "an empty split is a one-line user error" bash -c "'$DRV' --build '$A' 100,0,0 test 10 64 1 2>&1 >/dev/null | grep -q 'no documents'"

finish
