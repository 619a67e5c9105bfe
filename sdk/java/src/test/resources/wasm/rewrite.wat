;; rewrite: exercises what the host's call-depth rewrite must keep (WasmBinary.instrumentDepth):
;; a start function, a global it sets, a table and call_indirect, ref.func, a multi-value
;; function and an exported function that is also called internally. pctl_partition returns
;; (3 * key_len + 5) % n. See WasmBinaryTest.
(module
  (type $unary (func (param i32) (result i32)))
  (memory (export "memory") 17)
  (global $g (mut i32) (i32.const 0))
  (global $fref (mut funcref) (ref.null func))
  (table 2 funcref)
  (elem (i32.const 0) $double $triple)
  (data (i32.const 1024) "{\"name\":\"rewrite\",\"version\":\"1.0.0\"}")
  (func $start (global.set $g (i32.const 5)) (global.set $fref (ref.func $double)))
  (start $start)
  (func $double (type $unary) (i32.mul (local.get 0) (i32.const 2)))
  (func $triple (type $unary) (i32.mul (local.get 0) (i32.const 3)))
  (func $mv (param i32 i32) (result i32 i32) (local.get 0) (local.get 1))
  (func $abi (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 36)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (local $a i32) (local $b i32)
    (call $mv (local.get $key_len) (local.get $n))
    (local.set $b)
    (local.set $a)
    (i32.rem_u
      (i32.add
        (i32.add (call_indirect (type $unary) (local.get $a) (i32.const 1)) (global.get $g))
        (i32.sub (call $abi) (i32.const 1)))
      (local.get $b)))
)
