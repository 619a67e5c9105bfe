;; depth: pctl_partition(key_len, n) nests key_len + 2 WebAssembly frames (itself, then
;; $down for key_len, key_len - 1, ..., 0) and returns key_len % n. With the limit of
;; 1000 frames (spec/abi-v1.md §7), keys of up to 998 bytes succeed and longer keys fail
;; with "call stack exhausted". Used by DepthLimitTest; build: wat2wasm depth.wat.
(module
  (memory (export "memory") 17)
  (data (i32.const 1024) "{\"name\":\"depth\",\"version\":\"1.0.0\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 34)))
  (func $down (param $d i32) (result i32)
    (if (result i32) (i32.eqz (local.get $d))
      (then (i32.const 0))
      (else (i32.add (call $down (i32.sub (local.get $d) (i32.const 1))) (i32.const 1)))))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (i32.rem_u (call $down (local.get $key_len)) (local.get $n)))
)
