;; bulk-table: each turn of a loop is one bulk table instruction over up to 131072 elements (the
;; table limit of spec/abi-v1.md §7, which this module's table reaches exactly and may: it loads).
;; Counted only as instructions, a call would run for hours on wazero and for days on V8 (34 ns per
;; element of table.fill); §7.2 charges 128 units per element before the instruction runs, so the
;; call stops with *time limit*, on every host. The key's first byte picks the instruction; other
;; keys get key_len % n.
;;   "F" (0x46): table.fill of all 131072 elements, forever
;;   "C" (0x43): table.copy of 131071 elements, forever
;;   "I" (0x49): table.init of the 4096-element passive segment $funcs, forever
(module
  (memory (export "memory") 17)
  (table $t 131072 funcref)
  ;; 4096 references to $nop, for table.init.
  (elem $funcs func
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
    $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop $nop
  )
  ;; metadata: 94 bytes at 1024
  (data (i32.const 1024) "{\22name\22:\22bulk-table\22,\22version\22:\221.0.0\22,\22description\22:\22bulk table instructions that never end\22}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 94)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (local $op i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (if (i32.eqz (local.get $key_len))
      (then (return (i32.const 0))))
    (local.set $op (i32.load8_u (i32.const 65536)))
    (if (i32.eq (local.get $op) (i32.const 0x46))
      (then
        (loop $fill
          (table.fill $t (i32.const 0) (ref.func $nop) (i32.const 131072))
          (br $fill))))
    (if (i32.eq (local.get $op) (i32.const 0x43))
      (then
        (loop $copy
          (table.copy $t $t (i32.const 1) (i32.const 0) (i32.const 131071))
          (br $copy))))
    (if (i32.eq (local.get $op) (i32.const 0x49))
      (then
        (loop $init
          (table.init $t $funcs (i32.const 0) (i32.const 0) (i32.const 4096))
          (br $init))))
    (i32.rem_u (local.get $key_len) (local.get $n)))
  (func $nop)
)
