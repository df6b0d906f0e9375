// The docs check (docs/development.md, "Keeping docs true"): every config key, metric, route, error code
// and role the documentation names exists in the code, and every route and metric family the code has is
// documented. `docsProblems` is pure over texts and the code's names, so a test can hand it a modified copy
// of either side and see the check fail.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { CONFIG_KEYS } from '../util/config/keys.js';
import { METRICS, seriesNames, type MetricDef } from '../util/metrics/catalogue.js';
import { repoRoot } from './harness.js';
import { sourceFiles } from './sourceFiles.js';

/** What the code defines, by name. */
export interface CodeNames {
  /** Every config key path (util/config/keys.ts). */
  configKeys: readonly string[];
  /** Every metric family's exposition name (util/metrics/catalogue.ts). */
  metricFamilies: readonly string[];
  /** Every series name, a histogram's `_bucket`, `_sum` and `_count` included. */
  metricSeries: ReadonlySet<string>;
  /** Every route as `METHOD /path`, a parameter written `{name}` (docs/openapi.yaml, which the route test ties to the router). */
  routes: readonly string[];
  /** Every quoted string of util/ and services/: an error code must be one of them… */
  literals: ReadonlySet<string>;
  /** …or one of these followed by one of them (`'invalid_' + field`, with `'username'` the field). */
  prefixes: readonly string[];
  /** The roles roles.yaml defines. */
  roles: readonly string[];
  /** The databases schema.graphql puts tables in (also `render_…`, but not roles). */
  databases: readonly string[];
}

/** A page of documentation: its repository path and its text. */
export interface DocPage {
  file: string;
  text: string;
}

/** Top-level sections of our configuration: a `queue.…` in backticks is ours; `logging.…` is Harper's. */
const SECTIONS = ['queue', 'render', 'notify', 'stall', 'maintenance'];
const CONFIG_TOKEN = new RegExp(`^(?:${SECTIONS.join('|')})\\.[A-Za-z][\\w.]*$`);
const METRIC_TOKEN = /\bqueue_keeper_[a-z0-9_]+/g;
const ROLE_TOKEN = /\brender_[a-z_]+\b/g;
const METHODS = ['GET', 'POST', 'DELETE', 'PUT', 'PATCH'];
const OUR_PATH = /^\/(?:render_queue|prerender_admin)\/\S/;

function backticked(text: string): string[] {
  return [...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!);
}

/** A documented path as a pattern: `<id>` or `{id}` matches one segment; a query is dropped. */
function pathPattern(path: string): RegExp {
  const bare = path.split('?')[0]!.replace(/\/$/, '');
  const parts = bare.split(/<[^>]+>|\{[^}]+\}/).map((p) => p.replace(/[.*+?^$()[\]\\|]/g, '\\$&'));
  return new RegExp(`^${parts.join('[^/]+')}$`);
}

/** The code's paths with every parameter made a placeholder, for matching a documented path. */
function concrete(route: string): string {
  return route.replace(/\{[^}]+\}/g, 'x');
}

/**
 * The routes of the endpoint table of docs/http-api.md, as `METHOD /path`. A cell lists backticked parts
 * separated by `;`: `GET`, `POST /a/b` (methods then a path), `…/b/<id>` (under the last path's prefix),
 * `/resume` (a sibling of the last path, same methods), `x\|y` (alternatives of the last segment).
 */
