"""PyTorch CPU peer for bench/bench_train.sh and bench/bench_llama.sh: the same GPT (pre-LN, tanh GELU, tied LM
head, padded vocabulary masked out, dropout 0.1), or with --llama the same Llama-style decoder (RMSNorm, rotary
positions, SwiGLU of --ffn, --kv_heads key/value heads, no biases, untied LM head, no dropout, as Hugging Face's
LlamaForCausalLM), trained with AdamW in fp32 (or bf16 autocast with --bf16). Prints the median step time of the
measured steps as `torch_step_sec: X` and peak RSS as `torch_peak_rss_mib: Y`.
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
ap.add_argument("--llama", action="store_true", help="the Llama-style decoder instead of GPT-2")
ap.add_argument("--dropout", type=float, default=0.1, help="GPT-2's dropout (the Llama model has none)")
ap.add_argument("--ffn", type=int, default=0, help="--llama: SwiGLU width (0: 8/3 hidden rounded up to 64)")
ap.add_argument("--kv_heads", type=int, default=0, help="--llama: key/value heads (0: --heads)")
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
        self.drop = nn.Dropout(a.dropout)

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
        self.drop = nn.Dropout(a.dropout)

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for b in self.h:
            x = b(x)
        logits = (self.ln_f(x) @ self.wte.weight.t())[..., : a.vocab].float()
        return F.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1))


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rotary(x, T):
    HS = x.shape[-1]
    ang = torch.arange(T, dtype=torch.float32)[:, None] / (10000.0 ** (torch.arange(0, HS, 2).float() / HS))
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., HS // 2:], x[..., :HS // 2]], -1) * sin


FF = a.ffn or (8 * C // 3 + 63) // 64 * 64
KV = a.kv_heads or NH


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        HS = C // NH
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.q, self.k, self.v = nn.Linear(C, C, bias=False), nn.Linear(C, KV * HS, bias=False), nn.Linear(
            C, KV * HS, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate, self.up, self.down = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False), nn.Linear(
            FF, C, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        HS = C // NH
        h = self.n1(x)
        q = rotary(self.q(h).view(B, T, NH, HS).transpose(1, 2), T)
        k = rotary(self.k(h).view(B, T, KV, HS).transpose(1, 2), T).repeat_interleave(NH // KV, dim=1)
        v = self.v(h).view(B, T, KV, HS).transpose(1, 2).repeat_interleave(NH // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = (att.masked_fill(~mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(y)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(Vp, C)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(a.layers))
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(C, Vp, bias=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for b in self.layers:
            x = b(x)
        logits = self.lm_head(self.norm(x))[..., : a.vocab].float()
        return F.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1))


model = Llama() if a.llama else GPT()
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
