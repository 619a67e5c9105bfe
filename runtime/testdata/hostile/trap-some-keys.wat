;; trap-some-keys: a correct partitioner, key_len % n, except that it traps
;; (`unreachable`) when the key's first byte is 0xFF; also in its batch call.
;; A host must fail exactly those keys with a trap error naming the plugin (never
;; turn the trap into a partition), discard the instance, and go on answering
;; other keys with a fresh one.
(module
  (memory (export "memory") 17)
  ;; metadata: 92 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"trap-some-keys\",\"version\":\"1.0.0\",\"description\":\"traps on keys starting with 0xFF\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 92)))
  (func $partition (param $key i32) (param $key_len i32) (param $n i32) (result i32)
    (if (i32.and (i32.gt_s (local.get $key_len) (i32.const 0))
                 (i32.eq (i32.load8_u (local.get $key)) (i32.const 0xFF)))
      (then (unreachable)))
    (i32.rem_u (local.get $key_len) (local.get $n)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (call $partition (i32.const 65536) (local.get $key_len) (local.get $n)))
  ;; Batch layout of abi-v1.md 2.4: u32 lengths, then the keys.
  (func (export "pctl_partition_batch") (param $count i32) (param $n i32) (result i32)
    (local $i i32) (local $off i32) (local $len i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.lt_s (local.get $count) (i32.const 1)) (then (return (i32.const -1))))
    (local.set $off (i32.add (i32.const 65536) (i32.shl (local.get $count) (i32.const 2))))
    (loop $next
      (local.set $len (i32.load (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2)))))
      (i32.store (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2)))
        (call $partition (local.get $off) (local.get $len) (local.get $n)))
      (local.set $off (i32.add (local.get $off) (local.get $len)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $i) (local.get $count))))
    (i32.const 0))
)
