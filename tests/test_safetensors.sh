#!/usr/bin/env bash
# test_safetensors.sh — llm4d's safetensors files against an independent implementation.
#
# The format is parsed and written by hand in Debian's python3 with json + numpy (the safetensors package is not
# installed), with torch as the oracle for BF16 rounding and numpy for F16 rounding:
#   1. llm4d writes its reference file; python checks the layout (8-byte length, padded header, data packed and
#      aligned) and every value, including 4096 F32 values narrowed to F16 and BF16 by llm4d.
#   2. python writes a file the way another tool might (insertion order, unpadded header, misaligned tensors);
#      llm4d reads it and dumps every value, which python compares with what it wrote.
#   3. corrupt copies of llm4d's file (flipped header byte, flipped length byte, truncated data, offsets out of
#      range, unknown dtype, wrong shape, overlapping tensors) must each be refused with exit 2 and one line naming
#      the file and, where there is one, the tensor.
# The llm4d side is the test_safetensors_unit executable's `write` and `dump` modes.
set -u
BIN="${BUILD_DIR:-build}/test_safetensors_unit"
PY=/usr/bin/python3
T=$(mktemp -d /tmp/llm4d_st_sh_XXXXXX)
trap 'rm -rf "$T"' EXIT
source "$(dirname "$0")/lib.sh"
require_exe "$BIN"

cat >"$T/st.py" <<'EOF'
import json, math, struct, sys
import numpy as np
import torch

NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
      "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "u1"}
SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
        "U16": 2, "U8": 1, "BOOL": 1}

def report(ok, what, detail=""):
    print(("PASS " if ok else "FAIL ") + what + (": " + detail if detail and not ok else ""))

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n].decode("utf-8"))
    return b, n, hdr

def decode(dtype, shape, raw):
    if dtype == "BF16":
        a = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    else:
        a = np.frombuffer(raw, NP[dtype])
    return a.reshape(shape)

def ref_small(j):
    return ((j * 37) % 101) / 8.0 - 6.0

def same_bits_or_nan(x, y):
    """x, y: same-width unsigned views of float arrays; equal, or both NaN."""
    return bool(np.all((x == y) | (np.isnan(x.view(FLOAT_OF[x.dtype.itemsize])) &
                                   np.isnan(y.view(FLOAT_OF[y.dtype.itemsize])))))

FLOAT_OF = {2: np.float16, 4: np.float32}

