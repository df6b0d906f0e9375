// The answers of queue-keeper's HTTP API checked against docs/openapi.yaml. An answer to a path under
// /render_queue/ or /prerender_admin/ must be documented for its path, method and status: the operation's
// responses when one serves the path and method, else the document's `x-unrouted` answers (401, 404,
// 405). Its content type must be one the response names, a JSON body must validate against that
// schema, a documented-empty answer (204, 101) must have no body, and every required response header
// must be present and valid. The harness checks every answer it receives this way (test/harness.ts).
//
// Bodies are validated with Ajv in JSON Schema 2020-12 mode, the dialect of OpenAPI 3.1 schemas; the
// document's `#/components/schemas/…` references are pointed at one registered schema of `$defs`.
import { AssertionError } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsPlugin from 'ajv-formats';
import { hasOurPrefix, originForm } from '../services/http/router.js';
import { repoRoot } from './harness.js';

export const OPENAPI_PATH = join(repoRoot, 'docs', 'openapi.yaml');

type Json = Record<string, unknown>;

/** One answer as a client saw it. */
export interface Answer {
  method: string;
  /** The request target as sent (a path with its query, or absolute form). */
  path: string;
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

interface Operation {
  template: string;
  method: string;
  responses: Json;
}

interface PathEntry {
  template: string;
  pattern: RegExp;
  /** `x-prefix`: an unauthenticated prefix route outside our two prefixes (`/p/`), checked too. */
  prefix: boolean;
  methods: Map<string, Json>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const SCHEMAS_ID = 'openapi-components';

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `#/components/schemas/X` → a reference into the registered `$defs` schema. */
function pointRefs(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(pointRefs);
  if (!isObject(v)) return v;
  const out: Json = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] =
      k === '$ref' && typeof x === 'string' && x.startsWith('#/components/schemas/')
        ? `${SCHEMAS_ID}#/$defs/${x.slice('#/components/schemas/'.length)}`
        : pointRefs(x);
  }
  return out;
}

/**
 * A path template as a pattern. An `x-prefix` path's last parameter takes the rest of the path, slashes
 * and query included (`/p/{url}`: the URL of a page).
 */
