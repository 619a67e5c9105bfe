// Compiled (tsc --noEmit, strict) by tests/types.test.js: the declarations of the package's
// subpaths, imported by the package's own name so that they resolve through package.json's
// "exports" map (a self-reference, moduleResolution nodenext), used as the README does. Not run.
import {
  Plugin, PluginModule, LoadError, CallError, UsageError, LIMITS, CLASS, ABI_VERSION, MAX_METADATA_DEPTH, codeName,
  type FailureClass, type PluginMetadata,
} from '@pctl/sdk/runtime';
import { murmur2, kafkaMurmur2 } from '@pctl/sdk/murmur2';
import { Partitioner } from '@pctl/sdk';
import { readFileSync } from 'node:fs';

export function example(): void {
  const bytes: Uint8Array = readFileSync('plugins/builtin/kafka-murmur2.wasm');
  const mod: PluginModule = PluginModule.compile(bytes, { source: 'kafka-murmur2.wasm' });
  console.log(mod.digest, mod.profile, mod.has.pctl_partition_batch === true, mod.source);
  const p: Plugin = Plugin.instantiate(mod, { config: new Uint8Array(0), wasiTime: 0n, wasiSeed: 7 });
  const q = Plugin.open(bytes, { source: 'x.wasm', wasiSeed: 1n });
  const md: PluginMetadata = p.metadata;
  console.log(p.name, md.version, md.description ?? '', md.properties?.includes('ancestry'), q.digest);
  const one: number = p.partition(new TextEncoder().encode('customer-42'), 12);
  const s: number = p.partitionString('customer-42', 12);
  const all: Int32Array = p.partitionAll([new Uint8Array([1]), Buffer.from('b')], 12);
  const keys: Int32Array = p.partitionKeys(['a', new Uint8Array([2])], 12, new Int32Array(2));
  const old: Int32Array = p.partitionStrings(['a', 'b'], 12);
  console.log(one, s, all, keys, old, LIMITS.maxKey, LIMITS.fuel + 1n, ABI_VERSION, MAX_METADATA_DEPTH, codeName(-2));
  try {
    p.partitionString('k', 0);
  } catch (e) {
    if (e instanceof UsageError) console.log(e.message);
    if (e instanceof CallError) {
      const c: FailureClass = e.cls;
      console.log(c === CLASS.trap, e.op, e.detail, e.code);
    }
    if (e instanceof LoadError && e.cls === CLASS.abi) console.log(e.message);
  }
  const h: number = murmur2(Buffer.from('21'));
  const k: number = kafkaMurmur2(new Uint8Array([0, 1, 2]), 12, 2, 1);
  console.log(h, k, Partitioner.builtin('kafka-murmur2').partition('customer-42', 12));
}
