#!/usr/bin/env python3
"""param_count.py — the parameters of every function declared or defined in C sources, and the check that no
function outside the kernels takes more than 8 (issue 44, item 2: a long list of parameters is a concept nobody
named; group the ones that travel together into a struct that says what they are).

    tools/param_count.py [--max N] [--all] PATH...   (PATH: files or directories; default src)

Prints `count<TAB>file:line<TAB>name` for each function over N (default 8) that the exclusions below do not cover,
or for every function with --all, and exits 1 when any is over N outside the exclusions. A function is a name
followed by a parenthesised parameter list and then `{` or `;` at file scope (brace depth 0), after comments,
string and character literals and preprocessor lines are removed; `(void)` and `()` count 0, a function pointer
parameter counts 1 (its own list is nested). Members of structs (the backend's method table) are not at file scope
and are not counted: their implementations are, and are excluded as kernels below.

Kernels keep their long lists: a kernel's parameters are its operands and shapes, passed in registers, named as the
math names them, and the method table (backend/methods.h) fixes them for every backend alike.
"""
import os
import re
import sys

# Excluded files (a prefix of the path from the repository root) and functions, each with why.
EXCLUDED_FILES = {
    "src/backend/cpu": "CPU kernels: GEMM (cpu_linear, cpu_amx*, cpu_dnnl*), attention, elementwise, the optimizer",
    "src/backend/cuda/": "CUDA kernels, their launchers and the CUDA backend's methods",
    "src/backend/host": "the host backend's kernels (attention over the cache) and methods (copy_2d)",
}
EXCLUDED_FUNCTIONS = {
    "g_copy_2d": "backend.h copy_2d, the guard backend's method (its signature is the method table's)",
    "r_copy_2d": "backend.h copy_2d, the recording backend's method (plan/record.c)",
    "llm4d_adamw_apply": "the optimizer kernel (optim/adamw.h): the update's operands and hyperparameters",
}


def strip(src):
    """The source with comments, literals and preprocessor lines blanked (newlines kept for line numbers)."""
    out, i, n, bol = [], 0, len(src), True
    while i < n:
        c = src[i]
        if bol and c in " \t":
            out.append(c)
            i += 1
            continue
        if bol and c == "#":
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        bol = False
        if src.startswith("//", i):
            while i < n and src[i] != "\n":
                i += 1
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append("0")
            i = j + 1
            continue
        if c == "\n":
            bol = True
        out.append(c)
        i += 1
    return "".join(out)


TOKEN = re.compile(r"[A-Za-z_]\w*|\S")
IDENT = re.compile(r"[A-Za-z_]\w*$")
NOT_NAMES = {"if", "while", "for", "switch", "return", "sizeof", "_Alignof", "_Static_assert", "__attribute__"}


def functions(path):
    """(count, line, name) of every function declared or defined at file scope in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        s = strip(f.read())
    toks, line, last = [], 1, 0
    for m in TOKEN.finditer(s):
        line += s.count("\n", last, m.start())
        last = m.start()
        toks.append((m.group(), line))
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i][0]
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
        elif (t == "(" and depth == 0 and i >= 2 and IDENT.match(toks[i - 1][0])
              and (IDENT.match(toks[i - 2][0]) or toks[i - 2][0] == "*")):
            d, j, commas = 0, i, 0
            while j < len(toks):
                x = toks[j][0]
                if x in "([":
                    d += 1
                elif x in ")]":
                    d -= 1
                    if d == 0:
                        break
                elif x == "," and d == 1:
                    commas += 1
                j += 1
            inner = [x[0] for x in toks[i + 1:j]]
            n = 0 if inner in ([], ["void"]) else commas + 1
            after = toks[j + 1][0] if j + 1 < len(toks) else ""
            name = toks[i - 1][0]
            if after in ("{", ";", "__attribute__") and name not in NOT_NAMES:
                yield n, toks[i - 1][1], name
            i = j
        i += 1


def sources(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in sorted(os.walk(p)):
                for f in sorted(files):
                    if f.endswith((".c", ".h")):
                        yield os.path.join(root, f)
        else:
            yield p


def excluded(path, name):
    rel = os.path.relpath(path).replace(os.sep, "/")
    return name in EXCLUDED_FUNCTIONS or any(rel.startswith(p) for p in EXCLUDED_FILES)


def main(argv):
    limit, show_all, paths = 8, False, []
    args = iter(argv)
    for a in args:
        if a == "--max":
            limit = int(next(args))
        elif a == "--all":
            show_all = True
        elif a.startswith("-"):
            print(f"param_count.py: unknown option {a}", file=sys.stderr)
            return 2
        else:
            paths.append(a)
    over = 0
    for path in sources(paths or ["src"]):
        for n, line, name in functions(path):
            if show_all or (n > limit and not excluded(path, name)):
                print(f"{n}\t{path}:{line}\t{name}")
            over += n > limit and not excluded(path, name)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
