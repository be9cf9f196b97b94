#!/usr/bin/env python3
"""make_vocab.py — the small GPT-2-format vocabulary in fuzz/vocab/ (encoder.json, vocab.bpe) that the tokenizer and
prepare-data fuzzers load: GPT-2's 256-byte alphabet, 400 byte-pair merges learned from this repository's Markdown
files, and <|endoftext|>. It has the real files' format and structure (merges of merges, multi-byte UTF-8 tokens)
while being small enough to load at every fuzz input and independent of the npm package. Deterministic: run it again
after editing the Markdown and the output only changes if the text did.
Usage: fuzz/make_vocab.py [N_MERGES]"""
import collections, json, os, re, sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
n_merges = int(sys.argv[1]) if len(sys.argv) > 1 else 400

def bytes_to_unicode():  # GPT-2's encoder.py
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

b2u = bytes_to_unicode()
text = ""
for d in ["README.md", "docs/design.md", "docs/training.md", "data/README.md"]:
    p = os.path.join(root, d)
    if os.path.exists(p):
        text += open(p, encoding="utf-8").read()
# GPT-2's pre-tokenizer, with Python's \w classes standing in for \p{L} and \p{N}
pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")
words = collections.Counter(tuple(b2u[b] for b in w.encode("utf-8")) for w in pat.findall(text))
vocab = [b2u[b] for b in range(256)]
merges = []
for _ in range(n_merges):
    pairs = collections.Counter()
    for w, c in words.items():
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += c
    if not pairs:
        break
    best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]  # ties broken by the pair itself: deterministic
    merges.append(best)
    vocab.append(best[0] + best[1])
    nw = collections.Counter()
    for w, c in words.items():
        out, i = [], 0
        while i < len(w):
            if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                out.append(best[0] + best[1])
                i += 2
            else:
                out.append(w[i])
                i += 1
        nw[tuple(out)] += c
    words = nw
vocab.append("<|endoftext|>")
out = os.path.join(root, "fuzz", "vocab")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "encoder.json"), "w", encoding="utf-8") as f:
    json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
with open(os.path.join(out, "vocab.bpe"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
print(f"fuzz/vocab: {len(vocab)} tokens, {len(merges)} merges")
