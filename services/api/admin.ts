// Operator endpoints of the foundation: config, revalidate, explain, health.
import { ConfigError } from '../../util/configSchema.js';
import { HttpError, badRequest } from '../../util/httpError.js';
import { queueOf } from '../../util/scheduleRules.js';
import { checkSingleUrl } from '../../util/validateInput.js';
import { config, updateConfig } from '../config.js';
import { route, reply } from '../http.js';
import { server } from '../harper.js';
import { readRow, revalidate } from '../schedule.js';
import { workersReady } from '../sharedMemory.js';

export interface ExplainExtras {
  held: unknown;
  score: number | null;
  lease: unknown;
}

let explainExtras: (url: string, now: number) => Promise<ExplainExtras> = async () => ({
  held: null,
  score: null,
  lease: null,
});

/** The keeper and lease modules fill in the held entry, its score and the lease of an explained URL. */
export function setExplainExtras(fn: (url: string, now: number) => Promise<ExplainExtras>): void {
  explainExtras = fn;
}

export function registerAdmin(): void {
  route('GET', '/prerender_admin/health', 'admin', async () =>
    reply({ ok: true, workersReady: workersReady(), workerCount: server.workerCount ?? null }),
  );

  route('GET', '/prerender_admin/config', 'admin', async () => reply(config()));

  route('POST', '/prerender_admin/config', 'admin', async (req) => {
    if (typeof req.body !== 'object' || req.body === null || Array.isArray(req.body))
      throw badRequest('invalid_body', 'the body must be a nested partial configuration object');
    try {
      const r = await updateConfig(req.body);
      const headers: Record<string, string> = {};
      if (r.ignored.length) headers['x-ignored-keys'] = r.ignored.join(',');
      if (r.restartRequired.length) headers['x-restart-required'] = r.restartRequired.join(',');
      return reply(r.config, 200, headers);
    } catch (e) {
      if (e instanceof ConfigError) throw new HttpError(400, 'invalid_config', e.message, { key: e.key });
      throw e;
    }
  });

  route('POST', '/prerender_admin/revalidate', 'admin', async (req) => {
    const url = checkSingleUrl(req.body);
    const row = await revalidate(url, Date.now());
    if (!row) throw new HttpError(404, 'not_found', 'no row for that url');
    return reply({ url, nextRenderTime: row.nextRenderTime, urgentAt: row.urgentAt });
  });

  route('POST', '/prerender_admin/explain', 'admin', async (req) => {
    const url = checkSingleUrl(req.body);
    const now = Date.now();
    const row = readRow(url) ?? null;
    const extras = await explainExtras(url, now);
    return reply({ url, queue: queueOf(url, config().render.routes), row, ...extras });
  });
}
