;; config-echo: a valid portable module with pctl_configure, for config tests.
;; pctl_configure stores the config's length and returns 0, except that it
;; rejects (PCTL_E_CONFIG, -2) a config whose first byte is '!'. Partition:
;; (key_len + config_len) % n. A host must pass the config bytes exactly
;; (abi-v1.md 2.5): with config "a=1\n" (4 bytes) and n = 10, the empty key goes
;; to partition 4; with "!" instance creation fails: "plugin rejected config".
(module
  (memory (export "memory") 17)
  ;; metadata: 93 bytes at 1024
  (data (i32.const 1024) "{\"name\":\"config-echo\",\"version\":\"1.0.0\",\"description\":\"partition (key_len + config_len) % n\"}")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  ;; The buffer is [65536, 65536+size), inside the 17 pages.
  (func (export "pctl_key_buffer") (param $size i32) (result i32)
    (if (result i32)
      (i32.and (i32.ge_s (local.get $size) (i32.const 1))
               (i32.le_s (local.get $size) (i32.const 1048576)))
      (then (i32.const 65536))
      (else (i32.const 0))))
  (func (export "pctl_metadata") (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 93)))
  (global $config_len (mut i32) (i32.const 0))
  (func (export "pctl_configure") (param $len i32) (result i32)
    (if (i32.or (i32.lt_s (local.get $len) (i32.const 0)) (i32.gt_s (local.get $len) (i32.const 65536)))
      (then (return (i32.const -1))))
    (if (i32.and (i32.gt_s (local.get $len) (i32.const 0))
                 (i32.eq (i32.load8_u (i32.const 65536)) (i32.const 0x21)))
      (then (return (i32.const -2))))
    (global.set $config_len (local.get $len))
    (i32.const 0))
  (func (export "pctl_partition") (param $key_len i32) (param $n i32) (result i32)
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (i32.rem_u (i32.add (local.get $key_len) (global.get $config_len)) (local.get $n)))
)
