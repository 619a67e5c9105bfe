// The TypeScript declarations (src/index.d.ts): they compile under strict TypeScript against a
// usage file written like the README (tests/types/usage.ts), and every value they declare is
// exported by src/index.js, and the other way round.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as sdk from '../src/index.js';

const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = `${dir}node_modules/.bin/tsc`;

test('src/index.d.ts compiles, strict, with the README-style usage', { skip: !existsSync(tsc) && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? 'typescript is not installed (./setup installs it)' : false }, () => {
  const r = spawnSync(tsc, ['-p', `${dir}tests/types/tsconfig.json`], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('the declarations and the module export the same values', () => {
  const dts = readFileSync(`${dir}src/index.d.ts`, 'utf8');
  const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:class|function|const) (\w+)/gm)].map((m) => m[1]));
  const exported = new Set(Object.keys(sdk));
  assert.deepEqual([...declared].filter((n) => !exported.has(n)).sort(), [], 'declared but not exported');
  assert.deepEqual([...exported].filter((n) => !declared.has(n)).sort(), [], 'exported but not declared');
});
