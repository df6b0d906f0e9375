// Operator endpoints of the foundation: config, revalidate, explain, the failing list, health, pause and resume.
import {
  ConfigError,
  configWarnings,
  withSecretsHidden,
  type QueueKeeperConfig,
} from '../../../util/config/schema.js';
import { HttpError, badRequest } from '../../../util/http/errors.js';
import { queueOf } from '../../../util/schedule/rules.js';
import { failingPage, parseFailingQuery, type FailingEntry } from '../../../util/schedule/failing.js';
import { checkSingleUrl, requireObject } from '../../../util/http/input.js';
import { wellFormed } from '../../../util/text.js';
import type { LeaseTable } from '../../../util/leases/table.js';
import { config, type RuntimeConfig } from '../../runtime/config.js';
import { reply, type Router } from '../router.js';
import { server } from '../../runtime/harper.js';
import type { KeeperLeadership } from '../../keeper/leadership.js';
import { nodeName } from '../../cluster/nodeName.js';
import type { ScheduleRow } from '../../../util/schedule/rules.js';
import { workersReady } from '../../runtime/sharedBuffers.js';
import type { NodeControl, NodeStatus } from '../../status/control.js';

/** An ignored-keys header stays this small whatever the request held (clients cap headers at 16 KiB). */
const MAX_IGNORED_HEADER_BYTES = 1024;
const MAX_IGNORED_KEY_CHARS = 100;

/**
 * The `x-ignored-keys` header: each unknown key made well-formed, cut to 100 characters and
 * percent-encoded (so a newline, a `,` or a `✓` is plain ASCII and cannot break or split the header),
 * comma-separated, and cut at 1 KiB. `x-ignored-count` always says how many there were.
 */
export function ignoredKeysHeader(keys: readonly string[]): string {
  const parts: string[] = [];
  let bytes = 0;
  for (const k of keys) {
    const cut = wellFormed(k).slice(0, MAX_IGNORED_KEY_CHARS);
    const enc = encodeURIComponent(cut);
    if (bytes + enc.length + 1 > MAX_IGNORED_HEADER_BYTES) break;
    parts.push(enc);
    bytes += enc.length + 1;
  }
  return parts.join(',');
}

/** What the keeper holds for a URL (asked of worker 0 from any worker), its score and its lease. */
async function explainExtras(
  keeper: KeeperLeadership,
  leases: () => Pick<LeaseTable, 'lookup'>,
  url: string,
  now: number,
) {
  const held = await keeper.describeHeld(url, now);
  const lease = leases().lookup(url, now);
  return { held, score: held?.score ?? null, lease: lease.state === 'none' ? null : lease };
}

/** What the admin routes act on (built in resources.ts). */
export interface AdminDeps {
  keeper: KeeperLeadership;
  control: NodeControl;
  settings: RuntimeConfig;
  /** The schedule owner's point read and revalidate (services/schedule/store.ts). */
  readRow: (url: string) => ScheduleRow | undefined;
  revalidate: (url: string, now: number) => Promise<ScheduleRow | undefined>;
  /** The failing list's entries (services/schedule/store.ts failingEntries). */
  failingEntries: () => Iterable<FailingEntry>;
  /** The node's lease table (a getter: sized at first use). */
  leases: () => Pick<LeaseTable, 'lookup'>;
  /** This node's status at an instant (services/keeper/servingView.ts). */
  nodeStatus: (now: number) => NodeStatus;
}

/** The effective config, with `warnings` naming settings that are valid but likely to surprise. */
function configAnswer(cfg: QueueKeeperConfig): QueueKeeperConfig & { warnings?: string[] } {
  const warnings = configWarnings(cfg);
  const shown = withSecretsHidden(cfg);
  return warnings.length > 0 ? { ...shown, warnings } : shown;
}

export function registerAdmin(
  router: Router,
  { keeper, control, settings, readRow, revalidate, failingEntries, leases, nodeStatus }: AdminDeps,
): void {
  router.route('GET', '/prerender_admin/health', 'admin', async () =>
    reply({ ok: true, workersReady: workersReady(), workerCount: server.workerCount ?? null }),
  );

  router.route('GET', '/prerender_admin/config', 'admin', async () => reply(configAnswer(config())));

  router.route('POST', '/prerender_admin/config', 'admin', async (req) => {
    if (typeof req.body !== 'object' || req.body === null || Array.isArray(req.body))
      throw badRequest('invalid_body', 'the body must be a nested partial configuration object');
    try {
      const r = await settings.update(req.body);
      // Built only from bounded ASCII, so nothing here can throw after the row was committed.
      const headers: Record<string, string> = {};
      if (r.ignoredCount > 0) {
        headers['x-ignored-keys'] = ignoredKeysHeader(r.ignored);
        headers['x-ignored-count'] = String(r.ignoredCount);
      }
      if (r.restartRequired.length) headers['x-restart-required'] = r.restartRequired.join(',');
      return reply(configAnswer(r.config), 200, headers);
    } catch (e) {
      if (e instanceof ConfigError) throw new HttpError(400, 'invalid_config', e.message, { key: e.key });
      throw e;
    }
  });

  const pauseHandler = (paused: boolean) => async (req: { body: unknown }) => {
    const obj = requireObject(req.body ?? {}, ['scope']);
    const scope = await control.checkScope(obj.scope);
    await control.setPause(scope, paused);
    // Published at once, not at the next status sync, when it concerns this node.
    if (scope === 'all' || scope === nodeName()) await control.publishStatus(nodeStatus(Date.now()));
    return reply({ scope, paused });
  };
  router.route('POST', '/prerender_admin/pause', 'admin', pauseHandler(true));
  router.route('POST', '/prerender_admin/resume', 'admin', pauseHandler(false));

  router.route('POST', '/prerender_admin/revalidate', 'admin', async (req) => {
    const url = checkSingleUrl(req.body);
    const row = await revalidate(url, Date.now());
    if (!row) throw new HttpError(404, 'not_found', 'no row for that url');
    return reply({ url, nextRenderTime: row.nextRenderTime, urgentAt: row.urgentAt });
  });

  // The rows that keep failing, worst first (docs/operating.md "Failing rows"): a walk of the failing
  // list, then one point read per row shown.
  router.route('GET', '/prerender_admin/failing', 'admin', async (req) => {
    const query = parseFailingQuery(req.query);
    const routes = config().render.routes;
    const { page: rows, next } = failingPage(
      failingEntries,
      query,
      (url) => queueOf(url, routes),
      (e) => {
        // An entry whose row no longer fails (deleted, or healed by a write the list missed) is passed over.
        const row = readRow(e.url);
        if (!row || row.strikes === 0) return undefined;
        return {
          url: e.url,
          queue: queueOf(e.url, routes),
          strikes: row.strikes,
          lastStatusCode: row.lastStatusCode,
          lastError: row.lastError,
          failingSince: row.failingSince,
          nextRenderTime: row.nextRenderTime,
        };
      },
    );
    return reply({ rows, next });
  });

  router.route(
    'POST',
    '/prerender_admin/explain',
    'admin',
    async (req) => {
      const url = checkSingleUrl(req.body);
      const now = Date.now();
      const row = readRow(url) ?? null;
      const extras = await explainExtras(keeper, leases, url, now);
      return reply({ url, queue: queueOf(url, config().render.routes), row, ...extras });
    },
    { observerRead: true },
  );
}
