#!/usr/bin/python3
"""make_seeds.py — the seed corpora of the fuzzers, fuzz/corpus/<fuzzer>/<seed>.

Seeds are small valid (and a few nearly valid) inputs in each harness's layout (fuzz/util.h: several files in one
input, separated by the line "--8<--"). Where llm4d writes the format itself (checkpoints, Megatron and npz corpora
from prepare-data) the seeds are llm4d's own output, made here with build/llm4d; the formats llm4d only reads come
from numpy (npy, npz) and from the format's definition (safetensors). The corpora are committed; run this again
only to change them (it needs build/llm4d, and Debian's python3-numpy).
Usage: /usr/bin/python3 fuzz/make_seeds.py [BUILD_DIR]"""
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
LLM4D = os.path.join(BUILD, "llm4d")
SEP = b"\n--8<--\n"
OUT = os.path.join(ROOT, "fuzz", "corpus")
VOCAB = os.path.join(ROOT, "fuzz", "vocab")


def put(fuzzer, name, *parts):
    d = os.path.join(OUT, fuzzer)
    os.makedirs(d, exist_ok=True)
    data = SEP.join(p if isinstance(p, bytes) else p.encode() for p in parts)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def npz(compress=False, **arrays):
    b = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(b, **arrays)
    return b.getvalue()


def run(*args, **kw):
    subprocess.run([LLM4D, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def seeds_npy():
    ids = np.array([5, 17, 3, 50256, 9], dtype=np.uint16)
    put("fuzz_npy", "u2", npy(ids))
    put("fuzz_npy", "i4", npy(ids.astype(np.int32)))
    put("fuzz_npy", "u4", npy(ids.astype(np.uint32)))
    put("fuzz_npy", "i8_v2", npy(ids.astype(np.int64), version=(2, 0)))
    put("fuzz_npy", "2d", npy(np.arange(12, dtype=np.int32).reshape(3, 4)))
    put("fuzz_npy", "empty", npy(np.zeros(0, dtype=np.uint16)))
    put("fuzz_npy", "scalar", npy(np.int64(7)))
    put("fuzz_npy", "fortran", npy(np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))))
    put("fuzz_npy", "bigendian", npy(ids.astype(">i4")))
    put("fuzz_npy", "float", npy(ids.astype(np.float32)))
    put("fuzz_npy", "record", npy(np.zeros(2, dtype=[("a", "<i4"), ("b", "<u2")])))


def seeds_npz():
    ids = np.array([11, 12, 13, 50256, 21, 22, 50256, 31], dtype=np.uint16)
    lens = np.array([4, 3, 1], dtype=np.int32)
    put("fuzz_npz", "old_stored", npz(ids=ids, lens=lens))
    put("fuzz_npz", "old_deflated", npz(compress=True, ids=ids.astype(np.int64), lens=lens.astype(np.int64)))
    put("fuzz_npz", "old_bad_lens", npz(ids=ids, lens=np.array([4, 3, 2], dtype=np.int32)))
    put("fuzz_npz", "pair", npz(lens=lens, docs=np.arange(4, dtype=np.int64)), npy(ids))
    put("fuzz_npz", "pair_i4", npz(compress=True, lens=lens), npy(ids.astype(np.int32)))


def seeds_prepare_outputs(tmp):
    """prepare-data's own npz and Megatron output (fuzz vocabulary), for the npz and megatron corpora."""
    src = os.path.join(tmp, "docs.jsonl")
    with open(src, "w") as f:
        for t in ["The quick brown fox.", "llm4d trains GPT in C.", "naïve café ☕", "x"]:
            f.write(json.dumps({"text": t}) + "\n")
    run("prepare-data", "--input", src, "--output-prefix", os.path.join(tmp, "p"), "--format", "mmap",
        "--append-eos", "--workers", "1", "--vocab_dir", VOCAB, "--no-progress")
    put("fuzz_megatron", "prepare_u16", read(os.path.join(tmp, "p.idx")), read(os.path.join(tmp, "p.bin")))
    run("prepare-data", "--input", src, "--output-prefix", os.path.join(tmp, "q"), "--workers", "1",
        "--vocab_dir", VOCAB, "--no-progress")
    put("fuzz_npz", "prepare_npz", read(os.path.join(tmp, "q_ids.npz")))
    # Megatron files as Megatron itself writes them for a large vocabulary (int32 ids) and several sentences per
    # document (doc_idx not 0..n)
    sizes = np.array([3, 2, 4], dtype=np.int32)
    toks = np.arange(9, dtype=np.int32) + 70000
    ptrs = np.concatenate([[0], np.cumsum(sizes[:-1]) * 4]).astype(np.int64)
    doc_idx = np.array([0, 2, 3], dtype=np.int64)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(sizes), len(doc_idx)) + sizes.tobytes() + \
        ptrs.tobytes() + doc_idx.tobytes()
    put("fuzz_megatron", "int32_docs", idx, toks.tobytes())


