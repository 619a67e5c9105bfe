// The module rewriting now lives in the Node SDK (one WebAssembly runtime per language:
// sdk/node/src/runtime/). This re-export keeps the old path working for tools that import it
// directly (conformance/hosts/python's byte-identity test).
export * from '../../../../sdk/node/src/runtime/wasmbin.js';
