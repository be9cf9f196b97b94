"""hf_gpt2_tokenizer.py — the tokenizer side of tests/test_convert.sh: what transformers' GPT2Tokenizer does with
the vocab.json and merges.txt of an exported directory, without transformers (not installed; Debian's python3).

GPT2Tokenizer.__init__ (transformers/models/gpt2/tokenization_gpt2.py) reads vocab.json with json.load as the
token -> id encoder, and merges.txt as text.split("\\n")[1:-1] (the first line is the "#version: 0.2" header, the
last element the empty string after the final newline), each merge split on whitespace into a pair whose rank is
its line; GPT2TokenizerFast converts that slow tokenizer when there is no tokenizer.json. Its _tokenize cuts the
text with the GPT-2 regex, maps each piece's UTF-8 bytes through bytes_to_unicode and merges by rank (bpe, copied
below). The regex needs \\p{L} and \\p{N}, which Python's re lacks, so the texts here are ASCII apart from symbols
and punctuation (emoji, dashes), for which the ASCII classes below cut exactly as the real pattern does.

usage: hf_gpt2_tokenizer.py HF_DIR TEXTS.jsonl IDS.txt VOCAB_DIR
  HF_DIR      the export (vocab.json, merges.txt, tokenizer_config.json, config.json)
  TEXTS.jsonl {"text": ...} per line; IDS.txt: `llm4d tokenize --jsonl` of it (one line of ids per text)
  VOCAB_DIR   the GPT-2 vocabulary llm4d read (encoder.json, vocab.bpe): the export must hold the same
Prints PASS/FAIL lines; exit status 1 when any check failed.
"""
import json
import os
import re
import sys

failed = 0


def check(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed += not ok


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    return {(a, b) for a, b in zip(word, word[1:])}


class GPT2Tokenizer:
    """GPT2Tokenizer's loading and _tokenize, as transformers has them."""

    def __init__(self, vocab_file, merges_file):
        with open(vocab_file, encoding="utf-8") as vocab_handle:
            self.encoder = json.load(vocab_handle)
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        with open(merges_file, encoding="utf-8") as merges_handle:
            bpe_merges = merges_handle.read().split("\n")[1:-1]
        self.merges = [tuple(merge.split()) for merge in bpe_merges]
        self.bpe_ranks = dict(zip(self.merges, range(len(self.merges))))
        self.cache = {}
        # the GPT-2 pattern with \p{L} -> [A-Za-z] and \p{N} -> [0-9]: the same cuts on the texts used here
        self.pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                else:
                    new_word.extend(word[i:j])
                    i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids += [self.encoder[t] for t in self.bpe(token).split(" ")]
        return ids

    def decode(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


def main():
    hf, texts_path, ids_path, vocab_dir = sys.argv[1:5]
    names = sorted(os.listdir(hf))
    check({"vocab.json", "merges.txt", "tokenizer_config.json"} <= set(names),
          f"the export holds vocab.json, merges.txt and tokenizer_config.json ({', '.join(names)})")
    vocab_b = open(f"{hf}/vocab.json", "rb").read()
    merges_b = open(f"{hf}/merges.txt", "rb").read()
    check(vocab_b == open(f"{vocab_dir}/encoder.json", "rb").read(),
          "vocab.json is the encoder.json llm4d's tokenizer reads, byte for byte")
    check(merges_b == open(f"{vocab_dir}/vocab.bpe", "rb").read(),
          "merges.txt is the vocab.bpe llm4d's tokenizer reads, byte for byte")
    config = json.load(open(f"{hf}/config.json"))
    tcfg = json.load(open(f"{hf}/tokenizer_config.json"))

    tok = GPT2Tokenizer(f"{hf}/vocab.json", f"{hf}/merges.txt")
    enc = tok.encoder
    check(isinstance(enc, dict) and len(enc) == config["vocab_size"] == 50257
          and sorted(enc.values()) == list(range(50257)),
          f"vocab.json maps {len(enc)} tokens one to one onto the ids 0..{config['vocab_size'] - 1} (config.json's "
          "vocab_size)")
    check(enc.get("<|endoftext|>") == config["eos_token_id"] == 50256,
          f"<|endoftext|> is id {enc.get('<|endoftext|>')}, config.json's eos_token_id")
    check(all(c in enc for c in tok.byte_encoder.values()),
          "every one of the 256 byte symbols (bytes_to_unicode) is a token: any text can be encoded")
    lines = merges_b.decode("utf-8").split("\n")
    check(lines[0] == "#version: 0.2" and merges_b.endswith(b"\n") and lines[-1] == "",
          f"merges.txt starts with '#version: 0.2' and ends with a newline (first line {lines[0]!r})")
    pairs_ok = all(len(m) == 2 and m[0] in enc and m[1] in enc and m[0] + m[1] in enc for m in tok.merges)
    check(len(tok.merges) == 50000 and len(tok.bpe_ranks) == 50000 and pairs_ok,
          f"split('\\n')[1:-1] gives {len(tok.merges)} distinct merges, each two tokens whose join is a token")
    check(tcfg.get("model_max_length") == config["n_positions"] and tcfg.get("tokenizer_class") == "GPT2Tokenizer"
          and all(tcfg.get(k) == "<|endoftext|>" for k in ("bos_token", "eos_token", "unk_token"))
          and tcfg.get("add_prefix_space") is False,
          f"tokenizer_config.json: GPT2Tokenizer, model_max_length {tcfg.get('model_max_length')} = n_positions, "
          "<|endoftext|> as bos/eos/unk, no prefix space")

    texts = [json.loads(l)["text"] for l in open(texts_path, encoding="utf-8") if l.strip()]
    ids = [[int(x) for x in l.split()] for l in open(ids_path)]
    same = [tok.encode(t) == i for t, i in zip(texts, ids)]
    check(len(texts) == len(ids) and all(same),
          f"GPT2Tokenizer from these files encodes {sum(same)} of {len(texts)} texts to llm4d tokenize's ids "
          f"({sum(map(len, ids))} ids)")
    check(all(tok.decode(i) == t for t, i in zip(texts, ids)), "and decodes llm4d's ids back to the texts")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
