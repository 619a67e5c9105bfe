;; grow-hash: a correct partitioner, h = h*31 + byte over the key (i32, wrapping,
;; from 0), then h mod n (unsigned), that grows its memory by one page on every
;; call (single and batch) while the limit allows. In JavaScript every growth
;; replaces memory.buffer, so a host that keeps a view of memory from before a
;; call writes the next keys into the old, detached buffer: the module then
;; reads stale or zero bytes and answers wrong partitions (sdk/node tests).
;; Rebuild: wat2wasm grow-hash.wat -o grow-hash.wasm
(module
  (memory (export "memory") 17)
  (data (i32.const 1024) "{\"name\":\"grow-hash\",\"version\":\"1.0.0\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 38)))
  (func $hash (param $key i32) (param $len i32) (param $n i32) (result i32)
    (local $h i32) (local $end i32)
    (local.set $end (i32.add (local.get $key) (local.get $len)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $key) (local.get $end)))
        (local.set $h (i32.add (i32.mul (local.get $h) (i32.const 31)) (i32.load8_u (local.get $key))))
        (local.set $key (i32.add (local.get $key) (i32.const 1)))
        (br $next)))
    (i32.rem_u (local.get $h) (local.get $n)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (drop (memory.grow (i32.const 1)))
    (call $hash (i32.const 65536) (local.get $key_len) (local.get $n)))
  (func (export "pctl_partition_batch") (param $count i32) (param $n i32) (result i32)
    (local $i i32) (local $off i32) (local $len i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.lt_s (local.get $count) (i32.const 1)) (then (return (i32.const -1))))
    (drop (memory.grow (i32.const 1)))
    (local.set $off (i32.add (i32.const 65536) (i32.shl (local.get $count) (i32.const 2))))
    (loop $next
      (local.set $len (i32.load (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2)))))
      (i32.store (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2)))
        (call $hash (local.get $off) (local.get $len) (local.get $n)))
      (local.set $off (i32.add (local.get $off) (local.get $len)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $i) (local.get $count))))
    (i32.const 0))
)
