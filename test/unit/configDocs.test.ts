// docs/configuration.md is generated from the schema by scripts/config-docs.mjs; a key, default, range or
// description changed in util/config/keys.ts without regenerating the page fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { CONFIG_KEYS } from '../../util/config/keys.js';
import type { ConfigKey } from '../../util/config/shape.js';
import { repoRoot } from '../harness.js';

interface ConfigDocs {
  configurationMarkdown: (keys: readonly ConfigKey[]) => string;
}

const script = (): Promise<ConfigDocs> =>
  import(pathToFileURL(join(repoRoot, 'scripts', 'config-docs.mjs')).href) as Promise<ConfigDocs>;

test('docs/configuration.md is the page scripts/config-docs.mjs writes from the schema', async () => {
  const { configurationMarkdown } = await script();
  const onDisk = readFileSync(join(repoRoot, 'docs', 'configuration.md'), 'utf8');
  assert.ok(
    onDisk === configurationMarkdown(CONFIG_KEYS),
    'docs/configuration.md is out of date: run `npm run build && node scripts/config-docs.mjs`',
  );
});

test('the generated page lists every key of the schema once, with its default, and changes with it', async () => {
  const { configurationMarkdown } = await script();
  const page = configurationMarkdown(CONFIG_KEYS);
  for (const k of CONFIG_KEYS) {
    const rows = page.split('\n').filter((l) => l.startsWith(`| \`${k.path}\` |`));
    assert.equal(rows.length, 1, k.path);
    assert.ok(rows[0]!.includes(`\`${JSON.stringify(k.default)}\``), k.path);
  }
  const changed = CONFIG_KEYS.map((k) => (k.path === 'queue.jobLeaseTime' ? { ...k, default: 123_456 } : k));
  assert.notEqual(configurationMarkdown(changed), page, 'a changed default changes the page');
});
