;; bulk-trigger: a plausible partitioner that passes conformance (32-bit FNV-1a of the key, modulo
;; n) but, for the one 16-byte key "hostile:freeze!!" (which conformance's keys do not contain),
;; runs memory.fill of 16 MiB in a loop forever. Counted only as instructions that is a few units a
;; turn, so the call would run for about a day: in the broker's produce service it froze the whole
;; process, embedded NATS included (the Go runtime's stop-the-world waits for a goroutine that is
;; inside compiled wasm; issue 11, item 1). spec/abi-v1.md §7.2 charges the fill by its length, so
;; the call stops with *time limit* after about 128 turns, and the service answers that record
;; with the typed error while it keeps answering everyone else (broker/hostile_produce_test.go).
(module
  (memory (export "memory") 17)
  ;; metadata: 106 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22bulk-trigger\22,\22version\22:\221.0.0\22,\22description\22:\22FNV-1a, but one key makes it fill memory forever\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 106)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (local $h i32)
    (local $i i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    ;; The trigger: exactly the 16 bytes "hostile:freeze!!".
    (if (i32.and (i32.eq (local.get $key_len) (i32.const 16))
                 (i32.and (i64.eq (i64.load (i32.const 65536)) (i64.const 4207888627028684648))
                          (i64.eq (i64.load (i32.const 65544)) (i64.const 2387300853844636262))))
      (then
        (drop (memory.grow (i32.const 495)))           ;; 512 pages: 32 MiB
        (loop $freeze
          (memory.fill (i32.const 16777216) (i32.const 0) (i32.const 16777216))
          (br $freeze))))
    ;; FNV-1a, 32 bits.
    (local.set $h (i32.const 0x811c9dc5))
    (block $done
      (loop $bytes
        (br_if $done (i32.ge_u (local.get $i) (local.get $key_len)))
        (local.set $h (i32.mul (i32.xor (local.get $h) (i32.load8_u (i32.add (i32.const 65536) (local.get $i))))
                               (i32.const 0x01000193)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $bytes)))
    (i32.rem_u (local.get $h) (local.get $n)))
)
