"""PyTorch reference for llm4d's single-process GPT and Llama (tests/test_torch_parity.sh).

Builds the same model in PyTorch from the exact initial weights llm4d dumped (--debug_dump), feeds it the same
batches, and compares: the logits of step 1's first micro-batch, the step-1 loss, every parameter's step-1
gradient, and the losses of every step of AdamW training with Paddle's global-norm clipping and the warmup+cosine
schedule. The models are written here from their definitions, independently of llm4d's C code: GPT-2's, and
Hugging Face's LlamaForCausalLM (RMSNorm, rotary positions with rotate_half, SwiGLU, grouped-query attention by
repeat_interleave of the key/value heads, no biases, untied lm_head: tests/llama_ref.py); only the weight layout
(linear weights [out, in], c_attn rows = Q, K, V) and the description (params.json) are shared.
Run with Debian's python3 (python3-torch, python3-numpy). Prints one line per check, then `N passed, M failed`.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

torch.set_num_threads(2)
dump, metrics_path = sys.argv[1], sys.argv[2]
meta = json.load(open(f"{dump}/params.json"))
V, Vp, C = meta["vocab_size"], meta["padded_vocab_size"], meta["hidden_size"]
L, NH, T = meta["num_layers"], meta["num_attention_heads"], meta["max_seq_len"]
mb, G, steps = meta["micro_batch_size"], meta["global_batch_size"], meta["max_steps"]
flat = np.fromfile(f"{dump}/params_init.bin", dtype=np.float32)
assert flat.size == meta["total"], (flat.size, meta["total"])

params = {}
for p in meta["params"]:
    a = flat[p["offset"]:p["offset"] + p["numel"]].reshape([s for s in p["shape"] if s] or [p["numel"]])
    params[p["name"]] = torch.tensor(a.copy(), requires_grad=True)
decay = {p["name"]: p["decay"] for p in meta["params"]}
LLAMA = meta.get("llama", 0)
NKV = meta.get("num_key_value_heads", NH)
EPS, THETA = meta.get("norm_epsilon", 1e-5), meta.get("rope_theta", 10000.0)


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def llama_forward(tokens):
    """LlamaForCausalLM's forward, written from its definition (tests/llama_ref.py)."""
    return llama_ref.llama_forward(params, tokens, L, NH, NKV, EPS, THETA)


