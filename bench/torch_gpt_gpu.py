"""PyTorch GPU peer for bench/bench_gpu.sh: GPT-2 124M (pre-LN, tanh GELU, tied LM head over the padded vocabulary)
trained with fused AdamW under bf16 autocast, attention by F.scaled_dot_product_attention (causal), eager or
torch.compile. Prints `torch_step_sec: X` (median of the measured steps, after warm-up) and `torch_peak_mem_gib: Y`.
Exits 77 with a line saying why when there is no GPU.
Usage: python3 torch_gpt_gpu.py --B 16 --T 1024 --steps 10 [--compile] [--dropout 0.0]"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--hidden", type=int, default=768)
ap.add_argument("--heads", type=int, default=12)
ap.add_argument("--vocab", type=int, default=50257)
ap.add_argument("--B", type=int, default=16)
ap.add_argument("--T", type=int, default=1024)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--dropout", type=float, default=0.0)
ap.add_argument("--compile", action="store_true")
a = ap.parse_args()
if not torch.cuda.is_available():
    print("torch_gpt_gpu: no CUDA device for PyTorch here: nothing measured")
    sys.exit(77)
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
Vp = (a.vocab + 127) // 128 * 128
C, NH, P = a.hidden, a.heads, a.dropout


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=P if self.training else 0.0)
        x = x + F.dropout(self.attn_proj(y.transpose(1, 2).reshape(B, T, C)), P, self.training)
        return x + F.dropout(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")), P, self.training)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(max(1024, a.T), C)
        self.h = nn.ModuleList(Block() for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)), P, self.training)
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        logits[..., a.vocab:] = float("-inf")
        return F.cross_entropy(logits.float().view(-1, Vp), targets.view(-1))


dev = torch.device("cuda")
model = GPT().to(dev)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
step_fn = torch.compile(model) if a.compile else model
idx = torch.randint(0, a.vocab, (a.B, a.T), device=dev)
tgt = torch.randint(0, a.vocab, (a.B, a.T), device=dev)
times = []
t_compile = time.time()
for s in range(a.warmup + a.steps):
    torch.cuda.synchronize()
    t0 = time.time()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_fn(idx, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if s == 0 and a.compile:
        print(f"torch_compile_sec: {time.time() - t_compile:.1f}")
    if s >= a.warmup:
        times.append(time.time() - t0)
print(f"torch_step_sec: {statistics.median(times):.6f}")
print(f"torch_peak_mem_gib: {torch.cuda.max_memory_allocated() / 2**30:.2f}")
print(f"torch_device: {torch.cuda.get_device_name()} torch {torch.__version__}")
