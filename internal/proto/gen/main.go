// Command gen writes spec/vectors/protocol/<rule>.jsonl from the hand-written traces of package
// protovec (it only serialises them; internal/proto's tests check the Go core against them and
// that the checked-in files are what gen writes). Run from the repository root:
//
//	go run ./internal/proto/gen
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"pctl.dev/pctl/internal/proto/protovec"
)

func main() {
	dir := flag.String("dir", filepath.Join("spec", "vectors", "protocol"), "directory to write the vector files to")
	flag.Parse()
	if err := protovec.Write(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
