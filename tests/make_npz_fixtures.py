#!/usr/bin/python3
"""make_npz_fixtures.py — numpy-written corpus files for test_npz, and the check that numpy reads llm4d's files.

usage: /usr/bin/python3 tests/make_npz_fixtures.py DIR            write fixtures + DIR/expected.txt
       /usr/bin/python3 tests/make_npz_fixtures.py --verify DIR   check the files test_npz wrote with NPZ_OUT=DIR

numpy is the outside oracle here: the good fixtures are what np.save / np.savez / np.savez_compressed really write
(in the two layouts PaddleNLP uses, see reference/paddle-gpt.md §2.1), and expected.txt records what llm4d must read
from each (counts, max id, sum, a position-weighted sum, first and last id). The bad fixtures are the damaged or
unsupported files a user could hand llm4d; expected.txt gives a word the error message must contain.
Run by Debian's /usr/bin/python3 (it has numpy; the python3 first on PATH may not).
"""
import io
import os
import sys
import zipfile

import numpy as np

EOS = 50256


def corpus(seed, n_docs, max_len=40):
    """Documents of random lengths and ids, each ending with EOS, as PaddleNLP writes them with --append_eos."""
    rs = np.random.RandomState(seed)
    lens = rs.randint(1, max_len, size=n_docs)
    ids = rs.randint(0, EOS, size=int(lens.sum()))
    ids[np.cumsum(lens) - 1] = EOS
    return ids, lens


def summary(ids, lens):
    ids = ids.astype(np.int64)
    w = np.arange(ids.size) % 7 + 1
    return (f"{ids.size} {lens.size} {int(ids.max())} {int(ids.sum())} {int((w * ids).sum())} "
            f"{int(ids[0])} {int(ids[-1])}")


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=False)
    return buf.getvalue()


