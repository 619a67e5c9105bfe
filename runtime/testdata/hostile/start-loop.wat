;; start-loop: a correct partitioner (key_len % n) whose start function never returns. A host
;; must stop it at the start function's budget (spec/abi-v1.md §7: 2^33 units) and refuse the
;; module with *time limit*, not as a trap: conformance reports it under `limits` (issue 11,
;; item 7).
(module
  (memory (export "memory") 17)
  ;; metadata: 88 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22start-loop\22,\22version\22:\221.0.0\22,\22description\22:\22the start function loops forever\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 88)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
  (func $forever
    (loop $l (br $l)))
  (start $forever)
)
