"""Hugging Face's LlamaForCausalLM forward in PyTorch, written from its definition (tests/torch_ref.py,
tests/hf_llama_ref.py import it): RMSNorm, rotary positions with rotate_half, grouped-query attention by
repeat_interleave of the key/value heads, SwiGLU, optional biases (attention_bias on q/k/v/o, mlp_bias on
gate/up/down), the LM head lm_head.weight or, tied, the embedding. P maps Hugging Face Llama's tensor names to
tensors in nn.Linear's [out, in] layout; nothing of llm4d's C code is shared.
"""
import math

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotary(x, theta):
    """Hugging Face Llama's rotary embedding of x [B, H, T, HS]: x cos + rotate_half(x) sin."""
    T, HS = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).float(), torch.cat([ang.sin(), ang.sin()], -1).float()
    x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def linear(P, name, y):
    """y W^T (+ b when the model stores name's bias)."""
    return F.linear(y, P[name + ".weight"], P.get(name + ".bias"))


def llama_forward(P, tokens, L, NH, NKV, eps, theta):
    """Logits [B, T, V] of LlamaForCausalLM for tokens [B, T]."""
    B, T = tokens.shape
    x = P["model.embed_tokens.weight"][tokens]
    C = x.shape[-1]
    HS = C // NH
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = f"model.layers.{l}."
        y = rms_norm(x, P[h + "input_layernorm.weight"], eps)
        q = linear(P, h + "self_attn.q_proj", y).view(B, T, NH, HS).transpose(1, 2)
        k = linear(P, h + "self_attn.k_proj", y).view(B, T, NKV, HS).transpose(1, 2)
        v = linear(P, h + "self_attn.v_proj", y).view(B, T, NKV, HS).transpose(1, 2)
        q, k = rotary(q, theta), rotary(k, theta)
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(P, h + "self_attn.o_proj", y)
        y = rms_norm(x, P[h + "post_attention_layernorm.weight"], eps)
        y = F.silu(linear(P, h + "mlp.gate_proj", y)) * linear(P, h + "mlp.up_proj", y)
        x = x + linear(P, h + "mlp.down_proj", y)
    x = rms_norm(x, P["model.norm.weight"], eps)
    return x @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).t()
