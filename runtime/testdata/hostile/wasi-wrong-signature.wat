;; wasi-wrong-signature: imports wasi_snapshot_preview1.random_get, a listed
;; function, with the wrong signature (i32) -> i32 instead of (i32, i32) -> i32.
;; A host must refuse it at load with an error naming the import and both
;; signatures.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32) (result i32)))
  (memory (export "memory") 17)
  ;; metadata: 107 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"wasi-wrong-signature\",\"version\":\"1.0.0\",\"description\":\"imports random_get with a wrong signature\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 107)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
