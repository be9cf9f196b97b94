"""Hugging Face Llama directories for tests/test_convert_llama.sh, made and checked without transformers or
safetensors (not installed): the safetensors format by hand (an 8-byte little-endian header length, the JSON
header, the raw data), bf16 as the top half of fp32 (round to nearest even), the model by tests/llama_ref.py.

  make OUT [--kv N] [--tied] [--bias] [--vocab V] [--theta X] [--eps E] [--seed S] [--shards N] [--dtype BF16|F32]
        a random LlamaForCausalLM as save_pretrained writes it: config.json, model-0000k-of-0000N.safetensors and
        model.safetensors.index.json (one model.safetensors for --shards 1); a tied model stores no lm_head
  bad SRC OUT MODE      SRC with one thing llm4d must refuse (MODE: rope_scaling, abias, head_dim, missing, shape,
        act, mistral)
  same A B              every tensor of A equals B's as fp32, bit for bit, with the same names and shapes (A, B: a
        safetensors file, an HF directory, or an llm4d step directory: their *.safetensors files)
  export HF SRC         HF (an export) is what LlamaForCausalLM reads for the model SRC describes (an HF directory's
        config.json, or an llm4d step directory's meta.json): its config.json's keys equal SRC's, and its tensors
        are exactly the names and shapes that config implies
  forward HF DUMP METRICS  llm4d's step-1 logits (DUMP/logits_step1.bin, first micro-batch) and loss (METRICS)
        equal llama_ref's LlamaForCausalLM with HF's weights on DUMP's batch
Prints PASS/FAIL lines.
"""
import glob
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

fails = 0


def check(ok, msg):
    global fails
    print(("PASS " if ok else "FAIL ") + msg)
    fails += 0 if ok else 1


# ---- safetensors by hand ----

def to_bf16(a):
    """fp32 -> bf16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_st(path, tensors):
    """tensors: name -> (dtype string, shape, raw bytes)."""
    header, data, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dt, shape, raw = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        data.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(data))


def read_st_raw(path):
    b = open(path, "rb").read()
    n = int.from_bytes(b[:8], "little")
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], tuple(v["shape"]), b[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}


def as_f32(dt, shape, raw):
    if dt == "BF16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, {"F32": np.float32, "F16": np.float16, "F64": np.float64}[dt]).astype(
        np.float32).reshape(shape)


def st_files(p):
    if os.path.isfile(p):
        return [p]
    idx = os.path.join(p, "model.safetensors.index.json")
    if os.path.exists(idx):
        return [os.path.join(p, f) for f in sorted(set(json.load(open(idx))["weight_map"].values()))]
    return sorted(glob.glob(os.path.join(p, "model*.safetensors")))


def load(p):
    """name -> fp32 array over all of p's files."""
    out = {}
    for f in st_files(p):
        for k, (dt, shape, raw) in read_st_raw(f).items():
            assert k not in out, f"{k} twice"
            out[k] = as_f32(dt, shape, raw)
    return out


# ---- the model's tensors ----

def expected_shapes(cfg):
    """Hugging Face Llama's tensor names and shapes for config.json cfg."""
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    NH = cfg["num_attention_heads"]
    NKV, HS = cfg.get("num_key_value_heads", NH), C // NH
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, C)
    for l in range(cfg["num_hidden_layers"]):
        h = f"model.layers.{l}."
        lin = {"self_attn.q_proj": (NH * HS, C), "self_attn.k_proj": (NKV * HS, C), "self_attn.v_proj": (NKV * HS, C),
               "self_attn.o_proj": (C, NH * HS), "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C),
               "mlp.down_proj": (C, F)}
        for n, s in lin.items():
            out[h + n + ".weight"] = s
            if cfg.get("attention_bias" if n.startswith("self_attn") else "mlp_bias", False):
                out[h + n + ".bias"] = (s[0],)
        out[h + "input_layernorm.weight"] = (C,)
        out[h + "post_attention_layernorm.weight"] = (C,)
    return out


