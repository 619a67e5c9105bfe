# pctl top-level build. Keep it small: each area's own Makefile or script
# does the work.

.PHONY: plugins hostile

# Rebuild every committed plugin .wasm (plugins/Makefile); commit the result.
plugins:
	$(MAKE) -C plugins

# Rebuild the hostile test modules under runtime/testdata/hostile.
hostile:
	cd runtime/testdata/hostile && ./build.sh
