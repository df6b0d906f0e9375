// The operator console: one static page and its two assets, served from the component's web/
// folder behind the same super_user check as every other admin endpoint. The page itself only calls the
// existing admin endpoints (queue-state, overview, fleets, hooks, stall-ledger, pause/resume), so it
// costs the server what those cost — never a per-row read, whatever the size of the table.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HttpError } from '../../runtime/httpError.js';
import { componentDir } from '../../runtime/config.js';
import { type ApiRequest, type ApiResponse, type Router, type RouteEntry } from '../router.js';

export const CONSOLE_PATH = '/prerender_admin/console';

interface Asset {
  file: string;
  contentType: string;
}

const PAGE: Asset = { file: 'console.html', contentType: 'text/html; charset=utf-8' };

// A fixed allow-list, looked up by exact name: the request's path never reaches the file system, so no
// `..`, encoded slash or absolute path can name another file.
const ASSETS: ReadonlyMap<string, Asset> = new Map([
  ['console.js', { file: 'console.js', contentType: 'text/javascript; charset=utf-8' }],
  ['console.css', { file: 'console.css', contentType: 'text/css; charset=utf-8' }],
]);

// The page is an admin control surface: it must not be framed (a framed pause button is a clickjacking
// target) and it loads nothing but its own two assets and same-origin JSON.
const PAGE_HEADERS: Record<string, string> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

// Assets are revalidated on every load: they are read once per process, so after an upgrade and restart
// a browser holding yesterday's console.js next to today's HTML would draw wrong panels.
const ASSET_HEADERS: Record<string, string> = {
  'cache-control': 'no-cache',
  'x-content-type-options': 'nosniff',
};

/** Reads a web/ file once per registration; a failed read is not cached, so a fixed install recovers. */
function load(cache: Map<string, Buffer>, asset: Asset): Buffer {
  let data = cache.get(asset.file);
  if (data === undefined) {
    data = readFileSync(join(componentDir, 'web', asset.file));
    cache.set(asset.file, data);
  }
  return data;
}

/** What the console's handlers share: this registration's file cache. */
interface ConsoleDeps {
  cache: Map<string, Buffer>;
}

function serve(deps: ConsoleDeps, asset: Asset, headers: Record<string, string>): ApiResponse {
  return { status: 200, headers, raw: { contentType: asset.contentType, data: load(deps.cache, asset) } };
}

/** `GET /prerender_admin/console`: the page. */
async function consolePage(deps: ConsoleDeps): Promise<ApiResponse> {
  return serve(deps, PAGE, PAGE_HEADERS);
}

/** `GET /prerender_admin/console/<asset>`: one of the allow-listed assets, else 404. */
async function consoleAsset(deps: ConsoleDeps, req: ApiRequest): Promise<ApiResponse> {
  const asset = req.params.length === 1 ? ASSETS.get(req.params[0]!) : undefined;
  if (!asset) throw new HttpError(404, 'not_found', `no console asset at ${req.path}`);
  return serve(deps, asset, ASSET_HEADERS);
}

const CONSOLE_ROUTES: readonly RouteEntry<ConsoleDeps>[] = [
  { method: 'GET', path: CONSOLE_PATH, caller: 'admin', handler: consolePage },
  { method: 'GET', path: `${CONSOLE_PATH}/*`, caller: 'admin', handler: consoleAsset },
];

export function registerConsole(router: Router): void {
  router.register(CONSOLE_ROUTES, { cache: new Map() });
}
