// Runs one plugin component against a fixtures folder, outside mimeo.
//
//   node run-fixtures.mjs --prefix <npm prefix with jco and yaml> --wasm <component.wasm> \
//       --fixtures <dir> --name <expected describe().name> --work <scratch dir>
//
// The component is transpiled with jco into plain JS + core Wasm and run in node; the
// `mimeo:transform/log` import is provided here and records what the plugin logs. WASI imports,
// if the component has any, go to jco's preview2-shim (real node APIs, not mimeo's sandbox).
//
// For each fixture folder <case>/ (see README.md in this folder for the format):
//   1. validate-config(config.json); an error must match expected-error.txt, if present.
//   2. transform(ctx, object.yaml as JSON, sent compact and then indented; the context's inputs
//      from inputs/<name>.yaml); an error must match expected-error.txt; otherwise the result (the input for `unchanged`, the parsed JSON for `write`) must equal expected.yaml,
//      the outcome must match expected-outcome.txt if present, and the plugin must have logged
//      exactly one `info` line.
// Prints one line per case and closes with "N passed, N failed"; exits 1 on any failure.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) {
      throw new Error(`bad arguments near ${argv[i]}`);
    }
    args[argv[i].slice(2)] = argv[i + 1];
  }
  for (const required of ['prefix', 'wasm', 'fixtures', 'name', 'work']) {
    if (!args[required]) throw new Error(`--${required} is required`);
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const requireFromPrefix = createRequire(join(resolve(args.prefix), 'package.json'));
const YAML = requireFromPrefix('yaml');
const jcoBin = join(resolve(args.prefix), 'node_modules', '.bin', 'jco');

// 1. Transpile. The output goes under the prefix so that its imports of
// @bytecodealliance/preview2-shim resolve to the prefix's node_modules.
const stem = basename(args.wasm, '.wasm');
const outDir = join(resolve(args.work), stem);
rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, 'mimeo-log.js'),
  `export function log(level, message) {
  (globalThis.__mimeoLogs ??= []).push({ level, message });
}
`,
);
execFileSync(
  jcoBin,
  [
    'transpile', resolve(args.wasm), '-o', outDir, '--name', stem, '--no-typescript', '--quiet',
    '--map', 'mimeo:transform/log@0.2.0=./mimeo-log.js',
  ],
  { stdio: ['ignore', 'ignore', 'inherit'] },
);
const component = await import(pathToFileURL(join(outDir, `${stem}.js`)).href);
const transformer = component.transformer ?? component['mimeo:transform/transformer@0.2.0'];
if (!transformer) throw new Error(`${args.wasm} exports no transformer`);

// result<_, string> errors surface as a thrown ComponentError whose payload is the string.
function call(fn) {
  try {
    return { ok: fn() };
  } catch (e) {
    if (e && typeof e === 'object' && 'payload' in e) return { err: String(e.payload) };
    throw e;
  }
}

let passed = 0;
let failed = 0;
function report(name, problems) {
  if (problems.length === 0) {
    passed++;
    console.log(`ok    ${stem} ${name}`);
  } else {
    failed++;
    console.log(`FAIL  ${stem} ${name}`);
    for (const p of problems) console.log(`        ${p}`);
  }
}

// 2. describe.
{
  const info = transformer.describe();
  const problems = [];
  if (info.name !== args.name) problems.push(`name is ${info.name}, expected ${args.name}`);
  if (info.version !== '0.1.0') problems.push(`version is ${info.version}, expected 0.1.0`);
  if (!info.description) problems.push('description is empty');
  if (!Array.isArray(info.kinds) || info.kinds.length !== 0) {
    problems.push(`kinds is ${JSON.stringify(info.kinds)}, expected []`);
  }
  report('describe', problems);
}

// 3. fixtures.
const read = (dir, file) => {
  const path = join(dir, file);
  return existsSync(path) ? readFileSync(path, 'utf8') : undefined;
};

// An object-ref: option<string> is undefined for none.
const objectRef = (object) => ({
  apiVersion: object.apiVersion,
  kind: object.kind,
  namespace: object.metadata?.namespace ?? undefined,
  name: object.metadata?.name,
});

