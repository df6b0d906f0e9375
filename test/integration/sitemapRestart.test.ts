// A sitemap walk cut by a crash (kill -9 of Harper mid-walk) is walked again from its root once its
// lease runs out, and files nothing twice: the URLs filed before the crash read as unchanged
// (docs/sitemaps.md "Refresh"). A loopback site on 127.0.0.1, allow-listed exactly.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { postConfig } from '../api.js';
import { startHarper, type HarperInstance } from '../harness.js';
import { SitemapSite, sitemapIndex, urlset } from '../sitemapSite.js';
import { until } from '../wait.js';

let h: HarperInstance;
const site = new SitemapSite();
let stalled = true;
const held: Array<{ end: () => void }> = [];

before(
  async () => {
    await site.start();
    h = await startHarper();
    await postConfig(h, {
      sitemaps: { allowHttp: true, allowCidrs: ['127.0.0.1'], requestTimeout: 20_000 },
      maintenance: { tickInterval: 1000 },
    });
  },
  { timeout: 180_000 },
);

after(async () => {
  for (const r of held) r.end();
  await h?.destroy();
  await site.stop();
});

const FAST = 1500;
const SLOW = 40;

test(
  'a walk cut by a crash is walked again after its lease, and files nothing twice',
  { timeout: 400_000 },
  async () => {
    site.set('/index.xml', sitemapIndex([site.url('/fast.xml'), site.url('/slow.xml')]));
    site.set('/fast.xml', urlset(Array.from({ length: FAST }, (_, i) => ({ loc: site.url(`/fast/${i}`) }))));
    const slowBody = urlset(Array.from({ length: SLOW }, (_, i) => ({ loc: site.url(`/slow/${i}`) })));
    // The second child answers its head and then nothing while `stalled`: the walk waits in it.
    site.stream('/slow.xml', (res) => {
      res.writeHead(200, { 'content-type': 'application/xml' });
      if (!stalled) {
        res.end(slowBody);
        return;
      }
      res.write('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">');
      res.on('error', () => undefined);
      held.push({ end: () => res.destroy() });
    });
    const r = await h.fetch('/render_queue/sitemaps', { body: { url: site.url('/index.xml') } });
    assert.equal(r.status, 202, r.text);
    const id = r.json.id as string;
    await until('the walk to reach the stalled child', () => site.hitsOf('/slow.xml').ok > 0, 60_000);
    const midway = await h.fetch(`/render_queue/sitemaps/${id}`);
    assert.equal(midway.json.state, 'walking');

    await h.kill();
    stalled = false;
    for (const s of held.splice(0)) s.end();
    h = await startHarper({ root: h.root });

    const done = await until(
      'the walk to be resumed and end',
      async () => {
        const s = (await h.fetch(`/render_queue/sitemaps/${id}`)).json;
        return s.state === 'idle' && s.lastWalk ? s : undefined;
      },
      240_000,
      500,
    );
    const w = done.lastWalk;
    assert.equal(w.urlsSeen, FAST + SLOW);
    assert.equal(w.filed, SLOW, 'only the URLs the crash kept from being filed are filed');
    assert.equal(w.unchanged, FAST, 'the URLs filed before the crash are not filed again');
    const row = (await h.fetch('/prerender_admin/explain', { body: { url: site.url('/slow/3') } })).json.row;
    assert.equal(row?.sitemapId, id);
  },
);
