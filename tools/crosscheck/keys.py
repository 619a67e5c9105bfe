#!/usr/bin/env python3
"""Writes spec/vectors/keys.txt: the one list of (key, partition counts) cases that every
cross-check generator reads, so that every vector file covers the same keys.

Deterministic: the only randomness is SplitMix64 with a fixed seed, written out here so that
the list can be rebuilt in any language. Format (spec/vectors/README.md):

    # comment
    <n>[,<n>...] x<key as lowercase hex>

The "x" prefix keeps the empty key visible ("x" alone).
"""
import os
import sys

SEED = 0x7063746C2D766563  # "pctl-vec"
NS = [1, 2, 3, 7, 8, 16, 31, 100, 1000, 65535, 2147483647]
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, k):
        return self.next() % k

    def bytes(self, length):
        out = bytearray()
        while len(out) < length:
            out += self.next().to_bytes(8, "little")
        return bytes(out[:length])

    def ns(self, count):
        """count distinct partition counts from NS, in NS order."""
        picked = set()
        while len(picked) < count:
            picked.add(self.below(len(NS)))
        return [NS[i] for i in sorted(picked)]


def xxh_sanity_buffer(length):
    # Cyan4973/xxHash cli/xsum_sanity_check.c, XSUM_fillTestBuffer.
    gen, out = 2654435761, bytearray()
    for _ in range(length):
        out.append(gen >> 56)
        gen = (gen * 11400714785074694797) & MASK
    return bytes(out)


# Keys the reference projects use in their own tests.
REFERENCE_KEYS = [
    # apache/kafka UtilsTest.testMurmur2
    b"21", b"foobar", b"a-little-bit-long-string", b"a-little-bit-longer-string",
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", b"abc",
    # librdkafka tests/0048-partitioner.c ("" is the empty key, written once above)
    b"23456", b"this is another string with more length to it perhaps", b"hejsan",
    # librdkafka src/rdfnv1a.c unittest_fnv1a
    b"kafka", b"giberish123456789", b"1234", b"234", b"34", b"4",
    b"PreAmbleWillBeRemoved,ThePrePartThatIs", b"reAmbleWillBeRemoved,ThePrePartThatIs",
    b"eAmbleWillBeRemoved,ThePrePartThatIs", b"AmbleWillBeRemoved,ThePrePartThatIs",
    # IBM/sarama partitioner_test.go ("1468509572224" has FNV-1a 0x80000000 = INT32_MIN)
    b"1468509572224", b"abc123def456", b"SheetJS", b"9e8c7f4cf45857cfff7645d6",
    b"3900446192ff85a5f67da10c", b"0f4407b7a67d6d27de372198", b"hi", b"key is set",
    # xxHash strings (python-xxhash README, ClickHouse 00803_xxhash.sql)
    b"a", b"ab", b"ABC", b"xxhash", b"foo", b"bar",
    b"Nobody inspects the spammish repetition",
]

# Keys whose jump partition differs, for these n, between the paper's floating-point step
# (which spec/builtins.md pins) and Guava's reordered one (found by searching
# "jump-rounding-<i>"; see tools/crosscheck/jump/guava_vs_paper.sh). A jump module that
# copies Guava's expression fails on them.
JUMP_ROUNDING_KEYS = [b"jump-rounding-%d" % i for i in (
    1359448, 1995426, 27350475, 36032363, 59616215, 66838319, 70997457, 72089914)]
JUMP_ROUNDING_NS = [1073741824, 1500000000, 2000000000, 2147483647]

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu kafka pulsar "
    "nats jetstream partition epoch broker consumer producer ancestry wasm murmur crc fnv jump "
    "Hello World! The quick brown fox jumps over the lazy dog 0 1 42 -1 3.14 null true false "
    "\u00e9t\u00e9 \u65e5\u672c \U0001F600"
).split(" ")


def cases():
    rng = SplitMix64(SEED)
    out = [(b"", NS)]                                   # the empty key is a key
    out += [(bytes([b]), rng.ns(3)) for b in range(256)]  # every single byte
    out += [(k, NS) for k in REFERENCE_KEYS]
    out += [(k, JUMP_ROUNDING_NS) for k in JUMP_ROUNDING_KEYS]
    out += [(w.encode("utf-8"), rng.ns(3)) for w in WORDS]
    out += [(f"user-{i}".encode(), rng.ns(2)) for i in range(40)]
    out += [(f"order-{i:06d}".encode(), rng.ns(2)) for i in range(40)]
    sanity = xxh_sanity_buffer(2367)
    # Every length around the block sizes (4 for murmur2, 8/32 for XXH64).
    out += [(sanity[:n], rng.ns(2)) for n in range(1, 72)]
    out += [(sanity[:n], rng.ns(2)) for n in (222, 2367)]
    out += [(bytes(i & 0xFF for i in range(1024)), rng.ns(2))]   # 1 KiB, counting
    out += [(b"\xff" * 1024, rng.ns(2))]                           # 1 KiB, all ones
    out += [(rng.bytes(1024), rng.ns(2))]                          # 1 KiB, random
    out += [(rng.bytes(4096), rng.ns(2))]
    out += [(rng.bytes(65536), [7, 2147483647])]                   # PCTL_MAX_KEY
    for _ in range(2000):                                          # random binary keys
        out.append((rng.bytes(rng.below(301)), rng.ns(2)))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "..", "spec", "vectors", "keys.txt")
    cs = cases()
    with open(path, "w", newline="\n") as f:
        f.write("# pctl cross-check cases, generated by tools/crosscheck/keys.py; do not edit.\n")
        f.write("# Each line: <n>[,<n>...] x<key hex>. See spec/vectors/README.md.\n")
        for key, ns in cs:
            f.write(",".join(str(n) for n in ns) + " x" + key.hex() + "\n")
    print(f"keys.py: {len(cs)} keys, {sum(len(ns) for _, ns in cs)} cases -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
