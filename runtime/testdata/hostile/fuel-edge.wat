;; fuel-edge: spends exactly as much of the work budget as its key says, to pin the counting of
;; spec/abi-v1.md §7.2 at its edge: a key that leaves 0 units must get its partition and a key one
;; unit dearer must stop with *time limit*, on every host and engine. Such keys are 9 bytes: "fuel",
;; an opcode byte, then t, a u32 little-endian. Other keys get key_len % n (conformance's keys are
;; all of them: the module passes conformance).
;;   "fuel" "m" t: memory.fill of t bytes in all, in 16 MiB chunks; partition 0
;;   "fuel" "r" t: one random_get of t bytes (it faults for t beyond memory, which is charged
;;                 anyway); partition 1
;;
;; The counts, by the rules of §7.2 (each budget is 2^31 = 2147483648 units):
;;   E, entering pctl_partition: the 48 instructions of its body outside the loop (the n test:
;;     local.get, i32.const, i32.lt_s, if, i32.const, return, end: 7; the key test: local.get,
;;     i32.const, i32.ne, i32.const, i32.load, i32.const, i32.ne, i32.or, if, local.get,
;;     local.get, i32.rem_u, return, end: 14 more, 21; the load of t: 3, 24; the "r" test and its
;;     arm: 14, 38; memory.grow with its operand and drop: 3, 41; the loop instruction itself: 42;
;;     the final fill with its 3 operands, i32.const 0 and the body's final end: 6, 48).
;;   L, one turn of $chunks: its 15 instructions (local.get, i32.const, i32.gt_u, if, the 4 of the
;;     fill, local.get, i32.const, i32.sub, local.set, br, the if's end, the loop's end).
;;   "m" t, with t = 16777216 k + r, 0 < r <= 16777216: E + (k + 1) L + t (every chunk and the
;;     rest are charged their bytes). For t = 2147481680 (k = 127): 48 + 128 * 15 + 2147481680 =
;;     2147483648, the whole budget: partition 0. For t = 2147481681: one unit too many, *time
;;     limit* (the last fill is not run).
;;   "r" t: E + 16384 + 64 t (rule 4: random_get costs 16384 plus 64 per byte). For t = 33554175:
;;     2147483632, within the budget: partition 1 (random_get returns errno 21: the range is
;;     outside memory). For t = 33554176: 2147483696, *time limit*.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 17)
  ;; metadata: 91 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22fuel-edge\22,\22version\22:\221.0.0\22,\22description\22:\22spends exactly the fuel its key says\22}")
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
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (local $t i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    ;; Only 9-byte keys that start with "fuel" (conformance's keys never do: the module passes it).
    (if (i32.or (i32.ne (local.get $key_len) (i32.const 9))
                (i32.ne (i32.load (i32.const 65536)) (i32.const 0x6c657566)))
      (then (return (i32.rem_u (local.get $key_len) (local.get $n)))))
    (local.set $t (i32.load align=1 (i32.const 65541)))
    (if (i32.eq (i32.load8_u (i32.const 65540)) (i32.const 0x72))
      (then
        (drop (call $random_get (i32.const 8192) (local.get $t)))
        (return (i32.rem_u (i32.const 1) (local.get $n)))))
    (drop (memory.grow (i32.const 495)))               ;; 512 pages: 32 MiB
    (loop $chunks
      (if (i32.gt_u (local.get $t) (i32.const 16777216))
        (then
          (memory.fill (i32.const 16777216) (i32.const 0) (i32.const 16777216))
          (local.set $t (i32.sub (local.get $t) (i32.const 16777216)))
          (br $chunks))))
    (memory.fill (i32.const 16777216) (i32.const 0) (local.get $t))
    (i32.const 0))
)
