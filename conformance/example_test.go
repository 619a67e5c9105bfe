package conformance_test

import (
	"context"
	"fmt"

	"pctl.dev/pctl/conformance"
	"pctl.dev/pctl/plugins"
)

func ExampleCheck() {
	wasm, _ := plugins.Builtin("jump")
	rep, err := conformance.Check(context.Background(), wasm, conformance.Options{Keys: 1000})
	if err != nil {
		fmt.Println("cannot run the checker:", err)
		return
	}
	for _, r := range rep.Results {
		if r.Name == conformance.CheckLimits {
			continue // wall-clock timings: may warn on a busy machine
		}
		fmt.Println(r.Name, r.Status)
	}
	fmt.Println("passed:", rep.Passed)
	// Output:
	// abi pass
	// imports pass
	// range pass
	// determinism pass
	// ancestry pass
	// compatibility pass
	// balance pass
	// passed: true
}
