"""hf_gpt2_ref.py — the PyTorch side of tests/test_convert.sh (Debian's /usr/bin/python3 with python3-torch).

An exported Hugging Face GPT-2 directory is read WITHOUT transformers or the safetensors package (neither is
installed): the safetensors file is parsed by hand (8-byte header length, JSON header, raw little-endian data) and
the model is a GPT-2 written here with transformers' GPT2LMHeadModel semantics:
  Conv1D: y = x @ W + b with W stored [in, out]; c_attn's output columns are q, k, v; heads split the columns;
  causal softmax(q k^T / sqrt(head size)); gelu_new (tanh approximation); pre-LayerNorm blocks with
  layer_norm_epsilon; final ln_f; logits = h @ wte^T (tied head).

Subcommands:
  check HF_DIR IDS LOGITS       run the model on the ids (text file of integers) and compare with llm4d's logits
                                (raw float32 [rows, vocab_size], rows = positions 0 .. rows-1): max |diff| / max |ref|
                                must be <= 1e-4; also checks config.json and the file's layout and metadata
  same CKPT_A.safetensors CKPT_B.safetensors
                                every tensor equal bit for bit (same names, shapes, dtypes)
  hubify HF_DIR OUT_DIR MODE    rewrite an exported directory the ways other tools write GPT-2:
                                MODE hub: names without "transformer.", attn.bias / attn.masked_bias buffers, a stored
                                lm_head.weight, tensors in another order; MODE sharded: two files and an index;
                                MODE badact / badshape / missing / untied / pytorch: broken variants
"""
import json
import math
import os
import struct
import sys

import numpy as np

torch = None  # imported by `check` only: the other subcommands do not need its start-up time

NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "u1"}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n].decode("utf-8"))
    meta = hdr.pop("__metadata__", {})
    data = b[8 + n:]
    out = {}
    for name, e in hdr.items():
        s, t = e["data_offsets"]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(data[s:t], "<u2").astype("<u4") << 16).view("<f4")
        else:
            a = np.frombuffer(data[s:t], NP[e["dtype"]])
        out[name] = (e["dtype"], a.reshape(e["shape"]))
    return out, meta, n


def write_st(path, tensors, meta=None):
    """tensors: list of (name, dtype string, numpy array) in the order to write; an unaligned, unpadded layout is
    fine for the format (llm4d's reader must not depend on its own writer's choices)."""
    hdr, off, blobs = {}, 0, []
    for name, dt, a in tensors:
        raw = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    if meta is not None:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


