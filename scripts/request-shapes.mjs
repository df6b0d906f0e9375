// The request shapes, compiled to code from docs/openapi.yaml at build time: every operation's JSON
// request body, the channel's client message (`x-client-message`), each dialect of a raw-bytes body's
// metadata (`x-metadata`), and, for an array marked
// `x-per-item: true`, its item schema on its own (each item is answered on its own, so the envelope's
// shape leaves the items to it). The output, dist/util/requests/shapes.js, is what util/requests/shape.ts
// checks against; the installed package ships no docs/, so the document is read here and nowhere at run
// time.
//
// Run: `node scripts/request-shapes.mjs [document] [output]` (npm run build, prepare and the package
// build run it after tsc). `requestShapesSource(doc)` is exported for the test that edits a copy of the
// document.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parse } from 'yaml';
import { Ajv2020 } from 'ajv/dist/2020.js';
import standaloneModule from 'ajv/dist/standalone/index.js';

const standaloneCode = standaloneModule.default ?? standaloneModule;
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const DEFS_ID = 'request-defs';
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A schema as Ajv reads it: `#/components/schemas/X` pointed at the registered `$defs`, annotations
 * OpenAPI adds (`example`, `x-…`) dropped, and arrays marked `x-per-item` emptied of their item schema
 * when `perItem` says the items are checked on their own.
 */
function forAjv(v, perItem) {
  if (Array.isArray(v)) return v.map((x) => forAjv(x, perItem));
  if (!isObject(v)) return v;
  const out = {};
  for (const [k, x] of Object.entries(v)) {
    if (k.startsWith('x-') || k === 'example') continue;
    if (k === 'items' && perItem && v['x-per-item'] === true) continue;
    out[k] =
      k === '$ref' && typeof x === 'string' && x.startsWith('#/components/schemas/')
        ? `${DEFS_ID}#/$defs/${x.slice('#/components/schemas/'.length)}`
        : forAjv(x, perItem);
  }
  return out;
}

/** Follows `#/components/…` references to the schema itself. */
function resolveRef(doc, v) {
  let cur = v;
  for (let hops = 0; isObject(cur) && typeof cur.$ref === 'string'; hops++) {
    if (hops > 10) throw new Error(`reference loop at ${cur.$ref}`);
    cur = cur.$ref
      .slice(2)
      .split('/')
      .reduce((o, k) => (isObject(o) ? o[k] : undefined), doc);
    if (cur === undefined) throw new Error(`unresolved reference ${v.$ref}`);
  }
  return cur;
}

/** Every request shape of the document by name: `<operationId>` and `<operationId>$<field>` for items. */
export function requestSchemas(doc) {
  const shapes = {};
  const add = (name, schema) => {
    // The body's own schema inlined, so its per-item arrays are emptied here and not in the shared $defs.
    const top = resolveRef(doc, schema);
    shapes[name] = forAjv(top, true);
    for (const [field, prop] of Object.entries(top?.properties ?? {})) {
      const p = resolveRef(doc, prop);
      if (p['x-per-item'] === true && p.items) shapes[`${name}$${field}`] = forAjv(p.items, true);
    }
  };
  for (const item of Object.values(doc.paths ?? {}))
    for (const m of METHODS) {
      const op = item[m];
      if (!isObject(op) || typeof op.operationId !== 'string') continue;
      const body = op.requestBody ? resolveRef(doc, op.requestBody) : null;
      const schema = body?.content?.['application/json']?.schema;
      if (schema) add(op.operationId, schema);
      if (op['x-client-message']) add(`${op.operationId}$message`, op['x-client-message']);
      // A raw-bytes body's metadata (its media type's x-metadata): one shape per dialect it names.
      for (const media of Object.values(body?.content ?? {}))
        for (const dialect of media?.['x-metadata']?.oneOf ?? [])
          if (typeof dialect.$ref === 'string')
            add(`${op.operationId}$metadata$${dialect.$ref.split('/').pop()}`, dialect);
    }
  return { defs: forAjv(doc.components?.schemas ?? {}, false), shapes };
}

/** Ajv's runtime helpers the generated code requires, as ES module imports. */
function esmRequires(code) {
  const imports = [];
  const body = code.replace(/const (\w+) = require\("([^"]+)"\)\.default;/g, (_, name, spec) => {
    imports.push(`import ${name}Module from '${spec}.js';`);
    return `const ${name} = ${name}Module.default;`;
  });
  if (/\brequire\(/.test(body))
    throw new Error('the generated shapes require a module this build cannot import');
  return `${imports.join('\n')}\n${body}`;
}

/** The JavaScript module of the document's request shapes. */
export function requestShapesSource(doc) {
  const { defs, shapes } = requestSchemas(doc);
  // allErrors: the field list is closed and reported first (util/requests/shape.ts picks the error), and
  // verbose: an error carries the schema it failed, so the answer can say what the field must be.
  const ajv = new Ajv2020({
    code: { source: true, esm: true },
    allErrors: true,
    verbose: true,
    strict: true,
    strictTypes: false,
    allowUnionTypes: true,
    // A format is documentation here: a URL field is judged by its own named check (a URL's limits
    // are in bytes, after parsing), never by a format's regular expression.
    validateFormats: false,
  });
  ajv.addSchema({ $id: DEFS_ID, $defs: defs });
  const names = Object.keys(shapes).sort();
  const ids = {};
  names.forEach((name, i) => {
    ids[`shape${i}`] = `request-shape-${i}`;
    ajv.addSchema({ $id: `request-shape-${i}`, ...shapes[name] });
  });
  const code = esmRequires(standaloneCode(ajv, ids));
  const table = names.map((name, i) => `  ${JSON.stringify(name)}: shape${i},`).join('\n');
  const fields = names
    .map(
      (name) => `  ${JSON.stringify(name)}: ${JSON.stringify(Object.keys(shapes[name].properties ?? {}))},`,
    )
    .join('\n');
  return (
    '// Generated by scripts/request-shapes.mjs from docs/openapi.yaml; edit the document, not this file.\n' +
    `${code}\nexport const shapes = {\n${table}\n};\nexport const fields = {\n${fields}\n};\n`
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const input = process.argv[2] ?? join(repo, 'docs', 'openapi.yaml');
  const output = process.argv[3] ?? join(repo, 'dist', 'util', 'requests', 'shapes.js');
  const source = requestShapesSource(parse(readFileSync(input, 'utf8')));
  mkdirSync(dirname(output), { recursive: true });
  writeFileSync(output, source);
}
