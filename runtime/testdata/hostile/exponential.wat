;; exponential: no loops at all, but pctl_partition calls a doubly recursive
;; function of depth 60 (2^61 calls: centuries). Its depth stays far below the
;; call-depth limit, so only counting function entries (or wall-clock time)
;; stops it. A host must stop the call at its time limit and report *time limit*,
;; naming the plugin.
(module
  (memory (export "memory") 17)
  ;; metadata: 93 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"exponential\",\"version\":\"1.0.0\",\"description\":\"doubly recursive, depth 60, no loops\"}")
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
  ;; $fib2(d) = 1 if d == 0, else $fib2(d-1) + $fib2(d-1)
  (func $fib2 (param $d i32) (result i32)
    (if (result i32) (i32.eqz (local.get $d))
      (then (i32.const 1))
      (else (i32.add (call $fib2 (i32.sub (local.get $d) (i32.const 1)))
                     (call $fib2 (i32.sub (local.get $d) (i32.const 1)))))))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (call $fib2 (i32.const 60)) (local.get $n)))
)
