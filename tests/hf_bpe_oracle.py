#!/usr/bin/env python3
"""hf_bpe_oracle.py — test_tokenizer_json.sh's outside oracle: writes small Hugging Face tokenizer.json files and
what Hugging Face's `tokenizers` would encode and decode with them, computed here in pure Python (no llm4d code).

  gpt2 VOCAB_DIR OUT   OUT/str/tokenizer.json and OUT/pair/tokenizer.json from GPT-2's encoder.json + vocab.bpe
                       (merges spelled "a b" and ["a", "b"]), and OUT/varied.jsonl: texts for comparing the two
                       loaders (no literal <|endoftext|>, no U+0085/U+180E/U+FEFF, where the two differ by design)
  toy OUT              made-up byte-level BPEs (a tiny BPE trained here on a small text) with added tokens:
                       OUT/<name>/tokenizer.json, OUT/texts.jsonl, OUT/<name>.ids (one line of ids per text) and
                       OUT/<name>.dec (each line's ids decoded, one JSON string per line)
  bad OUT              broken tokenizer.json files, one per case, OUT/<case>.json

The pre-tokenizer regexes are run by Python's `re`, which has no \\p{L}: they are written out here with explicit
character classes built from unicodedata (categories L* and N*, Unicode 14 as PCRE2 10.42's) and \\s as Unicode's
White_Space (Oniguruma's \\s, which tokenizers uses). The BPE is encoder.py's: merge the lowest-ranked adjacent pair
everywhere, left to right, until none is ranked. Added tokens are split out first, leftmost-longest, those with
normalized=false in a first pass and normalized=true in a second (tokenizers' AddedVocabulary)."""
import json
import os
import random
import re
import sys
import unicodedata


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def char_class(prefix):
    """The code points whose general category starts with prefix, as the inside of a [...] class."""
    out, start, prev = [], None, None
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            elif cp != prev + 1:
                out.append((start, prev))
                start = cp
            prev = cp
    out.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in out)


L, N = char_class("L"), char_class("N")
WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"  # Unicode White_Space
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def to_python(pattern):
    """Rewrite the \\p{L}, \\p{N}, \\s, \\S of these two patterns for Python's re."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith(r"\p{L}", i) or pattern.startswith(r"\p{N}", i):
            cls = L if pattern[i + 3] == "L" else N
            out.append(cls if in_class else f"[{cls}]")
            i += 5
            continue
        if pattern.startswith(r"\s", i):
            out.append(WS if in_class else f"[{WS}]")
        elif pattern.startswith(r"\S", i):
            assert not in_class
            out.append(f"[^{WS}]")
        elif c == "\\":
            out.append(pattern[i:i + 2])
        else:
            out.append(c)
            in_class = True if c == "[" else False if c == "]" else in_class
            i += 1
            continue
        i += 2
    return re.compile("".join(out))


def isolated(regex, s):
    """tokenizers' Split with behavior Isolated: every match and every gap between matches is a piece."""
    pieces, prev = [], 0
    for m in regex.finditer(s):
        assert m.end() > m.start()
        pieces += [s[prev:m.start()], m.group()]
        prev = m.end()
    return [p for p in pieces + [s[prev:]] if p]


class Oracle:
    def __init__(self, tj):
        m = tj["model"]
        self.vocab = m["vocab"]
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        self.ranks = {p: r for r, p in enumerate(merges)}
        self.ignore_merges = m.get("ignore_merges", False)
        self.added = tj["added_tokens"]
        pre = tj["pre_tokenizer"]
        steps = pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]
        self.splits, self.bytelevel_rx, self.prefix = [], None, None
        for s in steps:
            if s["type"] == "Split":
                self.splits.append(to_python(s["pattern"]["Regex"]))
            else:
                self.prefix = s["add_prefix_space"]
                self.bytelevel_rx = to_python(GPT2) if s["use_regex"] else None
        self.id_to_tok = {i: t for t, i in self.vocab.items()}
        self.id_to_tok.update({a["id"]: a["content"] for a in self.added})

    def bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        w = list(word)
        while len(w) > 1:
            pairs = [(self.ranks.get((w[i], w[i + 1]), 1 << 60), i) for i in range(len(w) - 1)]
            best = min(pairs)[0]
            if best == 1 << 60:
                break
            a, b = next((w[i], w[i + 1]) for r, i in pairs if r == best)
            j, out = 0, []
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        return [self.vocab[t] for t in w]

    def pretok(self, s):
        pieces = [s]
        for rx in self.splits:
            pieces = [q for p in pieces for q in isolated(rx, p)]
        if self.prefix:  # ByteLevel: a prefix space on each piece, then its own regex
            pieces = [p if p.startswith(" ") else " " + p for p in pieces]
        if self.bytelevel_rx:
            pieces = [q for p in pieces for q in isolated(self.bytelevel_rx, p)]
        return pieces

    def split_added(self, s, normalized):
        toks = [a for a in self.added if a.get("normalized", not a["special"]) == normalized]
        out, prev, i = [], 0, 0
        while i < len(s):
            best = max((a for a in toks if s.startswith(a["content"], i)), key=lambda a: len(a["content"]), default=None)
            if best is None:
                i += 1
                continue
            out += [s[prev:i], best["id"]]
            i = prev = i + len(best["content"])
        return [x for x in out + [s[prev:]] if x != ""]

    def encode(self, text):
        ids = []
        for seg in self.split_added(text, False):
            for seg2 in [seg] if isinstance(seg, int) else self.split_added(seg, True):
                if isinstance(seg2, int):
                    ids.append(seg2)
                    continue
                for piece in self.pretok(seg2):
                    ids += self.bpe("".join(B2U[b] for b in piece.encode()))
        return ids

    def decode(self, ids):
        out = b""
        for i in ids:
            t = self.id_to_tok[i]
            out += bytes(U2B[c] for c in t) if all(c in U2B for c in t) else t.encode()
        return out.decode("utf-8", errors="replace")


