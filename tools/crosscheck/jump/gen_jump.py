#!/usr/bin/env python3
"""Writes spec/vectors/jump.json: XXH64 (seed 0) from the PyPI `xxhash` package (the
official xxHash C library), then the paper's JumpConsistentHash compiled from
jump_paper.cc with g++. Neither half shares code with partitioner/builtin.

Usage: gen_jump.py KEYS_TXT OUT_FILE DATE JUMP_PAPER_BINARY GXX_VERSION
"""
import subprocess
import sys

import xxhash


def main():
    keys_txt, out_file, date, binary, gxx = sys.argv[1:6]
    cases = []
    with open(keys_txt) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            ns, _, hexkey = line.partition(" x")
            key = bytes.fromhex(hexkey)
            h = xxhash.xxh64_intdigest(key, seed=0)
            for n in ns.split(","):
                cases.append((hexkey, h, int(n)))
    stdin = "".join(f"{h} {n}\n" for _, h, n in cases)
    res = subprocess.run([binary], input=stdin, capture_output=True, text=True, check=True)
    parts = [int(x) for x in res.stdout.split()]
    if len(parts) != len(cases):
        sys.exit(f"gen_jump: {binary} answered {len(parts)} of {len(cases)} cases")
    source = (f"python xxhash {xxhash.VERSION} (xxHash {xxhash.XXHASH_VERSION}) xxh64 seed 0, then the"
              f" paper's JumpConsistentHash (Lamping & Veach 2014) compiled by {gxx}"
              f" via tools/crosscheck/jump (generated {date})")
    with open(out_file, "w", newline="\n") as f:
        f.write('{"partitioner":"jump","source":"%s",\n "cases":[\n' % source)
        f.write(",\n".join('  {"key_hex":"%s","n":%d,"partition":%d}' % (hx, n, p)
                           for (hx, _, n), p in zip(cases, parts)))
        f.write("\n ]}\n")
    print(f"gen_jump: {len(cases)} cases -> {out_file}", file=sys.stderr)


if __name__ == "__main__":
    main()
