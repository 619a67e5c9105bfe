// The reference for pctl's "jump" partitioner: JumpConsistentHash exactly as printed in
// Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm" (2014), Figure 1,
// wrapped in a filter. Reads lines "KEY N" (KEY an unsigned 64-bit decimal, 1 <= N <=
// 2^31-1) from stdin and prints JumpConsistentHash(KEY, N), one per line.
//
// Build: g++ -O2 -std=c++17 -o jump_paper jump_paper.cc   (no -ffast-math: the result
// depends on the two binary64 operations being rounded as written).
#include <cinttypes>
#include <cstdint>
#include <cstdio>

int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets) {
  int64_t b = -1, j = 0;
  while (j < num_buckets) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = (b + 1) * (double(1LL << 31) / double((key >> 33) + 1));
  }
  return b;
}

int main() {
  uint64_t key;
  int32_t n;
  while (std::scanf("%" SCNu64 " %" SCNd32, &key, &n) == 2) {
    std::printf("%" PRId32 "\n", JumpConsistentHash(key, n));
  }
  return 0;
}
