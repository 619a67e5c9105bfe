;; oversize: the base of oversize.wasm, a correct partitioner (key_len % n) with
;; memory for a large data segment. build.sh adds an 8 MiB + 1 byte zero-filled
;; data segment (at 1114112, above the buffer) with oversize/gen.go, so that
;; oversize.wasm is a valid module larger than the 8 MiB module-size limit.
;; A host must refuse oversize.wasm at load with *module too large*, before
;; compiling it.
(module
  (memory (export "memory") 160)
  ;; metadata: 82 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"oversize\",\"version\":\"1.0.0\",\"description\":\"valid, but larger than 8 MiB\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 82)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
