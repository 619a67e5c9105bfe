//! my-partitioner: a pctl partitioner (ABI v1) in `no_std` Rust, a
//! `portable` module (no imports: no std, no WASI, no allocator).
//!
//! ```text
//! ./build.sh                                   builds my-partitioner.wasm
//! pctl conformance my-partitioner.wasm         checks it
//! pctl partition --plugin ./my-partitioner.wasm --partitions 12 alice bob
//! ```
//!
//! The function (the same in pctl's C, Go, Rust and AssemblyScript
//! templates, which give identical partitions):
//!
//! ```text
//! h = FNV-1a-64 over the key's bytes, starting from 0xcbf29ce484222325 ^ seed
//! h = fmix64(h)                  MurmurHash3's 64-bit finaliser
//! partition = h mod n            unsigned 64-bit remainder
//! ```
//!
//! fmix64 is there because FNV-1a's low bits are weak (bit 0 of the hash is
//! just the parity of the keys' bit 0s), and "mod n" for a small or
//! power-of-two n reads mostly low bits. The seed comes from the optional
//! config `seed=<u64>` (`pctl ... --config seed=42`). No seed means seed 0.
//!
//! Replace `hash` with your own function; keep the rest. Whatever you write,
//! the result must depend only on (key, n, config): no `HashMap` iteration
//! order (its hasher is randomly seeded where std has one), no clock, no
//! randomness, no state that changes between calls, no float NaN bits.
//! A panic becomes a trap (`unreachable`): the host reports it and replaces
//! the instance; return an error code instead where you can.

#![no_std]

use core::ptr::addr_of_mut;

// ABI v1 constants and error codes (spec/abi-v1.md sections 1.3 and 5).
const ABI_VERSION: i32 = 1;
const MAX_KEY: u32 = 65536;
const MAX_CONFIG: u32 = 65536;
const MAX_BUFFER: usize = 1 << 20;
const E_INVALID: i32 = -1;
const E_CONFIG: i32 = -2;
const E_UNSUPPORTED: i32 = -3;

/// The buffer (spec 2.2): the host writes keys and config here and reads
/// results from here. Zero-initialised, so it costs no module bytes.
#[repr(C, align(16))]
struct Buffer([u8; MAX_BUFFER]);

static mut BUF: Buffer = Buffer([0; MAX_BUFFER]);

/// The size the host asked for; 0 until `pctl_key_buffer`. Bounds checks only.
static mut BUF_SIZE: u32 = 0;

/// Set once by `pctl_configure`, before any partition call.
static mut SEED: u64 = 0;

static METADATA: &[u8] = b"{\"name\":\"my-partitioner\",\"version\":\"0.1.0\",\
\"description\":\"FNV-1a-64 of the key (optional seed), fmix64, modulo n\",\
\"properties\":[\"ancestry\"]}";

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

// An instance is only ever used by one thread at a time (spec section 3), so
// the `static mut`s are read and written without synchronisation, and only
// through these accessors and raw pointers, never through references.

fn buf_ptr() -> *mut u8 {
    // SAFETY: only the address is taken.
    unsafe { addr_of_mut!(BUF) as *mut u8 }
}

fn buf_size() -> u32 {
    // SAFETY: single-threaded, see above.
    unsafe { BUF_SIZE }
}

/// `buf[start, start+len)` as a slice. The caller checks that it lies inside
/// `[0, buf_size())`.
fn buf_slice(start: u32, len: u32) -> &'static [u8] {
    // SAFETY: inside BUF (checked by the caller); no &mut to BUF exists while
    // the slice is used: writes go through raw pointers (store_u32).
    unsafe { core::slice::from_raw_parts(buf_ptr().add(start as usize), len as usize) }
}

fn load_u32(at: u32) -> u32 {
    // SAFETY: callers keep at + 4 <= buf_size().
    u32::from_le_bytes(unsafe { (buf_ptr().add(at as usize) as *const [u8; 4]).read() })
}

fn store_u32(at: u32, v: u32) {
    // SAFETY: callers keep at + 4 <= buf_size().
    unsafe { (buf_ptr().add(at as usize) as *mut [u8; 4]).write(v.to_le_bytes()) }
}

