// Keeping docs true (docs/development.md): the documentation names only config keys, metrics, routes,
// error codes and roles that exist, and lists every route and metric family there is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { codeNames, docPages, docsProblems, endpointTable, type DocPage } from '../docsTruth.js';

const pages = docPages();
const code = codeNames();

/** A copy of the pages with `from` replaced by `to` in one file. */
function edited(file: string, from: string, to: string): DocPage[] {
  return pages.map((p) => {
    if (p.file !== file) return p;
    assert.ok(p.text.includes(from), `${file} names ${from}`);
    return { file, text: p.text.split(from).join(to) };
  });
}

test('the documentation names only what the code has, and lists every route and metric family', () => {
  assert.deepEqual(docsProblems(pages, code), []);
});

test('the endpoint table is read the way it is written: method lists, …/ paths, siblings and alternatives', () => {
  const page = [
    '## Endpoints',
    '',
    '| endpoint | caller | what |',
    '|---|---|---|',
    '| `POST /render_queue/claim` | fleet | x |',
    '| `POST /prerender_admin/pause`, `/resume` | operator | x |',
    '| `POST`, `GET /prerender_admin/hooks`; `POST …/hooks/<id>/rotate\\|enable`; `DELETE …/hooks/<id>` | operator | x |',
    '',
    '## Next',
  ].join('\n');
  assert.deepEqual(endpointTable(page), [
    'POST /render_queue/claim',
    'POST /prerender_admin/pause',
    'POST /prerender_admin/resume',
    'POST /prerender_admin/hooks',
    'GET /prerender_admin/hooks',
    'POST /prerender_admin/hooks/{id}/rotate',
    'POST /prerender_admin/hooks/{id}/enable',
    'DELETE /prerender_admin/hooks/{id}',
  ]);
});

test('a config key the docs name that the code renamed fails the check', () => {
  // The same rename seen from either side: the page keeps an old name, or the code drops the one it names.
  const renamedInDocs = edited(
    'docs/configuration.md',
    '`queue.keeper.publishInterval`',
    '`queue.keeper.publishEvery`',
  );
  assert.ok(
    docsProblems(renamedInDocs, code).includes(
      'docs/configuration.md: config key queue.keeper.publishEvery is not in util/config/keys.ts',
    ),
  );
  const renamedInCode = {
    ...code,
    configKeys: code.configKeys.map((k) => (k === 'stall.maxNudges' ? 'stall.nudgeLimit' : k)),
  };
  assert.ok(
    docsProblems(pages, renamedInCode).some((p) =>
      p.endsWith('config key stall.maxNudges is not in util/config/keys.ts'),
    ),
  );
});

test('a route, metric, error code or role the code does not have fails the check, and so does an undocumented route or metric', () => {
  const problems = (list: DocPage[], names = code) => docsProblems(list, names);
  assert.ok(
    problems(edited('docs/architecture.md', '`POST /render_queue/claim`', '`POST /render_queue/grab`')).some(
      (p) => p.startsWith('docs/architecture.md: route') && p.includes('/render_queue/grab'),
    ),
  );
  assert.ok(
    problems(edited('docs/monitoring.md', 'queue_keeper_keeper_live', 'queue_keeper_keeper_alive')).includes(
      'docs/monitoring.md: metric queue_keeper_keeper_alive is not in util/metrics/catalogue.ts',
    ),
  );
  assert.ok(
    problems(edited('docs/http-api.md', '`invalid_cursor`', '`invalid_pointer`')).includes(
      'docs/http-api.md: error code invalid_pointer is never answered',
    ),
  );
  assert.ok(
    problems(edited('docs/operating.md', 'render_observer', 'render_watcher')).some((p) =>
      p.includes('render_watcher is neither a role'),
    ),
  );
  const more = { ...code, routes: [...code.routes, 'GET /prerender_admin/secrets'] };
  assert.ok(
    problems(pages, more).includes('docs/http-api.md: GET /prerender_admin/secrets is served but not listed'),
  );
  const family = { ...code, metricFamilies: [...code.metricFamilies, 'queue_keeper_new_total'] };
  assert.ok(
    problems(pages, family).includes('docs/monitoring.md: metric queue_keeper_new_total is not documented'),
  );
});
