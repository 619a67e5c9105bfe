;; missing-export: has every required export but pctl_partition. A host must
;; refuse it at load with an error naming the missing export pctl_partition and
;; its signature (i32, i32) -> i32.
(module
  (memory (export "memory") 17)
  ;; metadata: 80 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"missing-export\",\"version\":\"1.0.0\",\"description\":\"lacks pctl_partition\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 80)))
  ;; Present under another name, so that only the export is missing.
  (func (export "partition") (param $key_len i32) (param $n i32) (result i32)
    (i32.const 0))
)