/// The function's 64-bit hash. `wrapping_mul`: the arithmetic wraps on
/// purpose (a plain `*` would be a panic in a debug build).
fn hash(key: &[u8], seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// `1 <= n <= 2^31-1` (callers check). Unsigned remainder: `h as i64 % n`
/// would be negative for half the keys. The result is < n, so it fits.
fn partition_of(key: &[u8], n: i32) -> i32 {
    // SAFETY: single-threaded; SEED changes only in pctl_configure.
    let seed = unsafe { SEED };
    (hash(key, seed) % n as u64) as i32
}

/// Spec 2.1: the ABI version, nothing else.
#[no_mangle]
pub extern "C" fn pctl_abi_version() -> i32 {
    ABI_VERSION
}

/// Spec 2.2: called once per instance with 64 KiB <= size <= 1 MiB; returns
/// the buffer's address. Every size in that range must succeed.
#[no_mangle]
pub extern "C" fn pctl_key_buffer(size: i32) -> i32 {
    if size < 1 || size as usize > MAX_BUFFER {
        return 0;
    }
    // SAFETY: single-threaded.
    unsafe { BUF_SIZE = size as u32 };
    buf_ptr() as i32
}

/// Parses 1 to 20 decimal digits, no sign, without overflow.
fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// Spec 2.5: the config is `buf[0, config_len)`, lines `K=V\n` sorted by K
/// (pctl makes them from `--config K=V`). Copy what you need: the buffer is
/// overwritten by the next call. Reject what you do not understand, unknown
/// keys included: a typo must not silently give another layout.
#[no_mangle]
pub extern "C" fn pctl_configure(config_len: i32) -> i32 {
    if config_len < 0 || config_len as u32 > MAX_CONFIG || config_len as u32 > buf_size() {
        return E_CONFIG;
    }
    let mut cfg = buf_slice(0, config_len as u32);
    let mut seed: Option<u64> = None;
    while !cfg.is_empty() {
        let eol = match cfg.iter().position(|&c| c == b'\n') {
            Some(i) => i,
            None => return E_CONFIG, // every line ends with '\n'
        };
        let line = &cfg[..eol];
        cfg = &cfg[eol + 1..];
        let eq = match line.iter().position(|&c| c == b'=') {
            Some(i) => i,
            None => return E_CONFIG,
        };
        match (&line[..eq], parse_u64(&line[eq + 1..])) {
            (b"seed", Some(v)) if seed.is_none() => seed = Some(v),
            _ => return E_CONFIG, // unknown key, bad value, or seed twice
        }
    }
    // SAFETY: single-threaded; no partition call runs during configure.
    unsafe { SEED = seed.unwrap_or(0) };
    0
}

/// Spec 2.3: the key is `buf[0, key_len)`. Must not write to the buffer.
/// Check the arguments: never read past the key or the buffer.
#[no_mangle]
pub extern "C" fn pctl_partition(key_len: i32, n: i32) -> i32 {
    if n < 1 || key_len < 0 || key_len as u32 > MAX_KEY || key_len as u32 > buf_size() {
        return E_INVALID;
    }
    partition_of(buf_slice(0, key_len as u32), n)
}

/// Spec 2.4: buf holds `count` u32 lengths, then the keys' bytes. Result i
/// overwrites `len[i]`, after `len[i]` was read; keys are found by the running
/// sum of lengths. Results must equal `pctl_partition`'s, key by key.
#[no_mangle]
pub extern "C" fn pctl_partition_batch(count: i32, n: i32) -> i32 {
    let size = buf_size();
    if n < 1 || count < 1 || count as u32 > size / 4 {
        return E_INVALID;
    }
    let mut off = 4 * count as u32; // where the next key starts
    for i in 0..count as u32 {
        let len = load_u32(4 * i);
        if len > MAX_KEY || len > size - off {
            return E_INVALID;
        }
        let p = partition_of(buf_slice(off, len), n);
        store_u32(4 * i, p as u32);
        off += len;
    }
    0
}

/// Spec 2.6: the same JSON document on every call.
#[no_mangle]
pub extern "C" fn pctl_metadata() -> i64 {
    ((METADATA.as_ptr() as i64) << 32) | METADATA.len() as i64
}

/// Spec 2.7, optional: which partitions of `from_n` can a key of partition
/// `child` of `to_n` come from? For h mod n there is an exact answer when
/// `to_n` is a multiple of `from_n` (h mod from_n = (h mod to_n) mod from_n):
/// one parent. Otherwise decline, and hosts compute ancestry per key. Delete
/// this export, and "ancestry" from the metadata, if your function has no
/// such rule.
#[no_mangle]
pub extern "C" fn pctl_ancestry(from_n: i32, to_n: i32, child: i32) -> i32 {
    if from_n < 1 || to_n < 1 || child < 0 || child >= to_n {
        return E_INVALID;
    }
    if to_n % from_n != 0 {
        return E_UNSUPPORTED;
    }
    let parent = (child % from_n) as u32;
    store_u32(0, parent); // lo
    store_u32(4, parent + 1); // hi, exclusive
    1
}
