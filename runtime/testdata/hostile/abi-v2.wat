;; abi-v2: pctl_abi_version returns 2; otherwise a valid v1 module. A v1-only
;; host must refuse it with "module declares ABI version 2; this host supports 1;
;; upgrade pctl" (abi-v1.md 2.1 and 9).
(module
  (memory (export "memory") 17)
  ;; metadata: 74 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"abi-v2\",\"version\":\"1.0.0\",\"description\":\"declares ABI version 2\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 2))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 74)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
