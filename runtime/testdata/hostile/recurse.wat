;; recurse: pctl_partition recurses without end (the addition after the call
;; keeps it from being a tail call). A host must stop it at the call-depth limit
;; and report *call stack exhausted*, naming the plugin.
(module
  (memory (export "memory") 17)
  ;; metadata: 72 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"recurse\",\"version\":\"1.0.0\",\"description\":\"unbounded recursion\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 72)))
  (func $down (param $depth i32) (result i32)
    (i32.add (call $down (i32.add (local.get $depth) (i32.const 1))) (i32.const 1)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (call $down (i32.const 0)))
)
