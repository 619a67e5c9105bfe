package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"pctl.dev/pctl/internal/interrupt"
	"pctl.dev/pctl/internal/progress"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

func init() {
	register(command{name: "partition", summary: "compute the partition of keys with a plugin", run: cmdPartition})
}

const partitionHelp = `
Prints the partition of each key, one per line, in order. Keys come from the arguments, or,
when there are none, one per line from standard input (a line's trailing newline is not part of
the key; an empty line is the empty key, which is a key like any other). With --hex each key is
hex-encoded, so any bytes can be given. Standard input is processed in batches, so a million keys
take about a second; on a terminal, standard error shows how many keys are done. SIGINT or
SIGTERM stops it at once: the partitions of the keys read so far are printed (exit 1).

The plugin is a built-in name (see 'pctl plugin list'), sha256:DIGEST of a built-in, or a .wasm
file. --native uses a built-in's Go implementation instead of its WebAssembly module (they are
bit-identical; this is for comparison).

Examples:
  pctl partition --plugin kafka-murmur2 --partitions 12 user-1 user-2
  seq 1000000 | pctl partition --plugin jump --partitions 64 > parts.txt
  pctl partition --plugin ./my.wasm --partitions 8 --hex 00ff 
`

func cmdPartition(e *env, args []string) int {
	fs := newFlags(e, "partition", "partition --plugin NAME|FILE.wasm --partitions N [--native] [--hex] [--config K=V ...] [KEY ...]", partitionHelp)
	plugin := fs.String("plugin", "", "partitioner: built-in name, sha256:DIGEST or FILE.wasm (required)")
	partitions := fs.String("partitions", "", "number of partitions, 1 to 2147483647 (required)")
	native := fs.Bool("native", false, "use the built-in's native Go implementation instead of WebAssembly")
	hexKeys := fs.Bool("hex", false, "keys are hex-encoded")
	var config multiFlag
	fs.Var(&config, "config", "partitioner config `K=V` (repeatable)")
	keys, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if *plugin == "" {
		return usageErr(e, "partition", "--plugin is required (a built-in name such as kafka-murmur2, or a .wasm file); see 'pctl plugin list'")
	}
	n, err := parsePartitions(*partitions)
	if err != nil {
		return usageErr(e, "partition", "%v", err)
	}
	cfg, err := partitioner.EncodeConfig(config)
	if err != nil {
		return usageErr(e, "partition", "%v", err)
	}

	var p partitioner.Partitioner
	if *native {
		if len(cfg) > 0 {
			return usageErr(e, "partition", "--native takes no --config: the built-ins have no configuration")
		}
		if p, err = partitioner.Native(*plugin); err != nil {
			return usageErr(e, "partition", "--native: %v", err)
		}
	} else {
		lib, err := newLibrary(e, runtime.Config{})
		if err != nil {
			return failErr(e, "partition", err)
		}
		defer lib.Runtime().Close(e.ctx)
		w, err := lib.Open(e.ctx, *plugin, cfg, runtime.PoolOptions{Size: 1})
		if err != nil {
			return openErr(e, "partition", err)
		}
		p = w
	}
	defer p.Close()

	out := bufio.NewWriterSize(e.stdout, 64<<10)
	defer out.Flush()
	var b batcher
	b.init(p, n, out)
	if len(keys) > 0 {
		for i, k := range keys {
			key := []byte(k)
			if *hexKeys {
				if key, err = hex.DecodeString(k); err != nil {
					return usageErr(e, "partition", "argument %d: %q is not hex: %v", i+1, k, err)
				}
			}
			if err := b.add(key); err != nil {
				return keyErr(e, err)
			}
		}
	} else {
		// SIGINT and SIGTERM stop the command even while standard input has nothing to give
		// (the signals are caught, so they no longer kill the process by themselves).
		r := bufio.NewReaderSize(interrupt.Reader(e.ctx, e.stdin), 1<<18)
		bar := progress.New(e.stderr, e.getenv, -1, "partitioning", "keys")
		defer bar.Finish()
		b.bar = bar
		for line := 1; ; line++ {
			raw, err := r.ReadSlice('\n')
			if e.ctx.Err() != nil {
				bar.Finish()
				if ferr := b.flush(); ferr != nil {
					return keyErr(e, ferr)
				}
				_ = out.Flush()
				return usageFail(e, "partition", "interrupted after %d keys (their partitions are printed; line %d on is not)", line-1, line)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return usageErr(e, "partition", "line %d: longer than %d bytes; keys are at most %d bytes", line, r.Size(), runtime.MaxKeyBytes)
			}
			if err == io.EOF && len(raw) == 0 {
				break
			}
			if err != nil && err != io.EOF {
				return failErr(e, "partition", fmt.Errorf("read standard input: %w", err))
			}
			raw = bytes.TrimSuffix(raw, []byte{'\n'})
			key := raw
			if *hexKeys {
				key = make([]byte, hex.DecodedLen(len(raw)))
				if _, herr := hex.Decode(key, raw); herr != nil {
					return usageErr(e, "partition", "line %d: %q is not hex: %v", line, truncateStr(string(raw), 40), herr)
				}
			}
			if len(key) > runtime.MaxKeyBytes {
				return usageErr(e, "partition", "line %d: key of %d bytes; keys are at most %d bytes (spec/abi-v1.md §1.1)", line, len(key), runtime.MaxKeyBytes)
			}
			if err := b.add(key); err != nil {
				return keyErr(e, err)
			}
			if err == io.EOF {
				break
			}
		}
	}
	if err := b.flush(); err != nil {
		return keyErr(e, err)
	}
	if err := out.Flush(); err != nil {
		return failErr(e, "partition", err)
	}
	return exitOK
}

