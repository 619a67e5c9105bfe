//go:build fuelmutant

package wasmbin

import "os"

func init() {
	mutant = os.Getenv("PCTL_FUEL_MUTANT")
	if mutant == "off-by-one" {
		mutantChargeDelta = 1
	}
}