def train(text, pattern, n_merges):
    """A tiny BPE trainer (most frequent pair first) over the pieces of text: the merges, in rank order."""
    words = {}
    for piece in isolated(to_python(pattern), text):
        w = tuple(B2U[b] for b in piece.encode())
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + c
        if not counts:
            break
        best = max(sorted(counts), key=lambda p: counts[p])
        merges.append(best)
        nw = {}
        for w, c in words.items():
            o, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    o.append(w[j] + w[j + 1])
                    j += 2
                else:
                    o.append(w[j])
                    j += 1
            nw[tuple(o)] = nw.get(tuple(o), 0) + c
        words = nw
    return merges


TRAIN = ("The quick brown fox jumps over the lazy dog. It's the dog's day; they're here, we've won, I'm in, "
         "you'll see, he'd go. Numbers 1234567 and 3.14159 and 2024-11-29. Whitespace   runs\n\n\tand tabs. "
         "naïve café résumé — Привет мир, 日本語のテキスト. the the the there then they them these those. ") * 3

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "It's IT'S it'S we'VE they'Re I'M you'll HE'D don't",
    "Numbers: 1234567 89 3.14159 -42 2024-11-29 ½ ²³ ٣٤٥",
    "Whitespace   runs  \n\n\n  and\ttabs\t\t end   ",
    "  leading spaces and trailing\r\n\r\nCRLF lines\r\n",
    "naïve café résumé Straße Привет мир ΑΒΓ 日本語のテキスト 한국어 😀👍🏽 🇫🇷",
    "<|begin_of_text|>Hello there<|end_of_text|>",
    "mid<|eot_id|>text<|eot and <|eot_id|><|eot_id|> and <|eo",
    "xy<|eot_id|> then xy<|z and [TOOL]call[TOOL] end",
    "words zebra zebras thequick the quick  zebra",
    "!!!??? ... ,,, ;;; --- *** ((( ))) \\\\ //// @@@",
    "<|end_of_text|><|begin_of_text|>",
    "a",
    "\n",
]