class GPT2:
    def __init__(self, cfg, w):
        self.cfg = cfg
        self.w = {k: torch.from_numpy(np.array(v[1], dtype=np.float32)) for k, v in w.items()}

    def p(self, name):
        return self.w["transformer." + name]

    def ln(self, x, pre):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), self.p(pre + ".weight"), self.p(pre + ".bias"),
                                              self.cfg["layer_norm_epsilon"])

    def conv1d(self, x, pre):
        return x @ self.p(pre + ".weight") + self.p(pre + ".bias")

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def __call__(self, ids):
        cfg = self.cfg
        T, C, H = len(ids), cfg["n_embd"], cfg["n_head"]
        hs = C // H
        x = self.p("wte.weight")[torch.tensor(ids)] + self.p("wpe.weight")[:T]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for l in range(cfg["n_layer"]):
            pre = "h.%d." % l
            a = self.conv1d(self.ln(x, pre + "ln_1"), pre + "attn.c_attn")
            q, k, v = a.split(C, dim=1)
            q, k, v = (t.view(T, H, hs).transpose(0, 1) for t in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(0, 1).reshape(T, C)
            x = x + self.conv1d(y, pre + "attn.c_proj")
            m = self.gelu_new(self.conv1d(self.ln(x, pre + "ln_2"), pre + "mlp.c_fc"))
            x = x + self.conv1d(m, pre + "mlp.c_proj")
        x = self.ln(x, "ln_f")
        return x @ self.p("wte.weight").T


def report(ok, what, detail=""):
    print(("PASS " if ok else "FAIL ") + what + (": " + detail if detail else ""))
    return ok


def cmd_check(hf_dir, ids_path, logits_path):
    global torch
    import torch as _torch
    torch = _torch
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    w, meta, hlen = read_st(os.path.join(hf_dir, "model.safetensors"))
    ok = True
    want_cfg = {"model_type": "gpt2", "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
                "tie_word_embeddings": True, "layer_norm_epsilon": 1e-5, "scale_attn_weights": True}
    bad = {k: cfg.get(k) for k, v in want_cfg.items() if cfg.get(k) != v}
    ok &= report(not bad, "config.json has GPT2Config's fields for llm4d's GPT", str(bad) if bad else
                 "vocab %d, n_embd %d, n_layer %d, n_head %d, n_inner %d, n_positions %d" % (
                     cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_inner"],
                     cfg["n_positions"]))
    ok &= report(meta.get("format") == "pt" and hlen % 8 == 0, "model.safetensors has format pt, aligned header",
                 str(meta))
    C, V, F, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_inner"], cfg["n_layer"]
    shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [cfg["n_positions"], C],
              "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for l in range(L):
        pre = "transformer.h.%d." % l
        shapes.update({pre + "ln_1.weight": [C], pre + "ln_1.bias": [C], pre + "ln_2.weight": [C],
                       pre + "ln_2.bias": [C], pre + "attn.c_attn.weight": [C, 3 * C],
                       pre + "attn.c_attn.bias": [3 * C],
                       pre + "attn.c_proj.weight": [C, C], pre + "attn.c_proj.bias": [C],
                       pre + "mlp.c_fc.weight": [C, F], pre + "mlp.c_fc.bias": [F],
                       pre + "mlp.c_proj.weight": [F, C], pre + "mlp.c_proj.bias": [C]})
    got = {k: list(v[1].shape) for k, v in w.items()}
    dts = {v[0] for v in w.values()}
    diff = {k: (got.get(k), shapes.get(k)) for k in set(got) | set(shapes) if got.get(k) != shapes.get(k)}
    ok &= report(not diff and dts == {"F32"},
                 "tensor names and shapes are GPT2LMHeadModel's (Conv1D [in, out], wte unpadded, no lm_head)",
                 "%d tensors" % len(got) if not diff else "got vs want: " + str(diff)[:300])
    ids = [int(t) for t in open(ids_path).read().split()]
    ref = GPT2(cfg, w)(ids).double().numpy()
    mine = np.fromfile(logits_path, "<f4").astype(np.float64)
    rows = mine.size // V
    ok &= report(mine.size == rows * V and rows == len(ids) - 1,
                 "llm4d dumped one row of %d logits per position but the last" % V,
                 "%d values, %d ids" % (mine.size, len(ids)))
    mine = mine.reshape(rows, V)
    d = np.abs(mine - ref[:rows]).max() / np.abs(ref[:rows]).max()
    ok &= report(d <= 1e-4, "llm4d's logits equal the PyTorch GPT-2's at all %d positions (<= 1e-4 relative)" % rows,
                 "max |diff| / max |logit| = %.3e (max |logit| %.3f)" % (d, np.abs(ref).max()))
    # the check must be able to fail: the same model with c_attn's q and k swapped gives other logits
    w2 = dict(w)
    name = "transformer.h.0.attn.c_attn.weight"
    qa, ka, va = np.split(w[name][1], 3, axis=1)
    w2[name] = ("F32", np.concatenate([ka, qa, va], axis=1))
    d2 = np.abs(GPT2(cfg, w2)(ids).double().numpy()[:rows] - mine).max() / np.abs(ref[:rows]).max()
    ok &= report(d2 > 1e-3, "a wrong layout (q and k swapped) would be caught", "its error %.3e" % d2)
    return ok


def cmd_same(a, b):
    wa, _, _ = read_st(a)
    wb, _, _ = read_st(b)
    diff = [k for k in set(wa) | set(wb) if k not in wa or k not in wb or wa[k][0] != wb[k][0] or
            wa[k][1].shape != wb[k][1].shape or wa[k][1].tobytes() != wb[k][1].tobytes()]
    return report(not diff and len(wa) > 0, "the %d tensors are equal bit for bit" % len(wa),
                  "differing: %s" % sorted(diff)[:5] if diff else "")


def cmd_hubify(src, dst, mode):
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    w, _, _ = read_st(os.path.join(src, "model.safetensors"))
    T = cfg["n_positions"]
    items = [(k, v[0], v[1]) for k, v in w.items()]
    if mode in ("hub", "untied"):
        # as the Hub's gpt2: no "transformer." prefix, the causal-mask buffers, reversed order, a stored head
        items = [(k[len("transformer."):], dt, a) for k, dt, a in items][::-1]
        for l in range(cfg["n_layer"]):
            items.append(("h.%d.attn.bias" % l, "F32", np.tril(np.ones((1, 1, T, T), np.float32))))
            items.append(("h.%d.attn.masked_bias" % l, "F32", np.array(-1e4, np.float32)))
        head = w["transformer.wte.weight"][1].copy()
        if mode == "untied":
            head[0, 0] += 1.0
        items.append(("lm_head.weight", "F32", head))
        write_st(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    elif mode == "sharded":
        half = len(items) // 2
        wm = {}
        for i, part in enumerate((items[:half], items[half:])):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            write_st(os.path.join(dst, fn), part, {"format": "pt"})
            wm.update({k: fn for k, _, _ in part})
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm},
                  open(os.path.join(dst, "model.safetensors.index.json"), "w"))
    elif mode == "badact":
        cfg["activation_function"] = "relu"
        write_st(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    elif mode == "badshape":
        cfg["n_inner"] = cfg["n_inner"] * 2
        write_st(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    elif mode == "missing":
        items = [t for t in items if t[0] != "transformer.h.1.mlp.c_fc.bias"]
        write_st(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    elif mode == "pytorch":
        open(os.path.join(dst, "pytorch_model.bin"), "wb").write(b"not read")
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    return True


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    fn = {"check": cmd_check, "same": cmd_same, "hubify": cmd_hubify}[cmd]
    sys.exit(0 if fn(*args) else 1)
