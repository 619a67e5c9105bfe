;; out-of-range: returns n (one past the last partition) for keys of odd length,
;; key_len % n for the others; also in its batch call. A host must report
;; *out of range* (result n for n partitions), naming the plugin, for exactly the
;; odd-length keys; conformance fails the module.
(module
  (memory (export "memory") 17)
  ;; metadata: 87 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"out-of-range\",\"version\":\"1.0.0\",\"description\":\"returns n for odd-length keys\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 87)))
  (func $partition (param $key_len i32) (param $n i32) (result i32)
    (if (result i32) (i32.and (local.get $key_len) (i32.const 1))
      (then (local.get $n))
      (else (i32.rem_u (local.get $key_len) (local.get $n)))))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (call $partition (local.get $key_len) (local.get $n)))
  ;; Batch layout of abi-v1.md 2.4: u32 lengths, then the keys.
  (func (export "pctl_partition_batch") (param $count i32) (param $n i32) (result i32)
    (local $i i32) (local $slot i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.lt_s (local.get $count) (i32.const 1)) (then (return (i32.const -1))))
    (loop $next
      (local.set $slot (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2))))
      (i32.store (local.get $slot) (call $partition (i32.load (local.get $slot)) (local.get $n)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $i) (local.get $count))))
    (i32.const 0))
)
