;; simd: a pctl module (key_len % n) that uses a WebAssembly feature; see HostileTest.
(module
  (memory (export "memory") 17)
  (data (i32.const 1024) "{\"name\":\"simd\",\"version\":\"1.0.0\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 33)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (i32.rem_u
      (i32x4.extract_lane 2 (i32x4.add (i32x4.splat (local.get $key_len)) (v128.const i32x4 0 0 0 0)))
      (local.get $n)))
)
