;; rand-clock: a *benign-looking*, loadable wasi-deterministic module that
;; imports clock_time_get and random_get (both allowed) and lets its result
;; depend on them: (key_len + clock + next random u64) % n. Hosts load and run
;; it; results stay in [0, n). Conformance must fail it: its results change
;; between calls on one instance (the random stream advances) and between runs
;; with another clock or seed (abi-v1.md 6.2).
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 17)
  ;; metadata: 91 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"rand-clock\",\"version\":\"1.0.0\",\"description\":\"depends on the clock and random_get\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 91)))
  ;; Scratch for the WASI results: [512, 528), outside the buffer.
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 512)))
    (drop (call $random_get (i32.const 520) (i32.const 8)))
    (i32.wrap_i64
      (i64.rem_u
        (i64.add (i64.extend_i32_u (local.get $key_len))
                 (i64.add (i64.shr_u (i64.load (i32.const 512)) (i64.const 1))
                          (i64.shr_u (i64.load (i32.const 520)) (i64.const 1))))
        (i64.extend_i32_u (local.get $n)))))
)
