"""PyTorch CPU peer for bench/bench_train.sh: the same GPT (pre-LN, tanh GELU, tied LM head, padded vocabulary
masked out, dropout 0.1) trained with AdamW in fp32 (or bf16 autocast with --bf16). Prints the median step time of
the measured steps as `torch_step_sec: X` and peak RSS as `torch_peak_rss_mib: Y`.
Usage: python3 torch_gpt_step.py --layers 12 --hidden 768 --heads 12 --B 4 --T 64 --steps 4 --threads 2"""
import argparse
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768)
ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--vocab", type=int, default=50257)
ap.add_argument("--B", type=int, default=4)
ap.add_argument("--T", type=int, default=64)
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--bf16", action="store_true")
ap.add_argument("--accum", type=int, default=1, help="split B into this many micro-batches (same math, less memory)")
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
Vp = (a.vocab + 127) // 128 * 128
C, NH = a.hidden, a.heads


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.drop(self.attn_proj(y))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(1024 if a.T <= 1024 else a.T, C)
        self.h = nn.ModuleList(Block() for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(C)
        self.drop = nn.Dropout(0.1)

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for b in self.h:
            x = b(x)
        logits = (self.ln_f(x) @ self.wte.weight.t())[..., : a.vocab].float()
        return F.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
idx = torch.randint(0, a.vocab, (a.B, a.T))
tgt = torch.randint(0, a.vocab, (a.B, a.T))
times = []
for s in range(a.steps + 1):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    mb = a.B // a.accum
    for k in range(a.accum):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = model(idx[k * mb:(k + 1) * mb], tgt[k * mb:(k + 1) * mb]) / a.accum
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if s > 0:  # the first step warms up allocators and kernels
        times.append(time.perf_counter() - t0)
print(f"torch_step_sec: {statistics.median(times):.6f}")
print(f"torch_peak_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
