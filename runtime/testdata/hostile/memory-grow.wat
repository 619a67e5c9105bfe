;; memory-grow: pctl_partition grows memory by 16 pages (1 MiB) at a time until
;; memory.grow returns -1, then traps with `unreachable`. Under the 512-page limit
;; memory.grow fails (returns -1) as in core WebAssembly; the host must report
;; *memory limit* (not a bare trap), naming the plugin.
(module
  (memory (export "memory") 17)
  ;; metadata: 96 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"memory-grow\",\"version\":\"1.0.0\",\"description\":\"grows memory until it fails, then traps\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 96)))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    (unreachable))
)
