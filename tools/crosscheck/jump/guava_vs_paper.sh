#!/usr/bin/env bash
# Informative: counts the (key, n) pairs on which Guava's Hashing.consistentHash (which
# evaluates the jump step as (b+1) / (((key>>>33)+1) / 2^31)) differs from the paper's
# JumpConsistentHash ((b+1) * (2^31 / ((key>>33)+1))), the one spec/builtins.md pins.
# Also checks Guava's own golden values (HashingTest) against the paper's code.
#   tools/crosscheck/jump/guava_vs_paper.sh [COUNT]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
count="${1:-1000000}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
g++ -O2 -std=c++17 -o "$work/jump_paper" "$here/jump_paper.cc"
(cd "$here/../java" && mvn -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt)
cp="$here/../java/target/classes:$(cat "$here/../java/target/classpath.txt")"

# Guava's goldens (google/guava HashingTest.testConsistentHash_linearCongruentialGeneratorCompatibility).
{ for i in $(seq 0 19); do echo "$i 100"; done
  printf '%s\n' "10863919174838991 11" "2016238256797177309 11" "1673758223894951030 11" \
                "2 100001" "2201 100001" "2202 100001"; } > "$work/golden.txt"
echo "0 55 62 8 45 59 86 97 82 59 73 37 17 56 86 21 90 37 38 83 6 3 5 80343 22152 15018" | tr ' ' '\n' > "$work/golden.want"
"$work/jump_paper" < "$work/golden.txt" > "$work/golden.paper"
java -cp "$cp" dev.pctl.crosscheck.GuavaJump < "$work/golden.txt" > "$work/golden.guava"
cmp -s "$work/golden.want" "$work/golden.guava" && echo "Guava reproduces its own 26 goldens" || echo "Guava does NOT reproduce its goldens"
cmp -s "$work/golden.want" "$work/golden.paper" && echo "the paper's code reproduces all 26 Guava goldens" || echo "the paper's code differs on Guava goldens"

# Pairs found (by a search over random keys with n in [2^30, 2^31)) where the two differ;
# partitioner/builtin's TestJumpFollowsThePaperNotGuava keeps them.
printf '%s\n' "9813187690726211366 1898378292" "7612004585850187597 1896616770" \
  "4439988903201502282 1577780246" "6152995148985398655 1593749890" \
  "7327094575989326061 1220851064" "280831654133012014 1414248490" > "$work/known.txt"
"$work/jump_paper" < "$work/known.txt" > "$work/known.paper"
java -cp "$cp" dev.pctl.crosscheck.GuavaJump < "$work/known.txt" > "$work/known.guava"
paste -d' ' "$work/known.txt" "$work/known.paper" "$work/known.guava" | awk '{print "known: key=" $1 " n=" $2 " paper=" $3 " guava=" $4 ($3 != $4 ? "  (differ)" : "  (SAME?)")}'

# Random pairs (they rarely differ: about 1 in 10^7 for n near 2^31, less for small n):
# SplitMix64 keys, n log-uniform over [1, 2^31-1].
python3 - "$count" > "$work/pairs.txt" <<'PY'
import sys
M=(1<<64)-1; s=0x6a756d70
def nxt():
    global s
    s=(s+0x9E3779B97F4A7C15)&M; z=s
    z=((z^(z>>30))*0xBF58476D1CE4E5B9)&M; z=((z^(z>>27))*0x94D049BB133111EB)&M
    return z^(z>>31)
out=[]
for _ in range(int(sys.argv[1])):
    k=nxt(); bits=1+nxt()%31; n=max(1, nxt() & ((1<<bits)-1))
    out.append(f"{k} {n}\n")
sys.stdout.write("".join(out))
PY
"$work/jump_paper" < "$work/pairs.txt" > "$work/paper.txt"
java -cp "$cp" dev.pctl.crosscheck.GuavaJump < "$work/pairs.txt" > "$work/guava.txt"
paste -d' ' "$work/pairs.txt" "$work/paper.txt" "$work/guava.txt" | awk '$3 != $4 {d++; if (d <= 5) print "differ: key=" $1 " n=" $2 " paper=" $3 " guava=" $4} END {printf "%d of %d random pairs differ between Guava and the paper\n", d, NR}'