def raw_npz(path, members, compress=False):
    """An npz from raw .npy images (to plant damaged members)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for name, data in members:
            zf.writestr(name + ".npy", data)


def write(d):
    os.makedirs(d, exist_ok=True)
    lines = []

    def good(rel, ids, lens):
        lines.append(f"good {rel} {summary(ids, lens)}")

    def bad(rel, word):
        lines.append(f"bad {rel} {word}")

    # Old format, every ids width with several lens widths, stored and deflated.
    seed = 1
    for ids_dt, lens_dt in (("uint16", "int32"), ("int32", "uint16"), ("int64", "int64"), ("uint32", "int32")):
        for save, tag in ((np.savez, "savez"), (np.savez_compressed, "savezc")):
            ids, lens = corpus(seed, 30 + seed)
            seed += 1
            rel = f"{tag}_{ids_dt}_{lens_dt}_ids.npz"
            save(os.path.join(d, rel), ids=ids.astype(ids_dt), lens=lens.astype(lens_dt))
            good(rel, ids, lens)
    # A larger one (lens from a Python list: numpy's default int64), deflated.
    ids, lens = corpus(100, 5000, max_len=120)
    np.savez_compressed(os.path.join(d, "big_ids.npz"), ids=ids.astype(np.uint16), lens=[int(x) for x in lens])
    good("big_ids.npz", ids, lens)

    # New format: P_ids.npy + P_idx.npz (lens int32, docs int64 as create_pretraining_data.py writes), as a
    # directory and as each of its files; npy format versions 1.0, 2.0, 3.0.
    for sub, dt, version, save in (("new_u16", np.uint16, None, np.savez), ("new_i32", np.int32, None, np.savez),
                                   ("new_v2", np.uint16, (2, 0), np.savez_compressed),
                                   ("new_v3", np.int32, (3, 0), np.savez)):
        os.makedirs(os.path.join(d, sub))
        ids, lens = corpus(seed, 50)
        seed += 1
        with open(os.path.join(d, sub, "corpus_ids.npy"), "wb") as f:
            f.write(npy_bytes(ids.astype(dt), version))
        save(os.path.join(d, sub, "corpus_idx.npz"), lens=lens.astype(np.int32),
             docs=np.arange(lens.size + 1, dtype=np.int64))
        good(sub, ids, lens)
    good("new_u16/corpus_idx.npz", *corpus(seed - 4, 50))
    good("new_u16/corpus_ids.npy", *corpus(seed - 4, 50))
    # Both formats in one directory: the new one wins; of two new ones the first sorted.
    os.makedirs(os.path.join(d, "mixed"))
    ids_a, lens_a = corpus(200, 20)
    np.savez(os.path.join(d, "mixed", "a_ids.npz"), ids=ids_a.astype(np.uint16), lens=lens_a.astype(np.int32))
    for prefix, s in (("c", 201), ("b", 202)):
        ids_b, lens_b = corpus(s, 25)
        np.save(os.path.join(d, "mixed", f"{prefix}_ids.npy"), ids_b.astype(np.uint16))
        np.savez(os.path.join(d, "mixed", f"{prefix}_idx.npz"), lens=lens_b.astype(np.int32))
    good("mixed", *corpus(202, 25))
    # Old format only in a directory: sorted, first taken.
    os.makedirs(os.path.join(d, "oldonly"))
    for name, s in (("z_ids.npz", 300), ("k_ids.npz", 301)):
        i, l = corpus(s, 15)
        np.savez(os.path.join(d, "oldonly", name), ids=i.astype(np.uint16), lens=l.astype(np.int32))
    good("oldonly", *corpus(301, 15))

    # ---- bad files ----
    ids, lens = corpus(400, 40)
    ids16, lens32 = ids.astype(np.uint16), lens.astype(np.int32)
    np.savez(os.path.join(d, "whole_ids.npz"), ids=ids16, lens=lens32)
    blob = open(os.path.join(d, "whole_ids.npz"), "rb").read()
    os.remove(os.path.join(d, "whole_ids.npz"))
    open(os.path.join(d, "truncated_ids.npz"), "wb").write(blob[: len(blob) // 2])
    bad("truncated_ids.npz", "zip")
    open(os.path.join(d, "notzip_ids.npz"), "w").write("ids,lens\n1,2\n")
    bad("notzip_ids.npz", "not a zip")
    np.savez(os.path.join(d, "noids_ids.npz"), tokens=ids16, lens=lens32)
    bad("noids_ids.npz", "no array 'ids'")
    np.savez(os.path.join(d, "nolens_ids.npz"), ids=ids16)
    bad("nolens_ids.npz", "no array 'lens'")
    l2 = lens32.copy()
    l2[5] += 2
    np.savez(os.path.join(d, "mismatch_ids.npz"), ids=ids16, lens=l2)
    bad("mismatch_ids.npz", "do not match")
    l3 = lens32.copy()
    l3[7] = -3
    np.savez(os.path.join(d, "neglens_ids.npz"), ids=ids16, lens=l3)
    bad("neglens_ids.npz", "lens[7] = -3")
    n2 = ids.size // 2 * 2
    np.savez(os.path.join(d, "fortran_ids.npz"), ids=np.asfortranarray(ids[:n2].astype(np.int32).reshape(2, -1)),
             lens=np.array([n2], np.int32))
    bad("fortran_ids.npz", "fortran_order")
    np.savez(os.path.join(d, "bigendian_ids.npz"), ids=ids.astype(">i4"), lens=lens32)
    bad("bigendian_ids.npz", "big-endian")
    np.savez(os.path.join(d, "twod_ids.npz"), ids=ids16[:n2].reshape(2, -1), lens=np.array([n2], np.int32))
    bad("twod_ids.npz", "2 dimensions")
    np.savez(os.path.join(d, "float32_ids.npz"), ids=ids.astype(np.float32), lens=lens32)
    bad("float32_ids.npz", "float32")
    np.savez(os.path.join(d, "int8_ids.npz"), ids=(ids % 100).astype(np.int8), lens=lens32)
    bad("int8_ids.npz", "int8")
    good_ids = npy_bytes(ids16)
    raw_npz(os.path.join(d, "shortdata_ids.npz"), [("ids", good_ids[:-5]), ("lens", npy_bytes(lens32))])
    bad("shortdata_ids.npz", "truncated")
    raw_npz(os.path.join(d, "badmagic_ids.npz"), [("ids", b"\x93NUMPZ" + good_ids[6:]), ("lens", npy_bytes(lens32))])
    bad("badmagic_ids.npz", "magic")
    raw_npz(os.path.join(d, "badversion_ids.npz"),
            [("ids", good_ids[:6] + b"\x07\x00" + good_ids[8:]), ("lens", npy_bytes(lens32))])
    bad("badversion_ids.npz", "version 7.0")
    # A flipped byte inside the deflated ids: zlib or the CRC catches it.
    big = np.random.RandomState(5).randint(0, EOS, size=20000).astype(np.int32)
    path = os.path.join(d, "corrupt_ids.npz")
    np.savez_compressed(path, ids=big, lens=np.array([big.size], np.int32))
    blob = bytearray(open(path, "rb").read())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("ids.npy")
    h = info.header_offset  # local header: 30 fixed bytes, then the name and the extra field, then the data
    start = h + 30 + int.from_bytes(blob[h + 26: h + 28], "little") + int.from_bytes(blob[h + 28: h + 30], "little")
    blob[start + info.compress_size // 2] ^= 0x55
    open(path, "wb").write(bytes(blob))
    bad("corrupt_ids.npz", "corrupt")

    # New-format directories that are wrong.
    os.makedirs(os.path.join(d, "new_noids"))
    np.savez(os.path.join(d, "new_noids", "p_idx.npz"), lens=lens32)
    bad("new_noids", "no such file")
    os.makedirs(os.path.join(d, "new_mismatch"))
    np.save(os.path.join(d, "new_mismatch", "p_ids.npy"), ids16[:-1])
    np.savez(os.path.join(d, "new_mismatch", "p_idx.npz"), lens=lens32)
    bad("new_mismatch", "do not match")
    os.makedirs(os.path.join(d, "new_bigendian"))
    np.save(os.path.join(d, "new_bigendian", "p_ids.npy"), ids.astype(">u2"))
    np.savez(os.path.join(d, "new_bigendian", "p_idx.npz"), lens=lens32)
    bad("new_bigendian", "big-endian")
    os.makedirs(os.path.join(d, "new_float"))
    np.save(os.path.join(d, "new_float", "p_ids.npy"), ids.astype(np.float64))
    np.savez(os.path.join(d, "new_float", "p_idx.npz"), lens=lens32)
    bad("new_float", "float64")
    os.makedirs(os.path.join(d, "empty"))
    bad("empty", "no corpus")
    os.makedirs(os.path.join(d, "otherfiles"))
    np.savez(os.path.join(d, "otherfiles", "train.npz"), ids=ids16, lens=lens32)
    open(os.path.join(d, "otherfiles", "notes.txt"), "w").write("x")
    bad("otherfiles", "no corpus")

    with open(os.path.join(d, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"make_npz_fixtures.py: wrote {len(lines)} fixtures to {d}")


def pattern(dtype, n):
    """The values test_npz's write_for_numpy stores (pattern() in test_npz.c)."""
    i = np.arange(n, dtype=np.int64)
    v = (i * 7919 + 13) % 50257
    extra = {"<u2": 0, "<i4": (i % 2) * 1000000000, "<u4": (i % 2) * 3000000000, "<i8": (i % 3) * (1 << 40)}[dtype]
    return (v + extra).astype(dtype)