// The context's inputs: <case>/inputs/<name>.yaml, one object a file, in file-name order.
function readInputs(dir, cluster) {
  const folder = join(dir, 'inputs');
  if (!existsSync(folder)) return [];
  return readdirSync(folder)
    .sort()
    .map((file) => {
      if (!file.endsWith('.yaml')) throw new Error(`inputs/${file} is not a .yaml file`);
      const object = YAML.parse(read(folder, file));
      return {
        name: file.slice(0, -'.yaml'.length),
        source: objectRef(object),
        cluster,
        object: JSON.stringify(object),
      };
    });
}

for (const name of readdirSync(args.fixtures).sort()) {
  const dir = join(args.fixtures, name);
  const problems = [];
  const object = YAML.parse(read(dir, 'object.yaml'));
  const config = read(dir, 'config.json') ?? '{}';
  const context = JSON.parse(read(dir, 'context.json') ?? '{}');
  const expected = read(dir, 'expected.yaml');
  const expectedError = read(dir, 'expected-error.txt')?.trim();
  const expectedOutcome = read(dir, 'expected-outcome.txt')?.trim();

  const targetNamespace =
    'targetNamespace' in context ? context.targetNamespace : object.metadata?.namespace ?? null;
  const sourceCluster = context.sourceCluster ?? '';
  const ctx = {
    rule: context.rule ?? 'SyncRule/platform/fixtures',
    source: objectRef(object),
    sourceCluster,
    target: {
      cluster: context.targetCluster ?? '',
      namespace: targetNamespace ?? undefined,
      name: object.metadata?.name,
    },
    config,
    inputs: readInputs(dir, sourceCluster),
  };

  const checkError = (where, err) => {
    if (expectedError === undefined) problems.push(`${where} failed: ${err}`);
    else if (!err.includes(expectedError)) {
      problems.push(`${where} error ${JSON.stringify(err)} lacks ${JSON.stringify(expectedError)}`);
    }
  };

  const validated = call(() => transformer.validateConfig(config));
  if ('err' in validated) {
    checkError('validate-config', validated.err);
  } else {
    // The object goes in twice: compact (as mimeo sends it) and indented, so a plugin that edits
    // the JSON text rather than a parsed tree is checked against whitespace too.
    for (const [style, input] of [
      ['compact', JSON.stringify(object)],
      ['indented', JSON.stringify(object, null, 2)],
    ]) {
      const before = problems.length;
      checkTransform(input, style);
      if (problems.length > before) break;
    }
  }

  function checkTransform(input, style) {
    globalThis.__mimeoLogs = [];
    const result = call(() => transformer.transform(ctx, input));
    const logs = globalThis.__mimeoLogs;
    if ('err' in result) {
      checkError(`transform (${style} input)`, result.err);
      return;
    }
    if (expectedError !== undefined) {
      problems.push(
        `${style} input: expected an error containing ${JSON.stringify(expectedError)}, got ${result.ok.tag}`,
      );
      return;
    }
    const outcome = result.ok;
    let output;
    if (outcome.tag === 'unchanged') output = object;
    else if (outcome.tag === 'write') {
      try {
        output = JSON.parse(outcome.val);
      } catch (e) {
        problems.push(`${style} input: write() is not JSON: ${e.message}`);
      }
    } else problems.push(`${style} input: unexpected outcome ${outcome.tag}(${outcome.val ?? ''})`);
    if (expectedOutcome !== undefined && outcome.tag !== expectedOutcome) {
      problems.push(`${style} input: outcome is ${outcome.tag}, expected ${expectedOutcome}`);
    }
    if (output !== undefined && !isDeepStrictEqual(output, YAML.parse(expected))) {
      problems.push(`${style} input: output differs from expected.yaml:\n${YAML.stringify(output)}`);
    }
    const info = logs.filter((l) => l.level === 'info');
    if (logs.length !== 1 || info.length !== 1) {
      problems.push(`${style} input: expected one info log line, got ${JSON.stringify(logs)}`);
    }
  }
  report(name, problems);
}

console.log(`${stem}: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
