;; proc-exit: a wasi-deterministic module (it imports only proc_exit, from the
;; allowed list) whose pctl_partition calls proc_exit(3). A host must end the
;; call and report "plugin exited with code 3", naming the plugin, and discard
;; the instance; never a partition.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 17)
  ;; metadata: 91 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"proc-exit\",\"version\":\"1.0.0\",\"description\":\"calls proc_exit(3) in pctl_partition\"}")
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
    (call $proc_exit (i32.const 3))
    (unreachable))
)