def verify(d):
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("ok - " if ok else "FAIL - ") + what)
        passed += bool(ok)
        failed += not ok

    for name, dt in (("uint16", "<u2"), ("int32", "<i4"), ("uint32", "<u4"), ("int64", "<i8")):
        path = os.path.join(d, f"llm4d_{name}.npy")
        try:
            a = np.load(path, allow_pickle=False)
            check(a.dtype.str == dt and a.shape == (1000,) and np.array_equal(a, pattern(dt, 1000)),
                  f"numpy reads llm4d's {name} .npy with the exact values")
        except Exception as e:  # noqa: BLE001 - any failure to load is the finding
            check(False, f"numpy reads llm4d's {name} .npy ({e})")
    try:
        a = np.load(os.path.join(d, "llm4d_2d.npy"), allow_pickle=False)
        check(a.shape == (6, 4) and a.flags.c_contiguous and np.array_equal(a.ravel(), pattern("<i8", 24)),
              "numpy reads llm4d's 2-D int64 .npy (6, 4)")
    except Exception as e:  # noqa: BLE001
        check(False, f"numpy reads llm4d's 2-D .npy ({e})")
    for kind, method in (("stored", zipfile.ZIP_STORED), ("deflated", zipfile.ZIP_DEFLATED)):
        path = os.path.join(d, f"llm4d_{kind}.npz")
        try:
            with zipfile.ZipFile(path) as zf:
                check(zf.testzip() is None, f"llm4d's {kind} npz: every member's CRC checks (zipfile.testzip)")
                check(sorted(i.filename for i in zf.infolist()) == ["ids.npy", "lens.npy", "sample_idx.npy"]
                      and all(i.compress_type == method for i in zf.infolist()),
                      f"llm4d's {kind} npz: members ids/sample_idx/lens, all {kind}")
            with np.load(path, allow_pickle=False) as z:
                check(np.array_equal(z["ids"], pattern("<u2", 5000)) and z["ids"].dtype.str == "<u2",
                      f"numpy reads ids from llm4d's {kind} npz")
                check(np.array_equal(z["sample_idx"], pattern("<i4", 24).reshape(6, 4)),
                      f"numpy reads 2-D sample_idx from llm4d's {kind} npz")
                check(np.array_equal(z["lens"], pattern("<i8", 77)), f"numpy reads lens from llm4d's {kind} npz")
        except Exception as e:  # noqa: BLE001
            check(False, f"numpy reads llm4d's {kind} npz ({e})")
    print(f"{passed} passed, {failed} failed")
    return failed == 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        sys.exit(0 if verify(sys.argv[2]) else 1)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write(sys.argv[1])
