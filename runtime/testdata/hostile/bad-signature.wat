;; bad-signature: exports pctl_partition with the signature (i32) -> i32 instead
;; of (i32, i32) -> i32. A host must refuse it at load with an error naming
;; pctl_partition, the expected signature and the one found.
(module
  (memory (export "memory") 17)
  ;; metadata: 97 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"bad-signature\",\"version\":\"1.0.0\",\"description\":\"pctl_partition has the wrong signature\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 97)))
  (func (export "pctl_partition") (param $key_len i32) (result i32)
    (local.get $key_len))
)
