#!/usr/bin/env python3
"""Licence check of every dependency rxpath builds with (normal, build and
dev), from `cargo metadata`: each package must be available under a licence
that lets a user embed rxpath (MIT OR Apache-2.0) without taking on copyleft
terms. An SPDX expression passes if one of its OR-alternatives is made only of
allowed licences. Exits non-zero and names each package that does not pass."""
import json
import re
import subprocess
import sys

ALLOWED = {
    "MIT", "MIT-0", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause",
    "BSD-3-Clause", "ISC", "Zlib", "0BSD", "Unlicense", "CC0-1.0", "BSL-1.0",
    "Unicode-3.0", "Unicode-DFS-2016", "MPL-2.0", "NCSA",
}


def passes(expr: str) -> bool:
    """Evaluate an SPDX expression: AND binds tighter than OR, parentheses
    group, `WITH exception` stays with its licence; old-style "A/B" is OR."""
    toks = re.findall(r"\(|\)|[^\s()]+", expr.replace("/", " OR "))
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def atom():
        if peek() == "(":
            take()
            v = disj()
            if peek() == ")":
                take()
            return v
        lic = take()
        if peek() == "WITH":
            take()
            lic = f"{lic} WITH {take()}"
        return lic in ALLOWED or lic.split(" WITH ")[0] in ALLOWED - {"Apache-2.0 WITH LLVM-exception"}

    def conj():
        v = atom()
        while peek() == "AND":
            take()
            v = atom() and v
        return v

    def disj():
        v = conj()
        while peek() == "OR":
            take()
            v = conj() or v
        return v

    try:
        return bool(toks) and disj() and pos == len(toks)
    except IndexError:
        return False


def main() -> int:
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--locked"]))
    ws = set(meta["workspace_members"])
    bad = []
    n = 0
    for p in meta["packages"]:
        if p["id"] in ws:
            continue
        n += 1
        lic = p.get("license")
        if not lic:
            bad.append(f"{p['name']} {p['version']}: no SPDX licence field"
                       + (f" (licence file {p['license_file']})" if p.get("license_file") else ""))
        elif not passes(lic):
            bad.append(f"{p['name']} {p['version']}: {lic}")
    if bad:
        print(f"licence check: {len(bad)} of {n} dependencies are not under an allowed licence:")
        for b in bad:
            print("  " + b)
        return 1
    print(f"licence check: all {n} dependencies are under allowed licences "
          f"({', '.join(sorted(ALLOWED))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
