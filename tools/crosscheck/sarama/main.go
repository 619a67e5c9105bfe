// Command sarama writes spec/vectors/sarama-fnv1a.json by running the real Sarama
// NewHashPartitioner (its default partitioner) on every case of spec/vectors/keys.txt.
//
// It is its own Go module, so that Sarama never becomes a dependency of pctl itself.
// Usage: go run . KEYS_TXT OUT_FILE DATE
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sarama vectors:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: sarama KEYS_TXT OUT_FILE DATE")
	}
	in, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(args[1])
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)

	p := sarama.NewHashPartitioner("pctl-crosscheck")
	fmt.Fprintf(w, "{\"partitioner\":\"sarama-fnv1a\",\"source\":\"github.com/IBM/sarama %s NewHashPartitioner"+
		" on ProducerMessage{Key: ByteEncoder(key)} via tools/crosscheck/sarama (generated %s)\",\n \"cases\":[\n",
		saramaVersion(), args[2])

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	count := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ns, keyHex, ok := strings.Cut(line, " x")
		if !ok {
			return fmt.Errorf("bad line in %s: %.60q", args[0], line)
		}
		key, err := hex.DecodeString(keyHex)
		if err != nil {
			return err
		}
		for _, s := range strings.Split(ns, ",") {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return err
			}
			// ByteEncoder(key) is a non-nil Encoder also for the empty key, so Sarama
			// hashes it instead of choosing a random partition (that is only for Key == nil).
			msg := &sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}
			part, err := p.Partition(msg, int32(n))
			if err != nil {
				return err
			}
			if count > 0 {
				w.WriteString(",\n")
			}
			fmt.Fprintf(w, "  {\"key_hex\":\"%s\",\"n\":%d,\"partition\":%d}", keyHex, n, part)
			count++
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	w.WriteString("\n ]}\n")
	if err := w.Flush(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "sarama vectors: %d cases -> %s\n", count, args[1])
	return nil
}

// saramaVersion is the version of github.com/IBM/sarama linked into this binary.
func saramaVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/IBM/sarama" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}
