package wasmbin

// Mutants of the LocalFuel rewriting, for showing that the tests comparing it with the reference
// can fail (runtime's TestLocalFuelSameWork). They are inactive unless the package is built with
// the tag fuelmutant (mutant_on.go), which reads PCTL_FUEL_MUTANT:
//
//	off-by-one  every loop charge is one unit dearer
//	no-reload   the fuel local is not reloaded from the global after a call
//	no-store    the fuel local is not stored into the global before a call
var (
	mutant            string
	mutantChargeDelta int64
)
