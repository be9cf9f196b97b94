"""PyTorch reference for `llm4d generate` on Llama-family checkpoints (tests/test_generate_cli.sh).

    llama_generate_ref.py STEP_DIR IDS_FILE N_PROMPT LOGITS_FILE TOL [greedy]

STEP_DIR is an llm4d checkpoint step (meta.json + model.safetensors: Hugging Face Llama names, float32, linear
weights [out, in]); IDS_FILE holds the ids `llm4d generate --print_ids` printed (N_PROMPT of the prompt, then the
continuation);
LOGITS_FILE is its --dump_logits output, float32 [n - 1, vocab_size], row r the logits that predicted id r + 1.
The reference is Hugging Face's LlamaForCausalLM as tests/llama_ref.py writes it from its definition (the tests' one
PyTorch Llama, independent of llm4d's C code; the weights are the only thing shared), run here on the weights in
float64: RMSNorm, rotary positions with rotate_half at theta, SwiGLU, grouped-query attention by repeat_interleave
of the key/value heads, lm_head (or the embedding when tied). The whole sequence is recomputed at once, so the rows of the prompt
(fed in chunks by llm4d) and of every decode step (one position against the cache) are compared against a forward
without any cache. Checks: every row within TOL of the reference (max |a - b| / max |b| over the row, the C tests'
measure), and, greedy (decoding run with --temperature 0), each generated id is the reference's argmax wherever the
reference's two best logits are further apart than the tolerance could blur. Run with Debian's python3 (python3-torch).
Prints one line per check, then `N passed, M failed`; exit 1 on a failure.
"""
import json
import math
import os
import struct
import sys

import numpy as np

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
except Exception as e:  # the oracle is missing: the check fails, saying why
    check(False, f"import torch: {e}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1)

torch.set_num_threads(2)
step, ids_file, n_prompt, logits_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tol, greedy = float(sys.argv[5]), len(sys.argv) > 6 and sys.argv[6] == "greedy"
m = json.load(open(f"{step}/meta.json"))["model"]
V, C, L, NH = m["vocab_size"], m["hidden_size"], m["num_layers"], m["num_attention_heads"]
NKV, EPS, THETA = m.get("num_key_value_heads") or NH, m["norm_epsilon"], m["rope_theta"]
HS = C // NH


def load_safetensors(path):
    """The float32 tensors of a safetensors file (8-byte header length, JSON header, data), as float64."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw, dtype=np.float32, count=(b - a) // 4,
                                                   offset=8 + n + a).reshape(t["shape"]).astype(np.float64))
    return out


P = load_safetensors(f"{step}/model.safetensors")
ids = [int(x) for x in open(ids_file).read().split()]
T = len(ids)
got = np.fromfile(logits_file, dtype=np.float32)
check(got.size == (T - 1) * V, f"the dump holds {T - 1} rows of {V} logits ({got.size} values)")
got = got[:(T - 1) * V].reshape(-1, V)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import llama_forward  # noqa: E402  (the one PyTorch Llama of the tests: tests/llama_ref.py)

with torch.no_grad():
    ref = llama_forward(P, torch.tensor([ids]), L, NH, NKV, EPS, THETA)[0, :, :V].numpy()

n = min(len(got), T - 1)
errs = [np.abs(got[r] - ref[r]).max() / np.abs(ref[r]).max() for r in range(n)]
worst = max(errs) if errs else float("inf")
check(n == T - 1 and worst <= tol,
      f"{n} rows (NKV {NKV} of {NH} heads, theta {THETA:g}) within {tol:g} of LlamaForCausalLM's: worst {worst:.2e} "
      f"at row {int(np.argmax(errs)) if errs else -1}")
if greedy:
    bad, decided = [], 0
    for r in range(n_prompt - 1, n):
        top2 = np.sort(ref[r])[-2:]
        if top2[1] - top2[0] > 4 * tol * np.abs(ref[r]).max():
            decided += 1
            if int(np.argmax(ref[r])) != ids[r + 1]:
                bad.append(r + 1)
    check(not bad and decided > 0, f"the {T - n_prompt} greedy ids are the reference's argmax ({decided} decided by "
          f"a clear gap; differing at {bad[:5]})")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
