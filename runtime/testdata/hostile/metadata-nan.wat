;; metadata-nan: a correct partitioner (key_len % n) whose metadata document tests spec/abi-v1.md
;; §2.6, rule 2: an unknown key has the value NaN, which RFC 8259 does not allow. Python's json
;; module accepts NaN and accepted the module; the others refused it. Every host must refuse it at
;; load: *invalid plugin metadata*.
(module
  (memory (export "memory") 17)
  ;; metadata: 94 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22metadata-nan\22,\22version\22:\221.0.0\22,\22description\22:\22holds NaN, which is not JSON\22,\22x\22:NaN}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 94)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
