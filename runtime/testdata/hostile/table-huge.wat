;; table-huge: 270 bytes that declare a table of 134217728 (2^27) elements and fill it from
;; the start function: about 2 GiB per instance on the engines that allocate tables eagerly (issue
;; 11, item 5: conformance peaked near 7 GB and a memory-capped broker died on the upload). The
;; table limit of spec/abi-v1.md §7.3 (131072 elements) refuses it at load, before anything is
;; allocated: *table limit*, on every host. Its partition would be key_len % n.
(module
  (memory (export "memory") 17)
  (table $t 134217728 funcref)
  ;; metadata: 39 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22table-huge\22,\22version\22:\221.0.0\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 39)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
  (func $fill
    (table.fill $t (i32.const 0) (ref.null func) (i32.const 134217728)))
  (start $fill)
)
