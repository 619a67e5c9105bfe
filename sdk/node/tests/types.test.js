// The TypeScript declarations: src/index.d.ts (the package's main entry) and those of its
// subpaths, src/runtime/host.d.ts ('@pctl/sdk/runtime') and src/murmur2.d.ts ('@pctl/sdk/murmur2').
// They compile under strict TypeScript against usage files written like the README
// (tests/types/usage.ts; tests/types/subpaths.ts imports the subpaths by the package's own name,
// so they resolve through package.json's "exports" map), and every value each declares is
// exported by its module, and the other way round.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as sdk from '../src/index.js';
import * as runtime from '../src/runtime/host.js';
import * as murmur2 from '../src/murmur2.js';

const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = `${dir}node_modules/.bin/tsc`;

test('the declarations compile, strict, with the README-style usage of the package and its subpaths', { skip: !existsSync(tsc) && process.env.PCTL_REQUIRE_TOOLCHAINS !== '1' ? 'typescript is not installed (./setup installs it)' : false }, () => {
  const r = spawnSync(tsc, ['-p', `${dir}tests/types/tsconfig.json`], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

const modules = [
  ['.', 'src/index.d.ts', sdk],
  ['./runtime', 'src/runtime/host.d.ts', runtime],
  ['./murmur2', 'src/murmur2.d.ts', murmur2],
];

for (const [subpath, file, mod] of modules) {
  test(`${file}: the declarations and the module export the same values`, () => {
    const dts = readFileSync(`${dir}${file}`, 'utf8');
    const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:class|function|const) (\w+)/gm)].map((m) => m[1]));
    const exported = new Set(Object.keys(mod));
    assert.deepEqual([...declared].filter((n) => !exported.has(n)).sort(), [], 'declared but not exported');
    assert.deepEqual([...exported].filter((n) => !declared.has(n)).sort(), [], 'exported but not declared');
  });

  test(`package.json exports ${subpath} with its declarations, and npm packs them`, () => {
    const pkg = JSON.parse(readFileSync(`${dir}package.json`, 'utf8'));
    const e = pkg.exports[subpath];
    assert.equal(e?.types, `./${file}`, `exports["${subpath}"].types`);
    assert.equal(e.default.replace(/\.js$/, '.d.ts'), e.types, 'the declarations sit next to the module');
    assert.ok(pkg.files.some((f) => file.startsWith(f)), `"files" ships ${file}`);
  });
}
