#!/usr/bin/env bash
# Regenerates spec/vectors/ from the real reference implementations (spec/vectors/README.md).
#
#   tools/crosscheck/gen.sh            # all generators
#   tools/crosscheck/gen.sh kafka jump # only some: keys kafka librdkafka sarama jump wasi
#
# Needs: python3, a JDK 17 and Maven (Maven Central), cc + pkg-config + librdkafka-dev
# (Debian: apt-get install librdkafka-dev pkg-config), Go (module proxy), g++, and the PyPI
# package xxhash (pip install xxhash). Set PCTL_GEN_DATE to pin the date written into the
# "source" fields; everything else is deterministic.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/spec/vectors"
keys="$out/keys.txt"
date="${PCTL_GEN_DATE:-$(date -u +%Y-%m-%d)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "gen.sh: $1 not found: $2" >&2; exit 1; }
}

step_keys() {
  need python3 "install Python 3"
  python3 "$here/keys.py" "$keys"
}

step_kafka() {
  need mvn "install Maven and a JDK 17"
  need java "install a JDK 17"
  (cd "$here/java" &&
    mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt &&
    java -cp "target/classes:$(cat target/classpath.txt)" dev.pctl.crosscheck.KafkaVectors "$keys" "$out" "$date")
}

step_librdkafka() {
  need cc "install gcc"
  need pkg-config "apt-get install pkg-config"
  pkg-config --exists rdkafka || { echo "gen.sh: librdkafka not found: apt-get install librdkafka-dev" >&2; exit 1; }
  cc -O2 -Wall -o "$work/librdkafka_vectors" "$here/librdkafka/librdkafka_vectors.c" $(pkg-config --cflags --libs rdkafka)
  "$work/librdkafka_vectors" "$keys" "$out" "$date"
}

step_sarama() {
  need go "install Go"
  (cd "$here/sarama" && go run . "$keys" "$out/sarama-fnv1a.json" "$date")
}

step_jump() {
  need g++ "install g++"
  python3 -c 'import xxhash' 2>/dev/null || { echo "gen.sh: python xxhash not found: pip install xxhash" >&2; exit 1; }
  # No -ffast-math, no -march: the paper's two binary64 operations must round as written.
  g++ -O2 -std=c++17 -o "$work/jump_paper" "$here/jump/jump_paper.cc"
  python3 "$here/jump/gen_jump.py" "$keys" "$out/jump.json" "$date" "$work/jump_paper" "$(g++ --version | head -1)"
}

step_wasi() {
  # abi-v1.md §6.2: the deterministic WASI random stream, SplitMix64 from state 0, outputs
  # little-endian. Written independently of any pctl code, as a Python one-liner.
  python3 -c '
import sys
M=(1<<64)-1; s=0; outs=[]
for _ in range(8):
    s=(s+0x9E3779B97F4A7C15)&M; z=s; z=((z^(z>>30))*0xBF58476D1CE4E5B9)&M; z=((z^(z>>27))*0x94D049BB133111EB)&M; outs.append(z^(z>>31))
assert outs[0]==0xe220a8397b1dcdaf, hex(outs[0])
b=b"".join(o.to_bytes(8,"little") for o in outs)
print("{\"name\":\"wasi-random\",\"spec\":\"abi-v1.md 6.2 random_get stream: SplitMix64, initial state 0, outputs little-endian\",")
print(" \"source\":\"Python one-liner in tools/crosscheck/gen.sh (generated %s)\"," % sys.argv[1])
print(" \"state0\":0,\"first_output\":\"0x%016x\",\"outputs\":[%s],\n \"bytes_hex\":\"%s\"}" % (outs[0], ",".join("\"0x%016x\"" % o for o in outs), b.hex()))
' "$date" > "$out/wasi-random.json"
  echo "wasi: 64 bytes -> $out/wasi-random.json" >&2
}

step_keytoken() {
  # protocol.md 10.1: compacted topics' key tokens, from the spec's text with Python's base64 and
  # hashlib (no pctl code).
  need python3 "install Python 3"
  mkdir -p "$out/compact"
  python3 "$here/keytoken.py" "$out/compact/keytoken.json" "$date"
  echo "keytoken: -> $out/compact/keytoken.json" >&2
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(keys kafka librdkafka sarama jump wasi keytoken)
for s in "${steps[@]}"; do
  case "$s" in
    keys|kafka|librdkafka|sarama|jump|wasi|keytoken) "step_$s" ;;
    *) echo "gen.sh: unknown step $s (keys kafka librdkafka sarama jump wasi keytoken)" >&2; exit 2 ;;
  esac
done
