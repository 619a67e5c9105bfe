;; table-grow: a correct partitioner (key_len % n) that first checks the table limit of
;; spec/abi-v1.md §7: its table starts with 1 element and declares no maximum; growing it to exactly
;; 131072 elements must succeed, and growing it one element further must fail (table.grow returns
;; -1), on every host. If either is not so it returns n, out of range. (V8 would let it grow to 10
;; million elements, wazero without bound.)
(module
  (memory (export "memory") 17)
  (table $t 1 funcref)
  ;; metadata: 110 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22table-grow\22,\22version\22:\221.0.0\22,\22description\22:\22checks that its table grows to exactly 131072 elements\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 110)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    ;; Up to the limit: must succeed (returns the old size, never -1).
    (if (i32.eq (table.grow $t (ref.null func) (i32.sub (i32.const 131072) (table.size $t))) (i32.const -1))
      (then (return (local.get $n))))
    ;; One more: must fail.
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 1)) (i32.const -1))
      (then (return (local.get $n))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