func keyErr(e *env, err error) int {
	if errors.Is(err, runtime.ErrKeyTooLong) {
		return usageErr(e, "partition", "%v", err)
	}
	return failErr(e, "partition", err)
}

// batcher collects keys into an arena and partitions them a batch at a time.
type batcher struct {
	bar   *progress.Bar // nil: no progress shown
	p     partitioner.Partitioner
	n     int32
	out   *bufio.Writer
	arena []byte
	ends  []int
	keys  [][]byte
	res   []int32
	num   []byte
}

const batchKeys = 4096

func (b *batcher) init(p partitioner.Partitioner, n int32, out *bufio.Writer) {
	b.p, b.n, b.out = p, n, out
	b.arena = make([]byte, 0, 1<<20)
	b.res = make([]int32, batchKeys)
}

func (b *batcher) add(key []byte) error {
	b.arena = append(b.arena, key...)
	b.ends = append(b.ends, len(b.arena))
	if len(b.ends) >= batchKeys || len(b.arena) >= 1<<20 {
		return b.flush()
	}
	return nil
}

func (b *batcher) flush() error {
	if len(b.ends) == 0 {
		return nil
	}
	b.keys = b.keys[:0]
	start := 0
	for _, end := range b.ends {
		b.keys = append(b.keys, b.arena[start:end:end])
		start = end
	}
	if len(b.res) < len(b.keys) {
		b.res = make([]int32, len(b.keys))
	}
	if err := b.p.PartitionBatch(b.keys, b.n, b.res); err != nil {
		return err
	}
	for _, r := range b.res[:len(b.keys)] {
		b.num = strconv.AppendInt(b.num[:0], int64(r), 10)
		b.num = append(b.num, '\n')
		b.out.Write(b.num)
	}
	b.bar.Add(len(b.keys))
	b.arena = b.arena[:0]
	b.ends = b.ends[:0]
	return nil
}

// parsePartitions validates a --partitions value.
func parsePartitions(s string) (int32, error) {
	if s == "" {
		return 0, fmt.Errorf("--partitions is required (1 to 2147483647)")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("--partitions %q is not an integer; give 1 to 2147483647", s)
	}
	if v < 1 || v > runtime.MaxPartitions {
		return 0, fmt.Errorf("--partitions %d is out of range; give 1 to 2147483647", v)
	}
	return int32(v), nil
}

// openErr reports a failure to resolve or load a plugin: a usage error (status 2) when the
// reference or the module is bad, a failure (1) when the module broke while starting.
func openErr(e *env, cmd string, err error) int {
	var le *runtime.LoadError
	var ce *runtime.CallError
	switch {
	case errors.As(err, &le), errors.Is(err, partitioner.ErrUnknownPartitioner), errors.Is(err, partitioner.ErrUnreadable):
		return usageErr(e, cmd, "%v", err)
	case errors.As(err, &ce) && (errors.Is(err, runtime.ErrConfigRejected) || errors.Is(err, runtime.ErrConfigUnsupported) || errors.Is(err, runtime.ErrConfigTooLarge)):
		return usageErr(e, cmd, "%v", err)
	}
	return failErr(e, cmd, err)
}

func truncateStr(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