def make(out, args):
    opt = dict(kv=4, vocab=50257, theta=20000.0, eps=1e-5, seed=1, shards=2, dtype="BF16", layers=2)
    flags = set()
    i = 0
    while i < len(args):
        k = args[i].lstrip("-")
        if k in ("tied", "bias"):
            flags.add(k)
            i += 1
            continue
        opt[k] = type(opt[k])(args[i + 1])
        i += 2
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": opt["vocab"],
           "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": opt["layers"], "num_attention_heads": 4,
           "num_key_value_heads": opt["kv"], "max_position_embeddings": 256, "rms_norm_eps": opt["eps"],
           "rope_theta": opt["theta"], "rope_scaling": None, "hidden_act": "silu", "attention_bias": "bias" in flags,
           "mlp_bias": "bias" in flags, "attention_dropout": 0.0, "tie_word_embeddings": "tied" in flags,
           "initializer_range": 0.02, "bos_token_id": 50256, "eos_token_id": 50256, "pretraining_tp": 1,
           "torch_dtype": "bfloat16" if opt["dtype"] == "BF16" else "float32", "transformers_version": "4.44.0"}
    rng = np.random.default_rng(opt["seed"])
    tensors = {}
    for name, shape in expected_shapes(cfg).items():
        if name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(shape)
        else:  # logits of unit scale: a loss near ln(vocab), within float32's reach of 1e-5
            a = rng.standard_normal(shape) / math.sqrt(shape[1])
        a = a.astype(np.float32)
        raw = to_bf16(a).tobytes() if opt["dtype"] == "BF16" else a.tobytes()
        tensors[name] = (opt["dtype"], shape, raw)
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(f"{out}/config.json", "w"), indent=2)
    n = opt["shards"]
    if n == 1:
        write_st(f"{out}/model.safetensors", tensors)
        return
    names = sorted(tensors)
    per = -(-len(names) // n)
    wm = {}
    for k in range(n):
        fn = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        part = {m: tensors[m] for m in names[k * per:(k + 1) * per]}
        write_st(f"{out}/{fn}", part)
        wm.update({m: fn for m in part})
    total = sum(len(t[2]) for t in tensors.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": wm}, open(f"{out}/model.safetensors.index.json", "w"),
              indent=2)


def bad(src, out, mode):
    shutil.copytree(src, out)
    cfg = json.load(open(f"{out}/config.json"))
    if mode in ("missing", "shape"):
        victim = "model.layers.1.mlp.up_proj.weight" if mode == "missing" else "model.layers.0.self_attn.k_proj.weight"
        for f in st_files(out):
            t = read_st_raw(f)
            if victim in t:
                if mode == "missing":
                    del t[victim]
                else:
                    dt, shape, raw = t[victim]
                    t[victim] = (dt, (shape[0] // 2, shape[1]), raw[:len(raw) // 2])
                write_st(f, t)
        return
    cfg.update({"rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}} if mode == "rope_scaling"
               else {"attention_bias": True, "mlp_bias": False} if mode == "abias"
               else {"head_dim": 32} if mode == "head_dim"
               else {"hidden_act": "gelu"} if mode == "act"
               else {"model_type": "mistral", "sliding_window": 4096})
    json.dump(cfg, open(f"{out}/config.json", "w"), indent=2)


def same(a, b):
    A, B = load(a), load(b)
    check(sorted(A) == sorted(B), f"{a} and {b} hold the same {len(A)} tensor names"
          + ("" if sorted(A) == sorted(B) else f" (only in one: {sorted(set(A) ^ set(B))[:4]})"))
    diff = [k for k in A if k in B and (A[k].shape != B[k].shape or A[k].tobytes() != B[k].tobytes())]
    check(not diff, f"every tensor of {a} equals {b}'s bit for bit (as fp32){'' if not diff else ': not ' + diff[0]}")


def config_of_meta(m):
    """The config.json an llm4d checkpoint's meta.json model describes, in LlamaConfig's keys."""
    return {"vocab_size": m["vocab_size"], "hidden_size": m["hidden_size"], "intermediate_size": m["ffn_hidden_size"],
            "num_hidden_layers": m["num_layers"], "num_attention_heads": m["num_attention_heads"],
            "num_key_value_heads": m["num_key_value_heads"], "max_position_embeddings": m["max_position_embeddings"],
            "rms_norm_eps": m["norm_epsilon"], "rope_theta": m["rope_theta"], "hidden_act": "silu",
            "attention_bias": m["add_bias_linear"], "mlp_bias": m["add_bias_linear"],
            "tie_word_embeddings": m["tie_word_embeddings"], "eos_token_id": m["eos_token_id"], "model_type": "llama",
            "architectures": ["LlamaForCausalLM"]}


def export(hf, src):
    got = json.load(open(f"{hf}/config.json"))
    want = (json.load(open(f"{src}/config.json")) if os.path.exists(f"{src}/config.json")
            else config_of_meta(json.load(open(f"{src}/meta.json"))["model"]))
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "hidden_act",
            "attention_bias", "mlp_bias", "tie_word_embeddings", "eos_token_id", "model_type", "architectures"]
    bad_keys = [f"{k}: {got.get(k)} != {want.get(k)}" for k in keys if got.get(k) != want.get(k)]
    check(not bad_keys and got.get("rope_scaling") is None,
          f"{hf}/config.json has {src}'s {len(keys)} keys, no rope_scaling{'' if not bad_keys else ': ' + bad_keys[0]}")
    shapes = {k: tuple(v.shape) for k, v in load(hf).items()}
    exp = expected_shapes(want)
    wrong = sorted(set(shapes.items()) ^ set(exp.items()))
    check(not wrong, f"{hf}'s tensors are exactly the {len(exp)} names and shapes of LlamaForCausalLM for that "
          f"config{'' if not wrong else ': ' + str(wrong[:3])}")


def forward(hf, dump, metrics):
    import torch
    import torch.nn.functional as F
    import llama_ref
    torch.set_num_threads(2)
    cfg = json.load(open(f"{hf}/config.json"))
    meta = json.load(open(f"{dump}/params.json"))
    V, Vp, T = cfg["vocab_size"], meta["padded_vocab_size"], meta["max_seq_len"]
    mb, G = meta["micro_batch_size"], meta["global_batch_size"]
    P = {k: torch.tensor(v.copy()) for k, v in load(hf).items()}
    if cfg.get("tie_word_embeddings", False):
        P.pop("lm_head.weight", None)
    NH = cfg["num_attention_heads"]

    def fwd(tok):
        return llama_ref.llama_forward(P, tok, cfg["num_hidden_layers"], NH, cfg.get("num_key_value_heads", NH),
                                       cfg["rms_norm_eps"], cfg["rope_theta"])
    raw = np.fromfile(f"{dump}/batch_step1.bin", dtype=np.int32)
    n = G * T
    tokens = torch.tensor(raw[:n].reshape(G, T).astype(np.int64))
    targets = torch.tensor(raw[n:2 * n].reshape(G, T).astype(np.int64))
    mask = torch.tensor(raw[2 * n:3 * n].view(np.float32).reshape(G, T))
    with torch.no_grad():
        ref = fwd(tokens[:mb]).reshape(-1, V)
        ours = torch.tensor(np.fromfile(f"{dump}/logits_step1.bin", dtype=np.float32).reshape(-1, Vp)[:, :V])
        rel = ((ours - ref).abs().max() / ref.abs().max()).item()
        check(rel <= 1e-4, f"step-1 logits equal LlamaForCausalLM's: max |diff| / max |ref| = {rel:.2e} (<= 1e-4)")
        total = 0.0
        for k in range(0, G, mb):
            ce = F.cross_entropy(fwd(tokens[k:k + mb]).reshape(-1, V), targets[k:k + mb].reshape(-1), reduction="none")
            total += ((ce * mask[k:k + mb].reshape(-1)).sum() / mask.sum()).item()
    got = json.loads(open(metrics).readline())["loss"]
    check(abs(got - total) <= 1e-5, f"step-1 loss equals LlamaForCausalLM's: llm4d {got:.7f} torch {total:.7f} "
          f"|diff| {abs(got - total):.1e} (<= 1e-5)")


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(rest[0], rest[1:])
    elif cmd == "bad":
        bad(*rest)
    elif cmd == "same":
        same(*rest)
    elif cmd == "export":
        export(*rest)
    elif cmd == "forward":
        forward(*rest)
    sys.exit(1 if fails else 0)
