package plugins

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSDKCopiesAreIdentical: the Node and Python packages carry copies of the built-in modules
// (so that Partitioner.builtin works offline in an installed package); each copy must be the
// embedded module byte for byte, and the set of copies the set of built-ins. (The Java jar takes
// them from plugins/builtin at build time: sdk/java/pom.xml.) A difference here means a package
// would partition some keys differently from every other host.
func TestSDKCopiesAreIdentical(t *testing.T) {
	for _, dir := range []string{"../sdk/node/builtin", "../sdk/python/src/pctl/builtin"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v (make -C plugins sdk-copies)", dir, err)
		}
		var names []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".wasm") {
				names = append(names, strings.TrimSuffix(e.Name(), ".wasm"))
			}
		}
		sort.Strings(names)
		if strings.Join(names, ",") != strings.Join(BuiltinNames(), ",") {
			t.Errorf("%s holds %v, want the built-ins %v (make -C plugins sdk-copies)", dir, names, BuiltinNames())
		}
		for _, name := range names {
			got, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := Builtin(name); ok && !bytes.Equal(got, want) {
				t.Errorf("%s/%s.wasm differs from plugins/builtin/%s.wasm: the package would partition with other bytes (make -C plugins sdk-copies)", dir, name, name)
			}
		}
	}
}