def st_file(tensors, meta=None):
    """safetensors bytes: tensors = [(name, dtype, shape, raw bytes)] laid out in order."""
    header, data = {}, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta is not None:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    f32 = np.arange(6, dtype=np.float32).tobytes()
    put("fuzz_safetensors", "f32", st_file([("w", "F32", [2, 3], f32)], {"format": "pt"}))
    put("fuzz_safetensors", "mixed", st_file([
        ("a.weight", "F32", [2, 2], np.ones(4, np.float32).tobytes()),
        ("b", "BF16", [3], np.array([0x3f80, 0x4000, 0xbf80], np.uint16).tobytes()),
        ("c", "F16", [2], np.array([1.5, -2], np.float16).tobytes()),
        ("d", "I64", [], np.int64(42).tobytes()),
        ("e", "U8", [0, 5], b""),
        ("f", "F64", [1], np.float64(3.25).tobytes()),
        ("g", "BOOL", [2], b"\x00\x01"),
    ], {"format": "pt", "llm4d.slices": "{}"}))
    put("fuzz_safetensors", "gap", st_file([("w", "F32", [1], b"\0\0\0\0")])[:-1] + b"\0\0\0\0\0")


def ckpt_seed(step_dir, latest):
    meta = read(os.path.join(step_dir, "meta.json"))
    files = list(json.loads(meta)["files"])
    return [meta, latest] + [read(os.path.join(step_dir, f)) for f in files]


def seeds_ckpt(tmp):
    """Real checkpoints of a tiny GPT (vocabulary 300) trained one step on prepare-data's corpus of the fuzz
    vocabulary: one process (whole tensors), and two ranks at sharding stage 3 (slices, llm4d.slices records)."""
    text = os.path.join(tmp, "fortune.txt")
    with open(text, "w") as f:
        for i in range(40):
            f.write(f"Line {i}: the quick brown fox jumps over the lazy dog, again and again.\n")
    run("prepare-data", "--input", text, "--output-prefix", os.path.join(tmp, "c"), "--append-eos",
        "--workers", "1", "--vocab_dir", VOCAB, "--no-progress")
    model = ["-o", "Model.vocab_size=700", "-o", "Model.hidden_size=4", "-o", "Model.num_layers=1",
             "-o", "Model.num_attention_heads=2", "-o", "Model.max_position_embeddings=16",
             "-o", "Model.vocab_size_divisible_unit=8"]
    common = ["--input_dir", os.path.join(tmp, "c_ids.npz"), "--max_seq_len", "8", "--global_batch_size", "4",
              "--max_steps", "1", "--logging_freq", "1", "--eval_freq", "0"] + model
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run("train", *common, "--micro_batch_size", "4", "--output_dir", os.path.join(tmp, "one"), env=env)
    put("fuzz_ckpt", "one_process", *ckpt_seed(os.path.join(tmp, "one", "step_1"), b"step_3\n"))
    run("launch", "--nproc", "2", "--log_dir", os.path.join(tmp, "log"), "--", "train", *common,
        "--micro_batch_size", "2", "--sharding_degree", "2", "--sharding_stage", "3",
        "--output_dir", os.path.join(tmp, "zero3"), env=env)
    put("fuzz_ckpt", "zero3_slices", *ckpt_seed(os.path.join(tmp, "zero3", "step_1"), b"step_3\n"))
    # the same with the checksums left to the harness (even first byte: taken as is) is the checksum path
    seed = ckpt_seed(os.path.join(tmp, "one", "step_1"), b"step_3\n")
    put("fuzz_ckpt", "one_process_as_is", b" " + seed[0], *seed[1:])


def seeds_tokenizer():
    enc, bpe = read(os.path.join(VOCAB, "encoder.json")), read(os.path.join(VOCAB, "vocab.bpe"))
    put("fuzz_vocab", "fuzz_vocab", enc, bpe, "Hello world, it's the encoder's turn.")
    byte_only = json.loads(enc)
    byte_only = {t: i for t, i in byte_only.items() if i < 256}
    byte_only["<|endoftext|>"] = 256
    put("fuzz_vocab", "no_merges", json.dumps(byte_only, ensure_ascii=False), "#version: 0.2\n", "abc")
    texts = {
        "english": "The quick brown fox jumps over the lazy dog. It's 12:45, isn't it? They'll see; we'd go.",
        "unicode": "naïve café — 東京 🤖 ẞ Ελληνικά\tתל אביב\u00a0nbsp\u2028line",
        "spaces": "a  b   c    \n\n\n   d\t\t e \r\n",
        "long_word": "x" * 300 + " " + "ab" * 200,
        "markdown": "## Parallelism\n\n| what | how |\n|---|---|\n| dp | `--dp_degree N` |\n",
        "invalid_utf8": b"ok \xff\xfe then \xc3\x28 and \xed\xa0\x80 end",
    }
    for k, v in texts.items():
        put("fuzz_encode", k, v)


