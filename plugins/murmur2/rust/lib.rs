//! kafka-murmur2 for pctl, in Rust: the Apache Kafka Java client's default
//! partitioner for keyed records, `toPositive(murmur2(key)) % n`
//! (spec/builtins.md), as a `portable` module (no imports) implementing
//! spec/abi-v1.md. It must give the same partition as
//! plugins/builtin/kafka-murmur2.wasm for every key and n.
//!
//! `no_std` and built by rustc alone (no cargo, no crates); see the
//! `murmur2/kafka-murmur2-rust.wasm` rule in plugins/Makefile.

#![no_std]

use core::num::NonZeroU32;
use core::ptr::addr_of_mut;

const ABI_VERSION: i32 = 1;
const MAX_KEY: u32 = 65536;
const MAX_BUFFER: usize = 1 << 20;
const E_INVALID: i32 = -1;

/// The buffer (abi-v1 section 2.2): zero-initialised, costs no module bytes.
#[repr(C, align(16))]
struct Buffer([u8; MAX_BUFFER]);

static mut BUF: Buffer = Buffer([0; MAX_BUFFER]);

/// The size the host asked for; 0 until `pctl_key_buffer`. Bounds checks only.
static mut BUF_SIZE: u32 = 0;

static METADATA: &[u8] = b"{\"name\":\"kafka-murmur2-rust\",\"version\":\"1.0.0\",\
\"description\":\"Kafka Java client default partitioner, built with Rust\",\
\"properties\":[\"compatible:kafka-murmur2\"]}";

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

fn buf() -> *mut u8 {
    // SAFETY: only the address is taken; instances are single-threaded.
    unsafe { addr_of_mut!(BUF) as *mut u8 }
}

fn buf_size() -> u32 {
    // SAFETY: instances are single-threaded (abi-v1 section 3).
    unsafe { BUF_SIZE }
}

/// MurmurHash2 exactly as Kafka's `Utils.murmur2`.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747b28c ^ data.len() as u32;
    let blocks = data.chunks_exact(4);
    let tail = blocks.remainder();
    for b in blocks {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() == 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// `toPositive` is `x & 0x7fffffff`, not `abs(x)`. `n` is non-zero by type,
/// so no division-by-zero panic path is compiled in.
fn partition_of(key: &[u8], n: NonZeroU32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % n
}

/// `n` as a partition count, or `None` when it is below 1.
fn partitions(n: i32) -> Option<NonZeroU32> {
    if n < 1 {
        return None;
    }
    NonZeroU32::new(n as u32)
}

#[no_mangle]
pub extern "C" fn pctl_abi_version() -> i32 {
    ABI_VERSION
}

#[no_mangle]
pub extern "C" fn pctl_key_buffer(size: i32) -> i32 {
    if size < 1 || size as usize > MAX_BUFFER {
        return 0;
    }
    // SAFETY: instances are single-threaded.
    unsafe { BUF_SIZE = size as u32 };
    buf() as i32
}

#[no_mangle]
pub extern "C" fn pctl_partition(key_len: i32, n: i32) -> i32 {
    let n = match partitions(n) {
        Some(n) if key_len >= 0 && key_len as u32 <= MAX_KEY && key_len as u32 <= buf_size() => n,
        _ => return E_INVALID,
    };
    // SAFETY: key_len <= BUF_SIZE <= MAX_BUFFER, inside BUF.
    let key = unsafe { core::slice::from_raw_parts(buf(), key_len as usize) };
    partition_of(key, n) as i32
}

#[no_mangle]
pub extern "C" fn pctl_partition_batch(count: i32, n: i32) -> i32 {
    let size = buf_size();
    let n = match partitions(n) {
        Some(n) if count >= 1 && count as u32 <= size / 4 => n,
        _ => return E_INVALID,
    };
    let base = buf();
    let mut off = 4 * count as u32;
    for i in 0..count as usize {
        // SAFETY: every access below stays inside [0, BUF_SIZE): slot i is
        // below 4*count, and the key is checked against the size. Slots are
        // read and written through raw pointers, never as overlapping slices.
        unsafe {
            let slot = base.add(4 * i) as *mut [u8; 4];
            let len = u32::from_le_bytes(slot.read());
            if len > MAX_KEY || len > size - off {
                return E_INVALID;
            }
            let key = core::slice::from_raw_parts(base.add(off as usize), len as usize);
            slot.write(partition_of(key, n).to_le_bytes());
            off += len;
        }
    }
    0
}

#[no_mangle]
pub extern "C" fn pctl_metadata() -> i64 {
    ((METADATA.as_ptr() as i64) << 32) | METADATA.len() as i64
}
