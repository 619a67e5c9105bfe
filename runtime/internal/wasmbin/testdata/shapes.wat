;; Control-flow shapes the instrumenter must preserve: multi-value results, branches to the
;; function's own label, early returns inside nested blocks, loops, br_table, calls and recursion.
;; Used by instrument_test.go: every export must give the same results before and after
;; instrumentation, and its fuel use must be deterministic.
(module
  (memory (export "memory") 1)
  ;; returns (a+b, a-b): multi-value, so the wrapper block needs a type index
  (func $pair (export "pair") (param i32 i32) (result i32 i32)
    local.get 0 local.get 1 i32.add
    local.get 0 local.get 1 i32.sub)
  (func (export "sum_pair") (param i32 i32) (result i32)
    local.get 0 local.get 1 call $pair i32.add)
  ;; br 0 at top level targets the function label (a return with a value)
  (func (export "br_top") (param i32) (result i32)
    local.get 0
    local.get 0 i32.eqz
    br_if 0
    drop
    i32.const 42)
  ;; return from inside nested blocks and a loop
  (func (export "find") (param $n i32) (result i32) (local $i i32)
    block
      loop
        local.get $i local.get $n i32.ge_u br_if 1
        local.get $i i32.const 7 i32.eq
        if local.get $i i32.const 100 i32.add return end
        local.get $i i32.const 1 i32.add local.set $i
        br 0
      end
    end
    i32.const -1)
  ;; br_table with targets including the function label
  (func (export "table") (param i32) (result i32)
    block (result i32) block (result i32) block (result i32)
      i32.const 10
      local.get 0
      br_table 0 1 2 3
    end i32.const 1 i32.add return
    end i32.const 2 i32.add return
    end i32.const 3 i32.add)
  ;; recursion
  (func $fact (export "fact") (param i64) (result i64)
    local.get 0 i64.const 2 i64.lt_u
    if (result i64) i64.const 1
    else local.get 0 local.get 0 i64.const 1 i64.sub call $fact i64.mul end)
  ;; a loop that runs n times: fuel grows linearly with n
  (func (export "spin") (param i32) (result i32) (local $acc i32)
    loop $l
      local.get 0 i32.eqz
      if local.get $acc return end
      local.get $acc local.get 0 i32.add local.set $acc
      local.get 0 i32.const 1 i32.sub local.set 0
      br $l
    end
    unreachable)
)
