"""PyTorch reference for the Llama family's kernels (tests/test_kernels_llama.c writes the cases, runs this).

The C test writes, per case, its inputs and the outputs of the cpu and ref backends (raw float32 files) and a line
in cases.txt: `rmsnorm NAME N C EPS`, `rope NAME N NH HS LD T TOK0 THETA`, `swiglu NAME N F` or
`attn NAME B T NH NKV HS`. Here each is recomputed in float64 from the definitions, independently of the C code:
  - RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w (Debian's torch 1.13 has no F.rms_norm), gradients by autograd;
  - RoPE: per head, z = x[:HS/2] + j x[HS/2:] times e^{j pos theta^(-2i/HS)} (torch.polar), out = [Re z, Im z],
    pos = (tok0 + row) % T, the input gradient by autograd through the complex product; the elements of a row past
    its NH heads are not part of it;
  - SwiGLU: gate, up = the two halves of each row; out = F.silu(gate) * up, gradients by autograd;
  - grouped-query causal attention: each qkv row is [Q of NH heads, K of NKV heads, V of NKV heads] (HS each); K and
    V are expanded to NH heads with repeat_interleave(NH // NKV) (Hugging Face's repeat_kv: query head h reads kv
    head h // (NH // NKV)), scores q.k / sqrt(HS) masked above the diagonal, out = softmax(scores) v, lse =
    logsumexp of the masked scores; dq, dk, dv by autograd through the expansion (so a kv head's gradient sums its
    group's), each compared on its own scale.
Each backend's output must be within 1e-5 of the reference, normwise (max|a-b| / max|b|), as the C tests compare.
Run with Debian's python3 (python3-torch). Prints one line per check, then `N passed, M failed`; exit 1 on a failure.
"""
import sys

import numpy as np

TOL = 1e-5
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # the oracle is missing: every check fails, saying why
    check(False, f"import torch: {e}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1)

torch.set_num_threads(2)
d = sys.argv[1]


def load(name, t, shape):
    a = np.fromfile(f"{d}/{name}.{t}.f32", dtype=np.float32)
    return torch.tensor(a.reshape(shape).astype(np.float64))


def compare(what, got, want):
    err = (got - want).abs().max().item()
    den = want.abs().max().item()
    rel = err / den if den > 0 else err
    check(rel <= TOL and np.isfinite(rel), f"{what}: rel err {rel:.2e} (tol {TOL:.0e})")


for line in open(f"{d}/cases.txt"):
    f = line.split()
    kind, name = f[0], f[1]
    if kind == "rmsnorm":
        N, C, eps = int(f[2]), int(f[3]), float(f[4])
        x = load(name, "x", (N, C)).requires_grad_()
        w = load(name, "w", (C,)).requires_grad_()
        dy = load(name, "dy", (N, C))
        # eps as the kernels received it: an fp32 number
        eps = float(np.float32(eps))
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        y = x * rstd * w
        y.backward(dy)
        for side in ("cpu", "ref"):
            compare(f"{name} {side} forward", load(name, f"{side}_out", (N, C)), y.detach())
            compare(f"{name} {side} rstd", load(name, f"{side}_rstd", (N,)), rstd.detach()[:, 0])
            compare(f"{name} {side} dinp", load(name, f"{side}_dx", (N, C)), x.grad)
            compare(f"{name} {side} dw", load(name, f"{side}_dw", (C,)), w.grad)
    elif kind == "rope":
        N, NH, HS, ld, T, tok0 = (int(v) for v in f[2:8])
        theta = float(f[8])
        half, width = HS // 2, NH * HS
        xa = load(name, "x", (N, ld))
        x = xa[:, :width].reshape(N, NH, HS).clone().requires_grad_()
        dy = load(name, "dy", (N, ld))[:, :width].reshape(N, NH, HS)
        pos = torch.tensor([(tok0 + r) % T for r in range(N)], dtype=torch.float64)
        freq = float(np.float32(theta)) ** (-2.0 * torch.arange(half, dtype=torch.float64) / HS)
        rot = torch.polar(torch.ones(N, half, dtype=torch.float64), pos[:, None] * freq[None, :])  # e^{j angle}
        z = torch.complex(x[..., :half], x[..., half:]) * rot[:, None, :]
        y = torch.cat([z.real, z.imag], dim=-1)
        y.backward(dy)
        for side in ("cpu", "ref"):
            o = load(name, f"{side}_out", (N, ld))[:, :width].reshape(N, NH, HS)
            compare(f"{name} {side} forward", o, y.detach())
            g = load(name, f"{side}_dx", (N, ld))[:, :width].reshape(N, NH, HS)
            compare(f"{name} {side} backward", g, x.grad)
    elif kind == "swiglu":
        N, Fd = int(f[2]), int(f[3])
        x = load(name, "x", (N, 2 * Fd)).requires_grad_()
        dy = load(name, "dy", (N, Fd))
        gate, up = x[:, :Fd], x[:, Fd:]
        y = F.silu(gate) * up
        y.backward(dy)
        for side in ("cpu", "ref"):
            compare(f"{name} {side} forward", load(name, f"{side}_out", (N, Fd)), y.detach())
            g = load(name, f"{side}_dx", (N, 2 * Fd))
            compare(f"{name} {side} backward", g, x.grad)
            # the gates' gradients alone, on their own scale (they can be much smaller than the up ones)
            compare(f"{name} {side} backward, gate part", g[:, :Fd], x.grad[:, :Fd])
    elif kind == "attn":
        B, T, NH, NKV, HS = (int(v) for v in f[2:7])
        C, Ckv, grp = NH * HS, NKV * HS, NH // NKV
        qkv = load(name, "qkv", (B, T, C + 2 * Ckv))
        q = qkv[..., :C].reshape(B, T, NH, HS).transpose(1, 2).clone().requires_grad_()
        k = qkv[..., C:C + Ckv].reshape(B, T, NKV, HS).transpose(1, 2).clone().requires_grad_()
        v = qkv[..., C + Ckv:].reshape(B, T, NKV, HS).transpose(1, 2).clone().requires_grad_()
        dy = load(name, "dy", (B, T, NH, HS)).transpose(1, 2)
        ke, ve = k.repeat_interleave(grp, dim=1), v.repeat_interleave(grp, dim=1)
        sc = q @ ke.transpose(-1, -2) / HS ** 0.5
        sc = sc.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        lse = torch.logsumexp(sc, dim=-1)
        y = torch.softmax(sc, dim=-1) @ ve
        y.backward(dy)
        for side in ("cpu", "ref"):
            compare(f"{name} {side} forward", load(name, f"{side}_out", (B, T, NH, HS)).transpose(1, 2), y.detach())
            compare(f"{name} {side} lse", load(name, f"{side}_lse", (B, NH, T)), lse.detach())
            g = load(name, f"{side}_dqkv", (B, T, C + 2 * Ckv))
            compare(f"{name} {side} dq", g[..., :C].reshape(B, T, NH, HS).transpose(1, 2), q.grad)
            compare(f"{name} {side} dk", g[..., C:C + Ckv].reshape(B, T, NKV, HS).transpose(1, 2), k.grad)
            compare(f"{name} {side} dv", g[..., C + Ckv:].reshape(B, T, NKV, HS).transpose(1, 2), v.grad)
    else:
        check(False, f"unknown case kind {kind!r}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