function templatePattern(template: string, prefix = false): RegExp {
  if (prefix) {
    const head = template.slice(0, template.lastIndexOf('{'));
    return new RegExp(`^${head.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.+$`);
  }
  const source = template
    .split(/(\{[^}]+\})/)
    .map((part) => (part.startsWith('{') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}$`);
}

/** The document, its paths and a cache of compiled validators. */
export class Contract {
  readonly doc: Json;
  private readonly paths: PathEntry[];
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(doc: Json) {
    this.doc = doc;
    const paths = (doc.paths ?? {}) as Record<string, Json>;
    this.paths = Object.entries(paths).map(([template, item]) => ({
      template,
      pattern: templatePattern(template, item['x-prefix'] === true),
      prefix: item['x-prefix'] === true,
      methods: new Map(
        METHODS.filter((m) => isObject(item[m])).map((m) => [m.toUpperCase(), item[m] as Json]),
      ),
    }));
    this.ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, allowUnionTypes: true });
    // ajv-formats is CommonJS: its default export reaches ESM as the module object.
    const addFormats = ((addFormatsPlugin as unknown as { default?: unknown }).default ??
      addFormatsPlugin) as unknown as (ajv: Ajv2020) => void;
    addFormats(this.ajv);
    const components = (doc.components ?? {}) as Json;
    this.ajv.addSchema({ $id: SCHEMAS_ID, $defs: pointRefs(components.schemas ?? {}) as Json });
  }

  /** Every operation of the document's paths. */
  operations(): Operation[] {
    return this.paths.flatMap((p) =>
      [...p.methods].map(([method, op]) => ({
        template: p.template,
        method,
        responses: (op.responses ?? {}) as Json,
      })),
    );
  }

  /** Follows a `#/components/...` reference (responses and headers are not schemas). */
  resolve(v: unknown): Json {
    let cur = v;
    for (let hops = 0; isObject(cur) && typeof cur.$ref === 'string'; hops++) {
      if (hops > 10) throw new Error(`reference loop at ${cur.$ref}`);
      const ref: string = cur.$ref;
      if (!ref.startsWith('#/')) throw new Error(`only local references are supported: ${ref}`);
      cur = ref
        .slice(2)
        .split('/')
        .reduce<unknown>(
          (o, k) => (isObject(o) ? o[k.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined),
          this.doc,
        );
      if (cur === undefined) throw new Error(`unresolved reference ${ref}`);
    }
    return cur as Json;
  }

  validator(key: string, schema: unknown): ValidateFunction {
    let v = this.compiled.get(key);
    if (v === undefined) {
      v = this.ajv.compile(pointRefs(schema) as Json);
      this.compiled.set(key, v);
    }
    return v;
  }

  /** Compiles every response and header schema (a schema the validator cannot compile fails here). */
  compileAll(): number {
    let n = 0;
    for (const op of this.operations())
      for (const [status, r] of Object.entries(op.responses)) {
        const response = this.resolve(r);
        for (const [mediaType, media] of Object.entries((response.content ?? {}) as Json)) {
          const schema = (media as Json).schema;
          if (schema !== undefined)
            this.validator(`${op.method} ${op.template} ${status} ${mediaType}`, schema);
          n++;
        }
        for (const [name, h] of Object.entries((response.headers ?? {}) as Json)) {
          this.validator(
            `${op.method} ${op.template} ${status} header ${name}`,
            this.resolve(h).schema ?? {},
          );
          n++;
        }
      }
    return n;
  }

  /** The responses documented for this method and path: its operation's, else `x-unrouted`'s. */
  responsesFor(method: string, pathname: string): { where: string; responses: Json } {
    const candidates = [pathname];
    if (pathname.length > 1 && pathname.endsWith('/')) candidates.push(pathname.slice(0, -1));
    for (const candidate of candidates)
      for (const p of this.paths) {
        if (!p.pattern.test(candidate)) continue;
        const op = p.methods.get(method);
        if (op) return { where: `${method} ${p.template}`, responses: (op.responses ?? {}) as Json };
      }
    const unrouted = this.doc['x-unrouted'];
    return {
      where: `x-unrouted (${method} ${pathname})`,
      responses: (isObject(unrouted) ? unrouted.responses : {}) as Json,
    };
  }

  /** What is wrong with an answer, by the document; empty when it conforms or is not ours. */
  problems(a: Answer): string[] {
    const target = originForm(a.path);
    const prefixed = this.paths.find((p) => p.prefix && p.pattern.test(target));
    if (!hasOurPrefix(target) && prefixed === undefined) return [];
    const q = target.indexOf('?');
    // A prefix route's last parameter is the rest of the target, its query included.
    const pathname = prefixed !== undefined ? target : q >= 0 ? target.slice(0, q) : target;
    const method = a.method.toUpperCase();
    const { where, responses } = this.responsesFor(method, pathname);
    const documented = responses[String(a.status)] ?? responses.default;
    if (documented === undefined)
      return [
        `${where}: status ${a.status} is not documented (documented: ${Object.keys(responses).join(', ')})`,
      ];
    const response = this.resolve(documented);
    const problems: string[] = [];
    for (const [name, h] of Object.entries((response.headers ?? {}) as Json)) {
      const header = this.resolve(h);
      const raw = a.headers[name.toLowerCase()];
      const value = Array.isArray(raw) ? raw.join(', ') : raw;
      if (value === undefined) {
        if (header.required === true) problems.push(`${where} ${a.status}: header ${name} is missing`);
        continue;
      }
      const check = this.validator(`${where} ${a.status} header ${name}`, header.schema ?? {});
      if (!check(value))
        problems.push(`${where} ${a.status}: header ${name}: ${this.ajv.errorsText(check.errors)}`);
    }
    const content = response.content as Json | undefined;
    if (content === undefined || Object.keys(content).length === 0) {
      if (a.text !== '') problems.push(`${where} ${a.status}: documented without a body, but one came`);
      return problems;
    }
    // A HEAD answer carries no body, whatever the GET answer would.
    if (method === 'HEAD') return problems;
    const contentType = a.headers['content-type'];
    const mediaType = (Array.isArray(contentType) ? contentType[0] : contentType)
      ?.split(';')[0]
      ?.trim()
      .toLowerCase();
    const media =
      mediaType === undefined ? undefined : ((content[mediaType] ?? content['*/*']) as Json | undefined);
    if (media === undefined) {
      problems.push(
        `${where} ${a.status}: content type ${JSON.stringify(contentType)} is not one of ${Object.keys(content).join(', ')}`,
      );
      return problems;
    }
    if (mediaType !== 'application/json') return problems;
    let body: unknown;
    try {
      body = JSON.parse(a.text);
    } catch {
      problems.push(`${where} ${a.status}: the body is not JSON: ${a.text.slice(0, 200)}`);
      return problems;
    }
    const check = this.validator(`${where} ${a.status} ${mediaType}`, media.schema ?? {});
    if (!check(body))
      problems.push(
        `${where} ${a.status}: ${this.ajv.errorsText(check.errors, { separator: '; ' })}: ${a.text.slice(0, 300)}`,
      );
    return problems;
  }
}

let loaded: Contract | undefined;

/** The contract in docs/openapi.yaml, read and parsed once per process. */
export function contract(): Contract {
  loaded ??= new Contract(parse(readFileSync(OPENAPI_PATH, 'utf8')) as Json);
  return loaded;
}

/** Every violation seen in this process, so one a test swallowed (a caught rejection) still fails the file. */
const violations: string[] = [];
let exitHooked = false;

/** Throws an AssertionError naming every way the answer departs from docs/openapi.yaml. */
export function assertContract(a: Answer): void {
  const problems = contract().problems(a);
  if (problems.length === 0) return;
  const message = `the answer to ${a.method} ${a.path} departs from docs/openapi.yaml:\n  ${problems.join('\n  ')}`;
  violations.push(message);
  if (!exitHooked) {
    exitHooked = true;
    process.on('exit', () => {
      if (violations.length === 0) return;
      console.error(
        `${violations.length} answers departed from docs/openapi.yaml; the first:\n${violations[0]}`,
      );
      process.exitCode = 1;
    });
  }
  throw new AssertionError({ message });
}
