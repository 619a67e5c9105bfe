#!/usr/bin/env python3
"""Writes spec/vectors/compact/keytoken.json: the key token of compacted topics (spec/protocol.md
§10.1) computed from the spec's text with Python's own base64 and hashlib, independently of every
pctl implementation:

    token = "k" + base64url-without-padding(key)             if len(key) <= 128
          = "h" + base64url-without-padding(SHA-256(key))    otherwise

Usage: keytoken.py OUT.json [DATE]. The cases are deterministic (a fixed PRNG seed)."""
import base64
import hashlib
import json
import random
import sys


def token(key: bytes) -> str:
    if len(key) <= 128:
        return "k" + base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")
    return "h" + base64.urlsafe_b64encode(hashlib.sha256(key).digest()).decode("ascii").rstrip("=")


def cases():
    out = [b""]
    out += [bytes([b]) for b in range(256)]
    ramp = bytes(range(256))
    out += [ramp[:n] for n in range(2, 141)]  # every padding shape, both sides of 128
    out += [bytes([0xFF]) * n for n in (1, 2, 3, 62, 63, 64, 127, 128, 129)]  # '-' and '_' heavy
    out += [bytes([0xFB, 0xFF]) * 20]
    for w in ("user-00001", "order-42", "ключ-997-键-é", "a.b.c", "*", ">", " ", "tab\there", "x" * 128, "x" * 129):
        out.append(w.encode("utf-8"))
    out += [bytes((i * 31 + 7) % 256 for i in range(n)) for n in (200, 1024, 4096)]
    rnd = random.Random(14)
    out += [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300))) for _ in range(100)]
    return out


def main():
    path = sys.argv[1]
    date = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    doc = {
        "name": "keytoken",
        "source": f"Python {sys.version.split()[0]} base64.urlsafe_b64encode (padding stripped) and hashlib.sha256, "
                  f"from spec/protocol.md §10.1's text by tools/crosscheck/keytoken.py (generated {date})",
        "cases": [{"key_hex": k.hex(), "token": token(k)} for k in cases()],
    }
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
