;; loop-br-table: pctl_partition loops forever, jumping back with br_table only (no br, no call).
;; Chicory's interpreter checks for interruption only at calls and br, so the host checks at
;; br_if and br_table itself; see HostileTest.
(module
  (memory (export "memory") 17)
  (data (i32.const 1024) "{\"name\":\"loop-br-table\",\"version\":\"1.0.0\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 42)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (loop $l (br_table $l $l (i32.const 0)))
    (i32.const 0))
)
