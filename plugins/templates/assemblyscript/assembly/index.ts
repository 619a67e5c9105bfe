// my-partitioner: a pctl partitioner (ABI v1) in AssemblyScript, a `portable`
// module (no imports).
//
//   ./build.sh                                   builds my-partitioner.wasm
//   pctl conformance my-partitioner.wasm         checks it
//   pctl partition --plugin ./my-partitioner.wasm --partitions 12 alice bob
//
// The function (the same in pctl's C, Go, Rust and AssemblyScript templates,
// which give identical partitions):
//
//   h = FNV-1a-64 over the key's bytes, starting from 0xcbf29ce484222325 ^ seed
//   h = fmix64(h)                  MurmurHash3's 64-bit finaliser
//   partition = h mod n            unsigned 64-bit remainder
//
// fmix64 is there because FNV-1a's low bits are weak (bit 0 of the hash is
// just the parity of the keys' bit 0s), and "mod n" for a small or
// power-of-two n reads mostly low bits. The seed comes from the optional
// config `seed=<u64>` (pctl ... --config seed=42). No seed means seed 0.
//
// Replace hash() with your own function; keep the rest. Whatever you write,
// the result must depend only on (key, n, config): no Math.random, no Date,
// no Map iteration you did not order, no float NaN bits, no state that
// changes between calls. This file uses raw memory (load/store) and no
// objects: the build uses the `stub` runtime, which never frees, so anything
// allocated per call would grow memory until the host's limit.
//
// Types matter: i32/u32/i64/u64 are distinct. `%` on i64 is signed; the
// hash is a u64 so that `h % n` is the unsigned remainder.

// ABI v1 constants and error codes (spec/abi-v1.md sections 1.3 and 5).
const ABI_VERSION: i32 = 1;
const MAX_KEY: u32 = 65536;
const MAX_CONFIG: u32 = 65536;
const MAX_BUFFER: i32 = 1048576;
const E_INVALID: i32 = -1;
const E_CONFIG: i32 = -2;
const E_UNSUPPORTED: i32 = -3;

// The buffer (spec 2.2): the host writes keys and config here and reads
// results from here. Static and zero-filled, so it costs no module bytes.
const buf: usize = memory.data(MAX_BUFFER, 16);
// The size the host asked for; 0 until pctl_key_buffer. Bounds checks only.
let bufSize: u32 = 0;
// Set once by pctl_configure, before any partition call.
let seed: u64 = 0;

// One literal, ASCII only: pctl_metadata copies it byte by byte into
// metadataBytes (a string concatenation would run at start-up and allocate).
const METADATA =
  '{"name":"my-partitioner","version":"0.1.0","description":"FNV-1a-64 of the key (optional seed), fmix64, modulo n","properties":["ancestry"]}';
const METADATA_MAX: i32 = 1024;
const metadataBytes: usize = memory.data(METADATA_MAX);

