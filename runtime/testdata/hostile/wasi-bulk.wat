;; wasi-bulk: a wasi-deterministic module whose loops call one WASI function that touches many
;; bytes (or none) per turn: counted as one call instruction, a call would run for hours or days
;; (the Python host needs about 9 us per crossing into a host function). spec/abi-v1.md §7.2,
;; rule 4, charges 16384 units per WASI call plus 64 per byte it may touch, before it runs, so the
;; call stops with *time limit*, on every host. The key's first byte picks the function; other keys
;; get key_len % n.
;;   "r" (0x72): random_get of 16 MiB, forever
;;   "w" (0x77): fd_write(1) of 2097152 (empty) iovecs, 16 MiB of them, forever
;;   "p" (0x70): poll_oneoff of 200000 subscriptions (9.6 MB in, 6.4 MB out), forever
;;   "y" (0x79): sched_yield, forever (no bytes: the per-call charge alone must stop it)
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sched_yield" (func $sched_yield (result i32)))
  (memory (export "memory") 17)
  ;; metadata: 95 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22wasi-bulk\22,\22version\22:\221.0.0\22,\22description\22:\22WASI calls that touch megabytes, forever\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 95)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (local $op i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.eqz (local.get $key_len))
      (then (return (i32.const 0))))
    (local.set $op (i32.load8_u (i32.const 65536)))
    (if (i32.eq (local.get $op) (i32.const 0x72))
      (then
        (drop (memory.grow (i32.const 495)))           ;; 512 pages: 32 MiB
        (loop $random
          (drop (call $random_get (i32.const 16777216) (i32.const 16777216)))
          (br $random))))
    (if (i32.eq (local.get $op) (i32.const 0x77))
      (then
        (drop (memory.grow (i32.const 495)))
        (loop $write
          (drop (call $fd_write (i32.const 1) (i32.const 16777216) (i32.const 2097152) (i32.const 8192)))
          (br $write))))
    (if (i32.eq (local.get $op) (i32.const 0x70))
      (then
        (drop (memory.grow (i32.const 495)))
        (loop $poll
          (drop (call $poll_oneoff (i32.const 2097152) (i32.const 16777216) (i32.const 200000) (i32.const 8192)))
          (br $poll))))
    (if (i32.eq (local.get $op) (i32.const 0x79))
      (then
        (loop $yield
          (drop (call $sched_yield))
          (br $yield))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
