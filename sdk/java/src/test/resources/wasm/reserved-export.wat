;; reserved-export: a correct pctl module (key_len % n) that exports a global named "pctl.depth",
;; a name the Go host's rewrite uses for itself. Every host refuses it alike; see HostileTest.
(module
  (memory (export "memory") 17)
  (global (export "pctl.depth") i32 (i32.const 0))
  (data (i32.const 1024) "{\"name\":\"reserved-export\",\"version\":\"1.0.0\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 44)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (i32.rem_u (local.get $key_len) (local.get $n)))
)