def check_llm4d(path):
    b, n, hdr = read_st(path)
    report((8 + n) % 8 == 0, "llm4d file: data section starts at a multiple of 8", str(8 + n))
    hdr_text = b[8:8 + n].decode("utf-8")
    report(hdr_text == hdr_text.rstrip(" ") + " " * (len(hdr_text) - len(hdr_text.rstrip(" "))) and
           hdr_text.lstrip().startswith("{"), "llm4d file: header is JSON padded with spaces")
    meta = hdr.pop("__metadata__", None)
    report(meta == {"format": "pt", "llm4d.note": 'quote " backslash \\ unicode \u00fc'},
           "llm4d file: __metadata__ read by python", repr(meta))
    data = b[8 + n:]
    ents = sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
    pos, prev_size, layout_ok = 0, 99, True
    for name, e in ents:
        s, t = e["data_offsets"]
        sz = SIZE[e["dtype"]]
        if s != pos or (8 + n + s) % sz or sz > prev_size:
            layout_ok = False
        pos, prev_size = t, sz
    report(layout_ok and pos == len(data),
           "llm4d file: tensors packed without gaps, aligned, largest elements first", "")
    names = [k for k, _ in ents]
    groups = {}
    for k, e in ents:
        groups.setdefault(SIZE[e["dtype"]], []).append(k)
    report(all(v == sorted(v) for v in groups.values()), "llm4d file: names sorted within each element size")
    T = {k: decode(e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]]) for k, e in hdr.items()}
    D = {k: e["dtype"] for k, e in hdr.items()}
    exp = {
        "a.f32": ("F32", np.array([ref_small(j) for j in range(15)], np.float32).reshape(3, 5)),
        "b.bf16": ("BF16", np.array([ref_small(j + 100) for j in range(12)], np.float32).reshape(4, 3)),
        "c.f16": ("F16", np.array([ref_small(j + 200) for j in range(12)], np.float16).reshape(2, 2, 3)),
        "d.i64": ("I64", np.array([j * 1000000000007 - 3000000000000 for j in range(7)], np.int64)),
        "e.i32": ("I32", np.array([j * -12345 + 7 for j in range(6)], np.int32).reshape(2, 3)),
        "f.u8": ("U8", np.array([(j * 29) % 256 for j in range(10)], np.uint8)),
        "g.scalar": ("F32", np.array(3.25, np.float32)),
        "h.f64": ("F64", np.array([(j + 1) / 3.0 for j in range(3)], np.float64)),
        "i.empty": ("F32", np.zeros((0, 4), np.float32)),
    }
    for k, (dt, v) in exp.items():
        got = T.get(k)
        good = got is not None and D[k] == dt and got.shape == v.shape and np.array_equal(got, v.astype(got.dtype))
        report(good, "llm4d file: %s (%s %s) read by python" % (k, dt, list(v.shape)),
               "got " + repr(None if got is None else (D[k], got.shape, got.ravel()[:6])))
    src = T["conv.src"]
    report(D["conv.src"] == "F32" and src.shape == (4096,), "llm4d file: conversion source present")
    with np.errstate(over="ignore"):  # values past 65504 become inf, as they should
        want16 = src.astype(np.float16).view(np.uint16)
    raw16 = np.frombuffer(data[hdr["conv.f16"]["data_offsets"][0]:hdr["conv.f16"]["data_offsets"][1]], "<u2")
    mism = np.nonzero(~((want16 == raw16) | (np.isnan(src))))[0]
    report(len(mism) == 0 and np.all(np.isnan(raw16.view(np.float16)[np.isnan(src)])),
           "llm4d F32->F16 equals numpy astype(float16) on 4096 values",
           "first mismatch at %s" % (mism[:3].tolist(),))
    wantbf = torch.from_numpy(src.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    rawbf = np.frombuffer(data[hdr["conv.bf16"]["data_offsets"][0]:hdr["conv.bf16"]["data_offsets"][1]], "<u2")
    bfnan = ((rawbf & 0x7f80) == 0x7f80) & ((rawbf & 0x7f) != 0)
    mism = np.nonzero(~((wantbf == rawbf) | np.isnan(src)))[0]
    report(len(mism) == 0 and np.all(bfnan[np.isnan(src)]),
           "llm4d F32->BF16 equals torch .to(bfloat16) on 4096 values",
           "first mismatch at %s" % (mism[:3].tolist(),))

def py_tensors():
    g = np.random.default_rng(7)
    f32 = g.standard_normal((2, 3)).astype(np.float32)
    bf = torch.from_numpy(g.standard_normal(5).astype(np.float32)).to(torch.bfloat16)
    return [
        ("z.u8", "U8", np.arange(3, dtype=np.uint8) * 77),
        ("y.f32", "F32", f32),
        ("x.bf16", "BF16", bf),
        ("w.f16", "F16", (g.standard_normal((3, 1)) * 100).astype(np.float16)),
        ("v.i64", "I64", np.array([-(2 ** 62), 2 ** 62 + 5, 0], np.int64)),
        ("u.i32", "I32", np.array([[-(2 ** 31), 2 ** 31 - 1]], np.int32)),
        ("t.f64", "F64", np.array(math.pi)),
        ("transformer.h.0.attn.c_attn.weight", "F32", g.standard_normal((4, 2)).astype(np.float32)),
    ]

def raw_of(dt, v):
    if dt == "BF16":
        return v.view(torch.int16).numpy().tobytes()
    return np.ascontiguousarray(v).astype(NP[dt]).tobytes()

def write_py(path):
    hdr, blobs, off = {"__metadata__": {"writer": "python", "n": "8"}}, [], 0
    for name, dt, v in py_tensors():
        raw = raw_of(dt, v)
        hdr[name] = {"dtype": dt, "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr).encode()  # deliberately not padded: readers must not require it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

def compare_dump(dump_path):
    lines = open(dump_path).read().splitlines()
    meta = {l.split(" ", 2)[1]: l.split(" ", 2)[2] for l in lines if l.startswith("meta ")}
    report(meta == {"writer": "python", "n": "8"}, "python file: llm4d reads __metadata__", repr(meta))
    got = {}
    for l in lines:
        if l.startswith("tensor "):
            head, vals = l.split(" :", 1)
            p = head.split()
            nd = int(p[3])
            got[p[1]] = (p[2], [int(x) for x in p[4:4 + nd]], vals.split())
    for name, dt, v in py_tensors():
        if dt == "BF16":
            v = v.float().numpy()
        g = got.get(name)
        good = g is not None and g[0] == dt and g[1] == list(v.shape)
        if good:
            flat = np.asarray(v).ravel()
            if dt in ("F32", "F16", "BF16", "F64"):
                # llm4d prints F32/F16/BF16 as float32 with 9 digits (exact round trip), F64 with 17
                ft = np.float64 if dt == "F64" else np.float32
                vals = np.array([float(x) for x in g[2]], np.float64).astype(ft)
                good = len(vals) == flat.size and np.array_equal(vals, flat.astype(ft))
            else:
                good = [int(x) for x in g[2]] == [int(x) for x in flat]
        report(good, "python file: llm4d reads %s (%s %s)" % (name, dt, list(v.shape)), repr(g)[:200])
    report(len(got) == len(py_tensors()), "python file: llm4d sees exactly the tensors written", str(len(got)))

def rewrite(path, b, hdr, data):
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

def corrupt(good, outdir):
    """Write corrupt variants; print one line per variant: file|needle|needle."""
    b, n, hdr = read_st(good)
    data = b[8 + n:]
    by_off = sorted((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"][0])
    out = []
    x = bytearray(b); x[8 + b[8:].index(b":")] ^= 1
    open(f"{outdir}/flip_header.safetensors", "wb").write(x); out.append(("flip_header", "not valid JSON", ""))
    x = bytearray(b); x[4] ^= 0x01  # header length + 2^32
    open(f"{outdir}/flip_length.safetensors", "wb").write(x); out.append(("flip_length", "exceeds", ""))
    open(f"{outdir}/truncated.safetensors", "wb").write(b[:-10])
    out.append(("truncated", "'%s'" % by_off[-1], "run past"))
    h = json.loads(json.dumps(hdr)); s = h["a.f32"]["data_offsets"][0]
    h["a.f32"]["data_offsets"] = [s + 1000000, s + 1000060]
    rewrite(f"{outdir}/offsets_out.safetensors", b, h, data); out.append(("offsets_out", "'a.f32'", "run past"))
    h = json.loads(json.dumps(hdr)); h["d.i64"]["dtype"] = "I65"
    rewrite(f"{outdir}/unknown_dtype.safetensors", b, h, data); out.append(("unknown_dtype", "'d.i64'", "'I65'"))
    h = json.loads(json.dumps(hdr)); h["e.i32"]["shape"] = [3, 3]
    rewrite(f"{outdir}/bad_shape.safetensors", b, h, data); out.append(("bad_shape", "'e.i32'", "span"))
    h = json.loads(json.dumps(hdr)); s, t = h["f.u8"]["data_offsets"]; h["f.u8"]["data_offsets"] = [s - 2, t - 2]
    rewrite(f"{outdir}/overlap.safetensors", b, h, data); out.append(("overlap", "'f.u8'", "overlap"))
    for o in out:
        print("|".join(o))

mode = sys.argv[1]
if mode == "check_llm4d": check_llm4d(sys.argv[2])
elif mode == "write_py": write_py(sys.argv[2])
elif mode == "compare_dump": compare_dump(sys.argv[2])
elif mode == "corrupt": corrupt(sys.argv[2], sys.argv[3])
EOF

run_py() { # run a python check and fold its PASS/FAIL lines into the tally
    local out rc
    out=$("$PY" "$T/st.py" "$@" 2>&1)
    rc=$?
    echo "$out"
    pass=$((pass + $(grep -c '^PASS' <<<"$out")))
    fail=$((fail + $(grep -c '^FAIL' <<<"$out")))
    if [ $rc -ne 0 ]; then bad "python $1 exited $rc"; fi
}

# 1. llm4d writes, python reads
if "$BIN" write "$T/llm4d.safetensors"; then ok "llm4d writes the reference file"; else bad "llm4d write"; fi
run_py check_llm4d "$T/llm4d.safetensors"

# 2. python writes, llm4d reads
run_py write_py "$T/py.safetensors"
if "$BIN" dump "$T/py.safetensors" >"$T/py.dump" 2>"$T/py.err"; then
    ok "llm4d reads the python-written file"
    run_py compare_dump "$T/py.dump"
else
    bad "llm4d dump of the python file: $(cat "$T/py.err")"
fi
# llm4d's own file through llm4d's reader, as a control for the corrupt cases below
if "$BIN" dump "$T/llm4d.safetensors" >/dev/null 2>&1; then ok "llm4d reads its own file"; else bad "own file"; fi

# 3. corrupt files
mkdir -p "$T/bad"
"$PY" "$T/st.py" corrupt "$T/llm4d.safetensors" "$T/bad" >"$T/bad/list" || bad "python corrupt"
while IFS='|' read -r name n1 n2; do
    f="$T/bad/$name.safetensors"
    "$BIN" dump "$f" >/dev/null 2>"$T/err"
    rc=$?
    msg=$(cat "$T/err")
    lines=$(wc -l <"$T/err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF "$f" "$T/err" && grep -qF -- "$n1" "$T/err" &&
        { [ -z "$n2" ] || grep -qF -- "$n2" "$T/err"; }; then
        ok "corrupt ($name) refused: $msg"
    else
        bad "corrupt ($name): rc=$rc lines=$lines msg=$msg (want $n1 $n2)"
    fi
done <"$T/bad/list"
[ "$(wc -l <"$T/bad/list")" -eq 7 ] && ok "7 corrupt variants generated" || bad "corrupt variants: $(cat "$T/bad/list")"

finish