// The function's 64-bit hash of key[0, len). u64 arithmetic wraps.
function hash(key: usize, len: u32): u64 {
  let h: u64 = 0xcbf29ce484222325 ^ seed;
  for (let i: u32 = 0; i < len; i++) {
    h ^= <u64>load<u8>(key + <usize>i);
    h *= 0x100000001b3;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccd;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53;
  h ^= h >> 33;
  return h;
}

// 1 <= n <= 2^31-1 (callers check). The result is < n, so it fits an i32.
@inline
function partitionOf(key: usize, len: u32, n: i32): i32 {
  return <i32>(hash(key, len) % <u64>n);
}

// Little-endian u32 load and store, byte by byte (any alignment).
@inline
function load32(p: usize): u32 {
  return <u32>load<u8>(p) | (<u32>load<u8>(p, 1) << 8) |
    (<u32>load<u8>(p, 2) << 16) | (<u32>load<u8>(p, 3) << 24);
}

@inline
function store32(p: usize, v: u32): void {
  store<u8>(p, <u8>v);
  store<u8>(p, <u8>(v >> 8), 1);
  store<u8>(p, <u8>(v >> 16), 2);
  store<u8>(p, <u8>(v >> 24), 3);
}

// Spec 2.1: the ABI version, nothing else.
export function pctl_abi_version(): i32 {
  return ABI_VERSION;
}

// Spec 2.2: called once per instance with 64 KiB <= size <= 1 MiB; returns
// the buffer's address. Every size in that range must succeed.
export function pctl_key_buffer(size: i32): i32 {
  if (size < 1 || size > MAX_BUFFER) return 0;
  bufSize = <u32>size;
  return <i32>buf;
}

// Spec 2.5: the config is buf[0, config_len), lines "K=V\n" sorted by K (pctl
// makes them from --config K=V). Copy what you need: the buffer is
// overwritten by the next call. Reject what you do not understand, unknown
// keys included: a typo must not silently give another layout.
export function pctl_configure(config_len: i32): i32 {
  if (config_len < 0 || <u32>config_len > MAX_CONFIG || <u32>config_len > bufSize) return E_CONFIG;
  const end = <u32>config_len;
  let s: u64 = 0;
  let haveSeed = false;
  let line: u32 = 0;
  while (line < end) {
    let eol = line;
    while (eol < end && load<u8>(buf + <usize>eol) != 0x0a) eol++; // '\n'
    if (eol == end) return E_CONFIG; // every line ends with '\n'
    let eq = line;
    while (eq < eol && load<u8>(buf + <usize>eq) != 0x3d) eq++; // '='
    if (eq == eol || !isKey(line, eq - line, "seed")) return E_CONFIG; // unknown key, or no '='
    // seed=<decimal u64>: 1 to 20 digits, no sign, no overflow.
    const vlen = eol - eq - 1;
    if (haveSeed || vlen < 1 || vlen > 20) return E_CONFIG;
    for (let i = eq + 1; i < eol; i++) {
      const d = <u64>(<u32>load<u8>(buf + <usize>i) - 0x30); // '0'
      if (d > 9 || s > (<u64>-1 - d) / 10) return E_CONFIG;
      s = s * 10 + d;
    }
    haveSeed = true;
    line = eol + 1;
  }
  seed = s;
  return 0;
}

// Whether buf[at, at+len) is the ASCII name.
function isKey(at: u32, len: u32, name: string): bool {
  if (len != <u32>name.length) return false;
  for (let i: u32 = 0; i < len; i++) {
    if (<i32>load<u8>(buf + <usize>(at + i)) != name.charCodeAt(<i32>i)) return false;
  }
  return true;
}

// Spec 2.3: the key is buf[0, key_len). Must not write to the buffer. Check
// the arguments: never read past the key or the buffer.
export function pctl_partition(key_len: i32, n: i32): i32 {
  if (n < 1 || key_len < 0 || <u32>key_len > MAX_KEY || <u32>key_len > bufSize) return E_INVALID;
  return partitionOf(buf, <u32>key_len, n);
}

// Spec 2.4: buf holds count u32 lengths, then the keys' bytes. Result i
// overwrites len[i], after len[i] was read; keys are found by the running sum
// of lengths. Results must equal pctl_partition's, key by key.
export function pctl_partition_batch(count: i32, n: i32): i32 {
  if (n < 1 || count < 1 || <u32>count > bufSize >> 2) return E_INVALID;
  let off: u32 = <u32>count << 2; // where the next key starts
  for (let i: u32 = 0; i < <u32>count; i++) {
    const slot = buf + (<usize>i << 2);
    const len = load32(slot);
    if (len > MAX_KEY || len > bufSize - off) return E_INVALID;
    store32(slot, <u32>partitionOf(buf + <usize>off, len, n));
    off += len;
  }
  return 0;
}

// Spec 2.6: the same JSON document on every call.
export function pctl_metadata(): i64 {
  const len = METADATA.length;
  if (len > METADATA_MAX) unreachable(); // raise METADATA_MAX
  for (let i = 0; i < len; i++) {
    store<u8>(metadataBytes + <usize>i, <u8>METADATA.charCodeAt(i));
  }
  return (<i64>metadataBytes << 32) | <i64>len;
}

// Spec 2.7, optional: which partitions of from_n can a key of partition child
// of to_n come from? For h mod n there is an exact answer when to_n is a
// multiple of from_n (h mod from_n = (h mod to_n) mod from_n): one parent.
// Otherwise decline, and hosts compute ancestry per key. Delete this export,
// and "ancestry" from the metadata, if your function has no such rule.
export function pctl_ancestry(from_n: i32, to_n: i32, child: i32): i32 {
  if (from_n < 1 || to_n < 1 || child < 0 || child >= to_n) return E_INVALID;
  if (to_n % from_n != 0) return E_UNSUPPORTED;
  const parent = <u32>(child % from_n);
  store32(buf, parent); // lo
  store32(buf + 4, parent + 1); // hi, exclusive
  return 1;
}
