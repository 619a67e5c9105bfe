;; metadata-invalid-utf8: a correct partitioner (key_len % n) whose metadata document tests
;; spec/abi-v1.md §2.6, rule 1: the description holds the byte 0xE9 (Latin-1 e-acute), which is not
;; valid UTF-8. Go's encoding/json and Java's String decoding replace it with U+FFFD and accepted
;; the module; V8 and Python refused it. Every host must refuse it at load: *invalid plugin
;; metadata*.
(module
  (memory (export "memory") 17)
  ;; metadata: 93 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22metadata-invalid-utf8\22,\22version\22:\221.0.0\22,\22description\22:\22caf\e9 in Latin-1: not UTF-8\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 93)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