def forward(tokens):
    if LLAMA:
        return llama_forward(tokens)
    B = tokens.shape[0]
    P = params
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = f"transformer.h.{l}."
        y = F.layer_norm(x, (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], eps=1e-5)
        qkv = F.linear(y, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, C // NH).transpose(1, 2)
        k = k.view(B, T, NH, C // NH).transpose(1, 2)
        v = v.view(B, T, NH, C // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"])
        y = F.layer_norm(x, (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], eps=1e-5)
        y = gelu(F.linear(y, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"]))
        x = x + F.linear(y, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps=1e-5)
    return x @ P["transformer.wte.weight"].t()  # [B, T, Vp]; the padded columns are dropped before the softmax


def load_batch(step):
    raw = np.fromfile(f"{dump}/batch_step{step}.bin", dtype=np.int32)
    n = G * T
    tokens = torch.tensor(raw[:n].reshape(G, T).astype(np.int64))
    targets = torch.tensor(raw[n:2 * n].reshape(G, T).astype(np.int64))
    mask = torch.tensor(raw[2 * n:3 * n].view(np.float32).reshape(G, T))
    return tokens, targets, mask


def step_loss(tokens, targets, mask):
    """Global-batch loss = sum of masked token losses / unmasked tokens, accumulated micro-batch by micro-batch."""
    total = 0.0
    count = mask.sum()
    for k in range(0, G, mb):
        logits = forward(tokens[k:k + mb])[..., :V]
        ce = F.cross_entropy(logits.reshape(-1, V), targets[k:k + mb].reshape(-1), reduction="none")
        total = total + (ce * mask[k:k + mb].reshape(-1)).sum() / count
    return total


passed = failed = 0


def check(name, ok, detail):
    global passed, failed
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    if ok:
        passed += 1
    else:
        failed += 1


# 1. logits of step 1's first micro-batch
tokens, targets, mask = load_batch(1)
with torch.no_grad():
    ref_logits = forward(tokens[:mb]).reshape(-1, Vp)[:, :V]
ours = torch.tensor(np.fromfile(f"{dump}/logits_step1.bin", dtype=np.float32).reshape(-1, Vp)[:, :V])
rel = ((ours - ref_logits).abs().max() / ref_logits.abs().max()).item()
check("logits", rel <= 1e-4, f"max |diff| / max |ref| = {rel:.3e} (<= 1e-4)")

# 2. step-1 loss and gradients
loss = step_loss(tokens, targets, mask)
loss.backward()
metrics = [json.loads(line) for line in open(metrics_path)]
d = abs(metrics[0]["loss"] - loss.item())
check("loss step 1", d <= 1e-5, f"llm4d {metrics[0]['loss']:.9f} torch {loss.item():.9f} |diff| {d:.2e}")
grads = np.fromfile(f"{dump}/grads_step1.bin", dtype=np.float32)
worst = ("", 0.0)
for p in meta["params"]:
    g_ours = torch.tensor(grads[p["offset"]:p["offset"] + p["numel"]]).reshape(params[p["name"]].shape)
    g_ref = params[p["name"]].grad
    r = ((g_ours - g_ref).norm() / max(g_ref.norm().item(), 1e-12)).item()
    if r > worst[1]:
        worst = (p["name"], r)
    if r > 1e-3:
        check(f"grad {p['name']}", False, f"|diff| / |ref| = {r:.3e} (> 1e-3)")
check("gradients", worst[1] <= 1e-3, f"worst |diff|/|ref| {worst[1]:.3e} at {worst[0]} over {len(meta['params'])} tensors")

# 3. training: AdamW (decoupled decay on `decay` tensors), Paddle's global-norm clip, warmup + cosine
for p in params.values():
    p.grad = None
groups = [{"params": [params[n] for n in params if decay[n]], "weight_decay": meta["weight_decay"]},
          {"params": [params[n] for n in params if not decay[n]], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=0.0, betas=(meta["beta1"], meta["beta2"]), eps=meta["epsilon"])
warmup = meta["warmup_rate"] * meta["decay_steps"]


def lr_at(t):
    if warmup > 0 and t <= warmup:
        return meta["max_lr"] * t / warmup
    if t > meta["decay_steps"]:
        return meta["min_lr"]
    ratio = (t - warmup) / (meta["decay_steps"] - warmup)
    return meta["min_lr"] + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (meta["max_lr"] - meta["min_lr"])


worst_loss = 0.0
for step in range(1, steps + 1):
    tokens, targets, mask = load_batch(step)
    opt.zero_grad()
    loss = step_loss(tokens, targets, mask)
    loss.backward()
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values()))
    clip = meta["grad_clip"]
    if clip > 0:
        scale = clip / max(norm, clip)
        for p in params.values():
            p.grad.mul_(scale)
    for g in opt.param_groups:
        g["lr"] = lr_at(step)
    opt.step()
    d = abs(metrics[step - 1]["loss"] - loss.item())
    worst_loss = max(worst_loss, d)
    gn = abs(metrics[step - 1]["grad_norm"] - norm) / norm
    print(f"     step {step}: llm4d {metrics[step - 1]['loss']:.9f} torch {loss.item():.9f} |diff| {d:.2e} "
          f"grad_norm rel diff {gn:.1e} lr {lr_at(step):.3e}")
    if gn > 1e-3:
        check(f"grad norm step {step}", False, f"relative diff {gn:.2e}")
check(f"losses over {steps} AdamW steps", worst_loss <= 1e-5, f"max |diff| {worst_loss:.2e} (<= 1e-5)")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
