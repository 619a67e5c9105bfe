;; Bulk instructions, tables and a start function, for instrument_test.go: each export below is
;; one bulk instruction whose length is the parameter, so its fuel is its body's instruction count
;; (written beside it, by spec/abi-v1.md §7.2 rule 1) plus n, or 128 n for tables (rule 3). The
;; start function sets $started; the table declares no maximum and the memory a maximum of 1000
;; pages, which the instrumenter lowers to the host's limits.
(module
  (memory (export "memory") 1 1000)
  (table $t 16 funcref)
  (global $started (export "started") (mut i32) (i32.const 0))
  (data $d "0123456789abcdef0123456789abcdef")   ;; 32 bytes, passive
  (elem $e func $nop $nop $nop $nop)             ;; 4 elements, passive
  (func $nop)
  ;; 5 instructions: i32.const, i32.const, local.get, memory.fill, end
  (func (export "fill") (param i32)
    (memory.fill (i32.const 0) (i32.const 0x55) (local.get 0)))
  ;; 5: i32.const, i32.const, local.get, memory.copy, end
  (func (export "copy") (param i32)
    (memory.copy (i32.const 100) (i32.const 0) (local.get 0)))
  ;; 5: i32.const, i32.const, local.get, memory.init, end
  (func (export "init") (param i32)
    (memory.init $d (i32.const 0) (i32.const 0) (local.get 0)))
  ;; 5: i32.const, ref.func, local.get, table.fill, end
  (func (export "tfill") (param i32)
    (table.fill $t (i32.const 0) (ref.func $nop) (local.get 0)))
  ;; 5: i32.const, i32.const, local.get, table.copy, end
  (func (export "tcopy") (param i32)
    (table.copy $t $t (i32.const 8) (i32.const 0) (local.get 0)))
  ;; 5: i32.const, i32.const, local.get, table.init, end
  (func (export "tinit") (param i32)
    (table.init $t $e (i32.const 0) (i32.const 0) (local.get 0)))
  ;; table.grow by n: returns the old size, or -1
  (func (export "tgrow") (param i32) (result i32)
    (table.grow $t (ref.null func) (local.get 0)))
  (func $start (global.set $started (i32.const 1)))
  (start $start)
)
