// The vector runner of conformance/hosts/README.md:
//
//   run [run] --wasm FILE --partitions N [--config K=V ...] [--config-hex HEX]
//
// Hex keys on stdin (one per line, an empty line is the empty key), one partition per line on
// stdout. Exit 1 for a module failure at run time, 2 for usage, bad input or a module refused at
// load; the message on stderr names the plugin and the failure class.
//
// The host itself is the Node SDK's runtime (sdk/node/src/runtime): one WebAssembly runtime per
// language, so what this runner checks is what the SDK's producers run.

import { readFileSync } from 'node:fs';
import { Plugin, LoadError, CallError, UsageError, CLASS, LIMITS } from '../../../../sdk/node/src/runtime/host.js';
import { encodeConfig, ConfigError } from '../../../../sdk/node/src/runtime/config.js';

const USAGE = 'usage: run --wasm FILE --partitions N [--config K=V ...] [--config-hex HEX] < hex keys, one per line';

class Usage extends Error {}

function parseArgs(argv) {
  const a = { wasm: null, partitions: null, config: [], configHex: null };
  // The command's own name may come first (`run run --wasm ...`, the form the Go test uses).
  for (let i = argv[0] === 'run' ? 1 : 0; i < argv.length; i++) {
    let flag = argv[i];
    let val;
    const eq = flag.indexOf('=');
    if (flag.startsWith('--') && eq > 0) {
      val = flag.slice(eq + 1);
      flag = flag.slice(0, eq);
    }
    const take = () => {
      if (val !== undefined) return val;
      if (i + 1 >= argv.length) throw new Usage(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--wasm': a.wasm = take(); break;
      case '--partitions': a.partitions = take(); break;
      case '--config': a.config.push(take()); break;
      case '--config-hex': a.configHex = take(); break;
      case '-h': case '--help': throw new Usage('');
      default: throw new Usage(`unknown argument ${JSON.stringify(flag)}`);
    }
  }
  if (!a.wasm) throw new Usage('--wasm FILE is required');
  if (a.partitions === null) throw new Usage('--partitions N is required');
  if (a.configHex !== null && a.config.length > 0) throw new Usage('give --config or --config-hex, not both');
  return a;
}

function parseN(s) {
  if (!/^[0-9]+$/.test(s) || Number(s) < 1 || Number(s) > LIMITS.maxPartitions) {
    throw new UsageError(`${CLASS.badN}: --partitions ${JSON.stringify(s)} must be an integer in [1, ${LIMITS.maxPartitions}]`);
  }
  return Number(s);
}

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/;

function parseKeys(text) {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const keys = new Array(lines.length);
  for (let i = 0; i < lines.length; i++) {
    let l = lines[i];
    if (l.endsWith('\r')) l = l.slice(0, -1);
    if (!HEX_RE.test(l)) throw new UsageError(`stdin line ${i + 1}: ${JSON.stringify(l.slice(0, 40))} is not a key in hex (an even number of hex digits; an empty line is the empty key)`);
    if (l.length / 2 > LIMITS.maxKey) throw new UsageError(`${CLASS.keyTooLong}: stdin line ${i + 1} has ${l.length / 2} bytes; the limit is ${LIMITS.maxKey} (spec/abi-v1.md §1.1)`);
    keys[i] = Buffer.from(l, 'hex');
  }
  return keys;
}

export function main(argv) {
  let a;
  try {
    a = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof Usage)) throw e;
    process.stderr.write(e.message ? `run: ${e.message}\n${USAGE}\n` : `${USAGE}\n`);
    return 2;
  }
  let plugin;
  let keys;
  let n;
  try {
    n = parseN(a.partitions);
    let config;
    if (a.configHex !== null) {
      if (!HEX_RE.test(a.configHex)) throw new UsageError(`bad partitioner config: --config-hex ${JSON.stringify(a.configHex.slice(0, 40))} is not hex`);
      config = Buffer.from(a.configHex, 'hex');
    } else {
      config = encodeConfig(a.config);
    }
    let bytes;
    try {
      bytes = readFileSync(a.wasm);
    } catch (e) {
      throw new UsageError(`read plugin ${a.wasm}: ${e.message}`);
    }
    keys = parseKeys(readFileSync(0, 'latin1'));
    plugin = Plugin.open(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length), { source: a.wasm, config });
  } catch (e) {
    if (e instanceof UsageError || e instanceof ConfigError || e instanceof LoadError) {
      process.stderr.write(`run: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const out = new Int32Array(keys.length);
  let status = 0;
  let done = keys.length;
  try {
    plugin.partitionAll(keys, n, out);
  } catch (e) {
    if (!(e instanceof CallError)) throw e;
    process.stderr.write(`run: ${e.message}\n`);
    status = 1;
    done = 0; // nothing computed is trustworthy once a call failed
  }
  if (done > 0) process.stdout.write(out.join('\n') + '\n');
  return status;
}

process.exitCode = main(process.argv.slice(2));