export function endpointTable(page: string): string[] {
  const start = page.indexOf('## Endpoints');
  const section = page.slice(start, page.indexOf('\n## ', start + 1));
  const out: string[] = [];
  for (const row of section.split('\n')) {
    const cell = /^\| (`[^|]*?(?:\\\|[^|]*?)*) \|/.exec(row)?.[1];
    if (cell === undefined) continue;
    let methods: string[] = [];
    let pending: string[] = [];
    let last = '';
    for (const part of backticked(cell)) {
      const [first, rest] = part.includes(' ') ? part.split(/ (.*)/s) : [part, ''];
      if (METHODS.includes(first!) && rest === '') {
        pending.push(first!);
        continue;
      }
      const own = METHODS.includes(first!) ? [first!] : [];
      let path = METHODS.includes(first!) ? rest! : part;
      if (own.length > 0 || pending.length > 0) methods = [...pending, ...own];
      pending = [];
      if (path.startsWith('…/')) path = `/${last.split('/')[1]}/${path.slice(2)}`;
      else if (path.split('/').length === 2) path = `${last.slice(0, last.lastIndexOf('/'))}${path}`;
      last = path;
      const slash = path.lastIndexOf('/');
      for (const leaf of path.slice(slash + 1).split('\\|'))
        for (const m of methods)
          out.push(`${m} ${path.slice(0, slash + 1)}${leaf}`.replace(/<([^>]+)>/g, '{$1}'));
    }
  }
  return out;
}

/** The error codes of the error table of docs/http-api.md (a row may name two). */
function errorCodes(page: string): string[] {
  return [...page.matchAll(/^\| \d{3} \| (`[^|]+`) \|/gm)].flatMap((m) => backticked(m[1]!));
}

/** Whether the code can answer an error code: as one literal, or a prefix literal joined to another. */
function answered(c: string, code: CodeNames): boolean {
  return (
    code.literals.has(c) || code.prefixes.some((p) => c.startsWith(p) && code.literals.has(c.slice(p.length)))
  );
}

/** Everything the documentation names that the code does not have, and what the code has undocumented. */
export function docsProblems(pages: readonly DocPage[], code: CodeNames): string[] {
  const problems: string[] = [];
  const keys = new Set(code.configKeys);
  const sections = new Set(
    code.configKeys.flatMap((k) => k.split('.').map((_, i, a) => a.slice(0, i).join('.'))),
  );
  const roles = new Set(code.roles);
  const databases = new Set(code.databases);
  for (const { file, text } of pages) {
    for (const token of backticked(text)) {
      const key = token.replace(/[:=].*$/, '').trim();
      if (CONFIG_TOKEN.test(key) && !keys.has(key) && !sections.has(key))
        problems.push(`${file}: config key ${key} is not in util/config/keys.ts`);
      const route = /^(?:(GET|POST|DELETE|PUT|PATCH) )?(\/\S+)$/.exec(token);
      if (route && OUR_PATH.test(route[2]!)) {
        const pattern = pathPattern(route[2]!);
        const hit = code.routes.some(
          (r) =>
            pattern.test(concrete(r.split(' ')[1]!)) &&
            (route[1] === undefined || r.startsWith(`${route[1]} `)),
        );
        if (!hit) problems.push(`${file}: route ${token} is not served`);
      }
    }
    for (const m of text.matchAll(METRIC_TOKEN))
      if (!code.metricSeries.has(m[0]))
        problems.push(`${file}: metric ${m[0]} is not in util/metrics/catalogue.ts`);
    for (const m of text.matchAll(ROLE_TOKEN))
      if (!roles.has(m[0]) && !databases.has(m[0]))
        problems.push(`${file}: ${m[0]} is neither a role of roles.yaml nor a database of schema.graphql`);
  }
  const api = pages.find((p) => p.file === 'docs/http-api.md');
  if (api === undefined) problems.push('docs/http-api.md is missing');
  else {
    const table = endpointTable(api.text);
    for (const r of table)
      if (!code.routes.includes(r)) problems.push(`docs/http-api.md: ${r} is not served`);
    for (const r of code.routes)
      if (!table.includes(r)) problems.push(`docs/http-api.md: ${r} is served but not listed`);
    for (const c of errorCodes(api.text))
      if (!answered(c, code)) problems.push(`docs/http-api.md: error code ${c} is never answered`);
  }
  const monitoring = pages.find((p) => p.file === 'docs/monitoring.md')?.text ?? '';
  for (const name of code.metricFamilies)
    if (!monitoring.includes(`\`${name}\``))
      problems.push(`docs/monitoring.md: metric ${name} is not documented`);
  return problems;
}

/** The documentation as it stands: docs/*.md, the README and the client's README. */
export function docPages(): DocPage[] {
  const docs = readdirSync(join(repoRoot, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`);
  return [...docs, 'README.md', 'client/README.md'].map((file) => ({
    file,
    text: readFileSync(join(repoRoot, file), 'utf8'),
  }));
}

/** The names the code defines as it stands. */
export function codeNames(): CodeNames {
  const api = parseYaml(readFileSync(join(repoRoot, 'docs', 'openapi.yaml'), 'utf8')) as {
    paths: Record<string, Record<string, unknown>>;
  };
  const routes = Object.entries(api.paths).flatMap(([path, ops]) =>
    Object.keys(ops)
      .filter((m) => METHODS.includes(m.toUpperCase()))
      .map((m) => `${m.toUpperCase()} ${path}`),
  );
  const literals = new Set<string>();
  const prefixes = new Set<string>();
  for (const dir of ['util', 'services'])
    for (const f of sourceFiles(join(repoRoot, dir))) {
      const text = readFileSync(f, 'utf8');
      for (const m of text.matchAll(/'([a-z][A-Za-z_]*)'/g)) literals.add(m[1]!);
      for (const m of text.matchAll(/'([a-z][a-z]*_)' \+/g)) prefixes.add(m[1]!);
    }
  const roles = Object.keys(parseYaml(readFileSync(join(repoRoot, 'roles.yaml'), 'utf8')) as object);
  const databases = [
    ...new Set(
      [...readFileSync(join(repoRoot, 'schema.graphql'), 'utf8').matchAll(/database: "(\w+)"/g)].map(
        (m) => m[1]!,
      ),
    ),
  ];
  return {
    configKeys: CONFIG_KEYS.map((k) => k.path),
    metricFamilies: (Object.values(METRICS) as MetricDef[]).map((d) => d.name),
    metricSeries: seriesNames(),
    routes,
    literals,
    prefixes: [...prefixes],
    roles,
    databases,
  };
}
