#!/usr/bin/env python3
"""Set packetdrill's verdicts on the kernel beside rxpath's, suite by suite.

    scripts/packetdrill-compare.py KERNEL.json RXPATH.json [--markdown]

Both files are scripts/packetdrill-suites.sh output. Prints the per-suite
table and every script whose verdicts differ. Exits 1 when a script the
kernel passes fails under rxpath and docs/RELIABILITY.md does not name it
(a row `| suite/script.pkt | ... |` under "Scripts the kernel passes and
rxpath fails"); such a script is a bug until it is fixed or named there.
"""
import json
import pathlib
import re
import sys


def load(path):
    rows = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[f"{r['suite']}/{r['script']}"] = r
    return rows


def named_differences(repo):
    text = (repo / "docs/RELIABILITY.md").read_text()
    m = re.search(r"#+ Scripts the kernel passes and rxpath fails\n(.*?)(\n#+ |\Z)", text, re.S)
    if not m:
        return set()
    return set(re.findall(r"^\| `?([a-z_]+/[A-Za-z0-9_.-]+\.pkt)`? \|", m.group(1), re.M))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    kernel, rxpath = load(args[0]), load(args[1])
    repo = pathlib.Path(__file__).resolve().parent.parent
    named = named_differences(repo)
    suites = []
    for key in list(kernel) + [k for k in rxpath if k not in kernel]:
        s = key.split("/")[0]
        if s not in suites:
            suites.append(s)
    print("| suite | kernel | rxpath |")
    print("|---|---:|---:|")
    tk = tr = total = 0
    for s in suites:
        keys = sorted(k for k in set(kernel) | set(rxpath) if k.startswith(s + "/"))
        k = sum(kernel.get(x, {}).get("verdict") == "pass" for x in keys)
        r = sum(rxpath.get(x, {}).get("verdict") == "pass" for x in keys)
        print(f"| {s} | {k}/{len(keys)} | {r}/{len(keys)} |")
        tk, tr, total = tk + k, tr + r, total + len(keys)
    print(f"| **all** | **{tk}/{total}** | **{tr}/{total}** |")
    unnamed = []
    print()
    for key in sorted(set(kernel) | set(rxpath)):
        kv = kernel.get(key, {}).get("verdict", "-")
        rv = rxpath.get(key, {}).get("verdict", "-")
        if kv != rv:
            note = ""
            if kv == "pass" and rv != "pass":
                note = " (named in docs/RELIABILITY.md)" if key in named else " (NOT NAMED: a bug)"
                if key not in named:
                    unnamed.append(key)
            print(f"{key}: kernel {kv}, rxpath {rv}{note}")
    if unnamed:
        print(f"\n{len(unnamed)} script(s) the kernel passes fail under rxpath and are not named in docs/RELIABILITY.md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
