;; elem-out-of-bounds: a correct partitioner (key_len % n) with an active element segment that
;; writes element 1 of a 1-element table. The core specification makes instantiation fail, and V8,
;; wasmtime and Chicory refuse it; wazero 1.12 instantiated it, so the broker accepted a plugin
;; that the other SDKs cannot run (issue 11, item 6). spec/abi-v1.md §7.3: every host refuses it at
;; load, *invalid WebAssembly module*.
(module
  (memory (export "memory") 17)
  (table $t 1 funcref)
  (elem (table $t) (i32.const 1) func $f)
  ;; metadata: 108 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22elem-out-of-bounds\22,\22version\22:\221.0.0\22,\22description\22:\22an element segment past the end of its table\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 108)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
  (func $f)
)