def seeds_prepare():
    lines = [{"text": "First document."}, {"text": "  Second, with spaces.  "}, {"text": ""}, {"id": 3},
             {"text": "Third\nwith a newline"}]
    jsonl = "".join(json.dumps(x) + "\n" for x in lines if "text" in x)
    put("fuzz_prepare", "jsonl", "eos 0", jsonl)
    put("fuzz_prepare", "jsonl_mmap_chunk", "mmap eos 7", jsonl)
    put("fuzz_prepare", "jsonl_missing_key", "", "".join(json.dumps(x) + "\n" for x in lines))
    put("fuzz_prepare", "text_lines", "text 5", "one line\n\ntwo line\n   \nthree\n")
    put("fuzz_prepare", "text_blank", "text blank mmap 3", "para one\nstill one\n\n\npara two\n\n")
    put("fuzz_prepare", "jsonl_gz", "gz eos", gzip.compress(jsonl.encode(), mtime=0))
    put("fuzz_prepare", "text_gz", "text gz blank", gzip.compress(b"a b c\n\nd e f\n", mtime=0))


def seeds_config():
    cfg = os.path.join(ROOT, "configs")
    base = read(os.path.join(cfg, "pretrain_gpt_base.yaml"))
    tiny = read(os.path.join(cfg, "gpt2-tiny.yaml")).replace(b"./pretrain_gpt_base.yaml", b"./base1.yaml")
    en = read(os.path.join(cfg, "gpt2-en.yaml")).replace(b"./pretrain_gpt_base.yaml", b"./base1.yaml")
    put("fuzz_yaml", "tiny", tiny, base, b"", "Engine.max_steps=10\nDistributed.dp_degree=2")
    put("fuzz_yaml", "en", en, base)
    put("fuzz_yaml", "sharding", read(os.path.join(cfg, "sharding8_stage2.yaml")).replace(
        b"./gpt2-tiny.yaml", b"./base1.yaml"), tiny.replace(b"./base1.yaml", b"./base2.yaml"), base)
    put("fuzz_yaml", "chain", "_base_: ./base1.yaml\nModel:\n  hidden_size: 32\n",
        "_base_: base2.yaml\nGlobal:\n  seed: 3\nModel:\n  _inherited_: False\n  num_layers: 1\n",
        "Global:\n  global_batch_size: 8\nEngine:\n  max_steps: 5\n  mix_precision:\n    enable: yes\n",
        "Optimizer.lr.max_lr=1e-4\nData.Train.dataset.split=[949, 50, 1]")
    put("fuzz_yaml", "cycle", "_base_: ./base1.yaml\n", "_base_: ./main.yaml\n", b"")
    put("fuzz_yaml", "anchors", "Model: &m {hidden_size: 64, num_layers: 2}\nGlobal: {micro_batch_size: 2}\n"
        "Optimizer:\n  lr: {max_lr: 1.0e-3, min_lr: 1e-5}\n")
    put("fuzz_flags", "seeds", "--model_name_or_path\ngpt2-tiny\n--input_dir\n./data\n--max_seq_len\n64\n"
        "--micro_batch_size\n8\n--global_batch_size\n32\n--max_lr\n0.00015\n--min_lr\n0.00001\n--max_steps\n500\n"
        "--decay_steps\n320\n--weight_decay\n0.01\n--warmup_rate\n0.01\n--grad_clip\n1.0\n--logging_freq\n1")
    put("fuzz_flags", "sharding", "--model_name_or_path=gpt2-tiny\n--sharding_degree=2\n--sharding_stage=3\n"
        "--dp_degree\n2\n-o\nEngine.save_load.save_steps=5\n--use_amp\ntrue\n--keep_last\n2")
    put("fuzz_flags", "config_file", "-c\nconfigs/gpt2-tiny.yaml\n-o\nModel.hidden_dropout_prob=0.1\n--max_steps\n3")
    put("fuzz_flags", "typo", "--max_step\n3\n--dp-degree\n2")


def main():
    if not os.access(LLM4D, os.X_OK):
        sys.exit(f"make_seeds.py: {LLM4D} is not built; build first or pass the build directory")
    shutil.rmtree(OUT, ignore_errors=True)
    tmp = tempfile.mkdtemp()
    try:
        seeds_npy()
        seeds_npz()
        seeds_prepare_outputs(tmp)
        seeds_safetensors()
        seeds_ckpt(tmp)
        seeds_tokenizer()
        seeds_prepare()
        seeds_config()
    finally:
        shutil.rmtree(tmp)
    for d in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, d))
        size = sum(os.path.getsize(os.path.join(OUT, d, f)) for f in files)
        print(f"fuzz/corpus/{d}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
