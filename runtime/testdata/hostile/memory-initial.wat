;; memory-initial: declares an initial memory of 513 pages, one above the
;; 512-page limit; otherwise a correct partitioner (key_len % n). A host must
;; refuse it at load (*memory limit*), before running any of it.
(module
  (memory (export "memory") 513)
  ;; metadata: 90 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"memory-initial\",\"version\":\"1.0.0\",\"description\":\"initial memory above the limit\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 90)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