def toy(out):
    os.makedirs(out, exist_ok=True)
    rng = random.Random(47)
    byte_ids = list(range(256))
    rng.shuffle(byte_ids)  # byte tokens' ids are not their byte values
    vocab = {B2U[b]: byte_ids[b] for b in range(256)}
    merges = train(TRAIN, LLAMA3, 120)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    # whole-word tokens the merges do not build: ignore_merges decides whether " zebra" is one token
    for extra in ("Ġzebra", "Ġthequick", "zebras"):
        vocab[extra] = len(vocab)
    n = len(vocab)
    added = [
        {"id": n + 0, "content": "<|begin_of_text|>", "special": True, "normalized": False},
        {"id": n + 1, "content": "<|end_of_text|>", "special": True, "normalized": False},
        {"id": n + 2, "content": "<|eot", "special": True, "normalized": False},
        {"id": n + 3, "content": "<|eot_id|>", "special": True, "normalized": False},
        {"id": n + 9, "content": "xy<|", "special": False, "normalized": True},  # ids n+4..n+8: a gap
        {"id": n + 10, "content": "[TOOL]", "special": False, "normalized": True},
    ]
    for a in added:
        a.update(single_word=False, lstrip=False, rstrip=False)
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False}
    bl = {"type": "ByteLevel", "trim_offsets": True}
    llama_pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        dict(bl, add_prefix_space=False, use_regex=False)]}
    variants = {
        "llama3": (llama_pre, True, [f"{a} {b}" for a, b in merges]),
        "llama3_pairs_nim": (llama_pre, False, [[a, b] for a, b in merges]),
        "bytelevel_prefix": (dict(bl, add_prefix_space=True, use_regex=True), False, [f"{a} {b}" for a, b in merges]),
    }
    with open(f"{out}/texts.jsonl", "w") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    for name, (pre, ignore, mg) in variants.items():
        tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
              "pre_tokenizer": pre, "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                                                         "trim_offsets": False, "use_regex": True},
              "decoder": dict(bl, add_prefix_space=True, use_regex=True),
              "model": dict(model, ignore_merges=ignore, vocab=vocab, merges=mg)}
        os.makedirs(f"{out}/{name}", exist_ok=True)
        json.dump(tj, open(f"{out}/{name}/tokenizer.json", "w"), ensure_ascii=False, indent=1)
        o = Oracle(tj)
        with open(f"{out}/{name}.ids", "w") as fi, open(f"{out}/{name}.dec", "w") as fd:
            for t in TEXTS:
                ids = o.encode(t)
                fi.write(" ".join(map(str, ids)) + "\n")
                fd.write(json.dumps(o.decode(ids), ensure_ascii=False) + "\n")
    # a vocabulary past 65500 ids (an added token at 70000): token files must hold int32
    tj = json.load(open(f"{out}/llama3/tokenizer.json"))
    tj["added_tokens"].append(dict(added[0], id=70000, content="<|big|>"))
    os.makedirs(f"{out}/big", exist_ok=True)
    json.dump(tj, open(f"{out}/big/tokenizer.json", "w"), ensure_ascii=False)
    o = Oracle(tj)
    docs = ["Hello<|big|>there zebra", "second doc 123<|big|>"]
    with open(f"{out}/big.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    # prepare-data --append-eos: each document's ids, then <|end_of_text|>
    open(f"{out}/big.ids", "w").write(" ".join(str(i) for d in docs for i in o.encode(d) + [n + 1]) + "\n")


def gpt2(vocab_dir, out):
    enc = json.load(open(f"{vocab_dir}/encoder.json"))
    merges = open(f"{vocab_dir}/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]  # as encoder.py reads it
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    for name, mg in (("str", merges), ("pair", [m.split(" ") for m in merges])):
        tj = {"version": "1.0", "truncation": None, "padding": None,
              "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": True, "special": True}],
              "normalizer": None, "pre_tokenizer": bl, "post_processor": bl, "decoder": bl,
              "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                        "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": enc,
                        "merges": mg}}
        os.makedirs(f"{out}/{name}", exist_ok=True)
        json.dump(tj, open(f"{out}/{name}/tokenizer.json", "w"), ensure_ascii=False)
    texts = TEXTS + [
        "It's what we've got: they'll say I'd, you're, she's, I'm", "don't 's't'd''", "'''''", "  's",
        "     " * 50, "x" + " " * 300 + "y", "\n" * 100 + "text", "tabs\tand\t\ttabs\t\t\t\n\n\nnewlines \n \n ",
        "   \t  \n  mixed\u00a0nbsp\u2003em\u3000ideographic", "zero\u200bwidth",
        "123 4567 89012345 3.14159 -42 1,000,000 0x1F 1e-9 ½ ² Ⅻ ٣٤٥ ௰",
        "e\u0301 a\u0300\u0316 n\u0303 \u0915\u094d\u0937 combining\u0308 marks\u20dd",
        "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ☃ 🤖", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𓀀 𐍈",
        "العربية עברית हिन्दी ไทย ქართული Ελληνικά", "=" * 500, "ab" * 500,
        "def f(x):\n    return x**2  # comment\n\tif x: pass", "\x7f\x01\x02\x1b[0m control",
    ]
    for lic in ("GPL-3", "Apache-2.0", "Artistic"):
        try:
            texts.append(open(f"/usr/share/common-licenses/{lic}", encoding="utf-8").read())
        except OSError:
            pass
    with open(f"{out}/varied.jsonl", "w") as f:
        for t in texts:
            assert "<|endoftext|>" not in t and not set(t) & {"\x85", "\u180e", "\ufeff"}
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")


def bad(out):
    os.makedirs(out, exist_ok=True)
    base = json.load(open(f"{out}/../toy/llama3/tokenizer.json"))

    def write(name, mutate):
        tj = json.loads(json.dumps(base))
        mutate(tj)
        json.dump(tj, open(f"{out}/{name}.json", "w"), ensure_ascii=False)
    write("unigram", lambda tj: tj["model"].update(type="Unigram"))
    write("wordpiece", lambda tj: tj["model"].update(type="WordPiece"))
    write("metaspace", lambda tj: tj.update(pre_tokenizer={"type": "Metaspace", "replacement": "▁",
                                                              "prepend_scheme": "first", "split": False}))
    write("unknown_merge", lambda tj: tj["model"]["merges"].insert(2, "Ġzz qqqq"))
    write("nfc", lambda tj: tj.update(normalizer={"type": "NFC"}))
    write("byte_fallback", lambda tj: tj["model"].update(byte_fallback=True))
    write("lstrip", lambda tj: tj["added_tokens"][0].update(lstrip=True))
    write("removed", lambda tj: tj["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed"))
    write("no_eos", lambda tj: tj.update(added_tokens=[a for a in tj["added_tokens"] if a["content"] != "<|end_of_text|>"]))
    text = json.dumps(base)
    open(f"{out}/truncated.json", "w").write(text[: len(text) // 2])


if __name__ == "__main__":
    {"gpt2": lambda: gpt2(sys.argv[2], sys.argv[3]), "toy": lambda: toy(sys.argv[2]),
     "bad": lambda: bad(sys.argv[2])}[sys.argv[1]]()
