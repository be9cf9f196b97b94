#!/usr/bin/python3
"""gpt_index_oracle.py — the GPT sample index computed the way PaddleNLP's GPT-3 dygraph example computes it.

The outside oracle of test_gpt_index.sh, written from the published algorithm (reference/paddle-gpt.md §8:
PaddleNLP examples/language_model/gpt-3/dygraph/dataset.py and build_sample_idx in data_tools/helpers.cpp) with
numpy's own RandomState doing the shuffles. Run by Debian's /usr/bin/python3 (numpy).

usage: gpt_index_oracle.py CORPUS SPLIT KIND N L SEED OUTDIR ITEMS
  CORPUS: P_ids.npz (ids, lens), P_ids.npy (with P_idx.npz) or a Megatron P.bin/P.idx
  writes OUTDIR/doc_idx.npy, sample_idx.npy, shuffle_idx.npy, items.txt ("i epoch token..." for ITEMS items)
  and prints "epochs E samples n separate_last s"
"""
import struct
import sys

import numpy as np


def load(path):
    if path.endswith('_ids.npz'):
        z = np.load(path)
        return z['ids'], z['lens'].astype(np.int32)
    if path.endswith('_ids.npy'):
        return np.load(path, mmap_mode='r'), np.load(path[:-len('_ids.npy')] + '_idx.npz')['lens'].astype(np.int32)
    prefix = path[:-4]
    b = open(prefix + '.idx', 'rb').read()
    assert b[:9] == b'MMIDIDX\x00\x00' and struct.unpack('<Q', b[9:17])[0] == 1
    dtype = {8: np.uint16, 4: np.int32, 5: np.int64}[b[17]]
    n, _ = struct.unpack('<QQ', b[18:34])
    sizes = np.frombuffer(b, np.int32, n, 34)
    return np.fromfile(prefix + '.bin', dtype), sizes.copy()


def split_bounds(splits_string, size):
    # get_train_valid_test_split_
    if splits_string.find(',') != -1:
        splits = [float(s) for s in splits_string.split(',')]
    elif splits_string.find('/') != -1:
        splits = [float(s) for s in splits_string.split('/')]
    else:
        splits = [float(splits_string)]
    while len(splits) < 3:
        splits.append(0.)
    splits = splits[:3]
    total = sum(splits)
    splits = [s / total for s in splits]
    index = [0]
    for i, s in enumerate(splits):
        index.append(index[i] + int(round(s * float(size))))
    diff = index[-1] - size
    for i in range(1, len(index)):
        index[i] -= diff
    return index


def num_epochs(tokens_per_epoch, seq_length, num_samples):
    epochs, total = 0, 0
    while True:
        epochs += 1
        total += tokens_per_epoch
        if (total - 1) // seq_length >= num_samples:
            return epochs


def build_sample_idx(sizes, doc_idx, seq_length, epochs, tokens_per_epoch):
    num_samples = (epochs * tokens_per_epoch - 1) // seq_length
    out = np.zeros((num_samples + 1, 2), dtype=np.int32)
    d, off = 0, 0
    for s in range(1, num_samples + 1):
        remaining = seq_length + 1
        while remaining != 0:
            doc_length = int(sizes[doc_idx[d]]) - off
            remaining -= doc_length
            if remaining <= 0:
                off += remaining + doc_length - 1
                remaining = 0
            else:
                d += 1
                off = 0
        out[s] = (d, off)
    return out


def build_shuffle_idx(num_samples, total_size, rng):
    dtype = np.uint32
    if total_size >= (np.iinfo(np.uint32).max - 1):
        dtype = np.int64
    first = np.arange(0, num_samples, 1, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, 1, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


def main():
    corpus, split, kind, n, seq_length, seed, outdir, items = sys.argv[1:9]
    n, seq_length, seed, items = int(n), int(seq_length), int(seed), int(items)
    ids, sizes = load(corpus)
    bounds = split_bounds(split, len(sizes))
    m = {'train': 0, 'valid': 1, 'test': 2}[kind]
    documents = np.arange(bounds[m], bounds[m + 1], 1, dtype=np.int32)
    tokens_per_epoch = int(np.sum(sizes[documents]))
    epochs = num_epochs(tokens_per_epoch, seq_length, n)
    rng = np.random.RandomState(seed=seed)
    if epochs == 1:
        separate_last = False
    else:
        from_minus_one = ((epochs - 1) * tokens_per_epoch - 1) // seq_length
        last = n - from_minus_one
        per_epoch = (tokens_per_epoch - 1) // seq_length
        separate_last = last < int(0.80 * per_epoch)
    doc_idx = np.mgrid[0:epochs, 0:len(documents)][1]
    doc_idx[:] = documents
    doc_idx = doc_idx.reshape(-1).astype(np.int32)  # no shuffle in this variant
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, epochs, tokens_per_epoch)
    n_first = from_minus_one if separate_last else sample_idx.shape[0] - 1
    shuffle_idx = build_shuffle_idx(n_first, sample_idx.shape[0] - 1, rng)
    np.save(f'{outdir}/doc_idx.npy', doc_idx)
    np.save(f'{outdir}/sample_idx.npy', sample_idx)
    np.save(f'{outdir}/shuffle_idx.npy', shuffle_idx)

    # __getitem__ / _get_single_sample_from_idx
    start_pos = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    with open(f'{outdir}/items.txt', 'w') as f:
        for i in range(items):
            j = int(shuffle_idx[i])
            df, of = sample_idx[j]
            dl, ol = sample_idx[j + 1]
            if df == dl:
                s = start_pos[doc_idx[df]]
                toks = ids[s + of:s + ol + 1].tolist()
            else:
                s, e = start_pos[doc_idx[df]], start_pos[doc_idx[df] + 1]
                toks = ids[s + of:e].tolist()
                for k in range(df + 1, dl):
                    toks += ids[start_pos[doc_idx[k]]:start_pos[doc_idx[k] + 1]].tolist()
                s = start_pos[doc_idx[dl]]
                toks += ids[s:s + ol + 1].tolist()
            assert len(toks) == seq_length + 1
            f.write(f'{i} {j * seq_length // tokens_per_epoch} ' + ' '.join(map(str, toks)) + '\n')
    print(f'epochs {epochs} samples {sample_idx.shape[0] - 1} separate_last {int(separate_last)}')


if __name__ == '__main__':
    main()
