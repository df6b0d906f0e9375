// Crash soak: one root, one real Harper (2 worker threads), a mixed load, and SIGKILL
// at random moments, KILLS times, each followed by a restart on the same root and a check of every
// invariant against a ledger of what the server acknowledged.
//
// Load, between kills (all loops on keep-alive connections, stopped at each kill):
//   - a feeder filing new rows (until UNIVERSE urls exist) and re-filing random known urls due now
//     (re-filing brings deleted urls back on purpose);
//   - a deleter removing small batches, half of them rows leased at that moment;
//   - 24 fleet clients (4 fleet users, 6 clients each) claiming 25, "rendering" 0–300 ms, reporting
//     rendered (85 %) or failed (15 %) through job_results; 2 % of grants are abandoned (never
//     reported, so their leases expire); 10 % of result batches are sent a second time after the
//     answer and 5 % twice at once (idempotent: same answer, `duplicate: true`); 3 % of batches first
//     send one result as another fleet user (must be 409 superseded).
// Kills: the load runs for a random 0.3–10 s and Harper is SIGKILLed; 15 % of the kills instead come
// 0–1.5 s after a restart's readiness, with only the first-grant probe running (the keeper may still
// be loading); that restart is checked after the next one.
// After every restart the load stays stopped while: a probe claims from the spawn on (time to first
// grant), results whose answer the crash swallowed are sent once more (the new process has no lease for
// them: 409 expected), every row is read (operations API search_by_value) and checked, and the keeper's
// held count is compared with the table.
//
// Invariants (all times are this machine's Date.now(), the clock the server stamps rows with):
//   I1 acknowledged result kept: an accepted `rendered` sent at s shows lastRenderedAt ≥ s, unless a
//      delete of the url may have run after s; an accepted `failed` with no possibly-applied render or
//      delete after it shows lastOutcome 'failed' and strikes ≥ the accepted failures since.
//   I2 one failure, one strike: strikes ≤ distinct failed tokens possibly applied since the last
//      accepted render or delete (a retried failure must not count twice).
//   I3 deleted stays deleted: a url whose delete was acknowledged, and whose every filing ended before
//      that delete was sent, has no row.
//   I4 acknowledged filing kept: a url filed (answered 200) after every delete of it ended has a row.
//   I5 one live lease per key: within one process, a grant of a key while an earlier grant of it had
//      not expired (expiresAt after the later grant's answer) and no result that could release it had
//      been sent. Leases live in per-process shared memory, so a grant after a restart of a key leased
//      before the crash is expected (counted, not a violation).
//   I6 keeper holds every row: trust.keeper.rows equals the table's row count once the keeper is live,
//      and explain shows a held entry for sampled rows and none for sampled absent urls.
//   I7 idempotent answers: a repeated result gets the first answer with `duplicate: true`; a result
//      from another user is 409 superseded; a result of a lease of the previous process is not accepted.
//   I8 no stranger rows: every row in the table is a url this soak filed.
// Run: npx tsc -p tsconfig.json && node dist/bench/crash-soak.js [kills] [initialRows] [universe]
import {
  ADMIN_PASS,
  ADMIN_USER,
  startHarper,
  type Credentials,
  type HarperInstance,
} from '../test/harness.js';
import { benchUrl, jsonClientAt, loadavg, machine, median, sleep, until } from './lib.js';

const KILLS = Number(process.argv[2] ?? 50);
const INITIAL_ROWS = Number(process.argv[3] ?? 30_000);
const UNIVERSE = Number(process.argv[4] ?? 45_000);
const USERS = 4;
const CLIENTS_PER_USER = 6;
const LIMIT = 25;
/** Short leases so abandoned grants expire (and are granted again) inside one process's life. */
const LEASE_MS = 10_000;
const FILE_BATCH = 500;
const DELETE_BATCH = 40;
const BOOT_KILL_SHARE = 0.15;
const SAMPLE_EXPLAIN = 60;
/** Another build of the component to soak (e.g. a checkout of an older commit); default this one. */
const componentDir = process.env.COMPONENT_DIR || undefined;

const feeder: Credentials = { username: 'soak-feeder', password: 'soak-feeder-pass' };
const fleetUsers: Credentials[] = Array.from({ length: USERS }, (_, i) => ({
  username: `soak-fleet-${i}`,
  password: `soak-fleet-pass-${i}`,
}));
const probeUser: Credentials = { username: 'soak-probe', password: 'soak-probe-pass' };

type Answer =
  | { id: string; accepted: true; nextRenderTime: number; duplicate?: true }
  | { id: string; accepted: false; code: string; duplicate?: true };

/** One keep-alive connection speaking JSON; errors (the server died) reject. */
function connection(url: string, who: Credentials | undefined) {
  return jsonClientAt(url, who ?? { username: ADMIN_USER, password: ADMIN_PASS });
}
type Conn = ReturnType<typeof connection>;

// ---- the ledger -------------------------------------------------------------------------------

interface FailReport {
  sent: number;
  token: string;
  acked: boolean;
}

/** What the server acknowledged about one url (times are send or end instants, -Infinity = never). */
interface UrlLedger {
  fileAckSent: number;
  fileEnd: number;
  delAckSent: number;
  delEnd: number;
  renderAckSent: number;
  renderMaybeSent: number;
  fails: FailReport[];
}

const ledger = new Map<string, UrlLedger>();
function entry(url: string): UrlLedger {
  let e = ledger.get(url);
  if (!e) {
    e = {
      fileAckSent: -Infinity,
      fileEnd: -Infinity,
      delAckSent: -Infinity,
      delEnd: -Infinity,
      renderAckSent: -Infinity,
      renderMaybeSent: -Infinity,
      fails: [],
    };
    ledger.set(url, e);
  }
  return e;
}

interface ResultRecord {
  sent: number;
  outcome: 'rendered' | 'failed';
  /** 'acc' accepted, 'gone' 404 unknown_job, 'rej' superseded/invalid, 'unk' no answer (crash). */
  state: 'acc' | 'gone' | 'rej' | 'unk';
  nextRenderTime?: number;
}

interface Grant {
  url: string;
  token: string;
  user: string;
  sent: number;
  recv: number;
  expiresAt: number;
  results: ResultRecord[];
}

/** Grants of the current process, per url; judged (I5) when the process dies. */
let epochGrants = new Map<string, Grant[]>();
/** Urls leased at the last kill, to count expected re-grants after the restart. */
let leasedAtKill = new Set<string>();
/** Results whose answer the crash swallowed, per fleet user, resent once after the restart. */
const unanswered = new Map<string, Array<{ grant: Grant; result: Record<string, unknown> }>>();

/** The last events of each url (kind, send, end, answer, process number), printed with a violation. */
const HISTORY = 16;
const history = new Map<string, Array<[string, number, number, string, number]>>();
let epoch = 0;
function remember(url: string, kind: string, sent: number, end: number, answer: string) {
  let h = history.get(url);
  if (!h) history.set(url, (h = []));
  h.push([kind, sent, end, answer, epoch]);
  if (h.length > HISTORY) h.shift();
}

const violations: Array<Record<string, unknown>> = [];
/** A violation that persists is found again by every later check: reported once, counted once. */
const reported = new Set<string>();
function violation(kind: string, details: Record<string, unknown>) {
  const url = typeof details.url === 'string' ? details.url : undefined;
  const id = url ? `${kind} ${url}` : undefined;
  if (id && reported.has(id)) return;
  if (id) reported.add(id);
  violations.push({ kind, at: new Date().toISOString(), ...details });
  console.log(
    JSON.stringify({ violation: kind, ...details, ...(url ? { history: history.get(url) ?? [] } : {}) }),
  );
}

const counts = {
  grants: 0,
  resultsSent: 0,
  accepted: 0,
  gone: 0,
  superseded: 0,
  unanswered: 0,
  abandoned: 0,
  dupSequential: 0,
  dupConcurrent: 0,
  impostor409: 0,
  repeatSupersededAfterRegrant: 0,
  retriedAfterRestart: 0,
  retriedAfterRestart409: 0,
  filings: 0,
  filedUrls: 0,
  deletes: 0,
  deletedUrls: 0,
  requestErrors: 0,
  regrantsAfterRestart: 0,
  leasePairsJudged: 0,
};

// ---- load -------------------------------------------------------------------------------------

let stopLoad = false;
let created = 0;
const universe: string[] = [];
const urlOf = (i: number) => benchUrl('soak', i);

function pick<T>(xs: T[]): T {
  return xs[Math.floor(Math.random() * xs.length)]!;
}

/** Files `targets`, recording each url's send and end and whether the server accepted it. */
async function file(c: Conn, targets: Array<{ url: string; dueAt?: number }>): Promise<boolean> {
  const sent = Date.now();
  counts.filings++;
  try {
    const r = await c.send('POST', '/render_queue/targets', { targets });
    const end = Date.now();
    const rejected = new Set<number>(
      ((r.json?.rejected ?? []) as Array<{ index: number }>).map((x) => x.index),
    );
    targets.forEach((t, i) => {
      const e = entry(t.url);
      e.fileEnd = Math.max(e.fileEnd, end);
      if (r.status === 200 && !rejected.has(i)) e.fileAckSent = Math.max(e.fileAckSent, sent);
      remember(t.url, t.dueAt === undefined ? 'file' : 'file-due', sent, end, String(r.status));
    });
    if (r.status === 200) counts.filedUrls += targets.length - rejected.size;
    return r.status === 200;
  } catch {
    const end = Date.now();
    counts.requestErrors++;
    for (const t of targets) {
      entry(t.url).fileEnd = Math.max(entry(t.url).fileEnd, end);
      remember(t.url, 'file', sent, end, 'no answer');
    }
    return false;
  }
}

async function feederLoop(c: Conn) {
  while (!stopLoad) {
    const now = Date.now();
    if (created < UNIVERSE && Math.random() < 0.3) {
      const batch = Array.from({ length: Math.min(FILE_BATCH, UNIVERSE - created) }, (_, k) => {
        const url = urlOf(created + k);
        return Math.random() < 0.5 ? { url, dueAt: now - 60_000 } : { url };
      });
      // A url joins the universe when it is first sent: an unanswered filing may have created it.
      for (const t of batch) universe.push(t.url);
      created += batch.length;
      await file(c, batch);
    } else {
      const urls = new Set<string>();
      while (urls.size < FILE_BATCH && urls.size < universe.length) urls.add(pick(universe));
      await file(
        c,
        [...urls].map((url) => ({ url, dueAt: now - 60_000 })),
      );
    }
    await sleep(250);
  }
}

/** Grants out at this moment (granted, not yet reported), for the deleter to aim at. */
const inFlight = new Map<string, Grant>();

async function deleterLoop(c: Conn) {
  while (!stopLoad) {
    await sleep(300);
    const urls = new Set<string>();
    const leased = [...inFlight.keys()];
    // Both arrays hold distinct urls, so each loop ends (its bound never exceeds what it can reach).
    while (urls.size < Math.min(DELETE_BATCH / 2, leased.length)) urls.add(pick(leased));
    while (urls.size < Math.min(DELETE_BATCH, universe.length)) urls.add(pick(universe));
    const list = [...urls];
    const sent = Date.now();
    counts.deletes++;
    try {
      const r = await c.send('DELETE', '/render_queue/targets', { urls: list });
      const end = Date.now();
      for (const u of list) {
        const e = entry(u);
        e.delEnd = Math.max(e.delEnd, end);
        if (r.status === 200) e.delAckSent = Math.max(e.delAckSent, sent);
        remember(u, 'delete', sent, end, String(r.status));
      }
      if (r.status === 200) counts.deletedUrls += Number(r.json?.deleted ?? 0);
    } catch {
      const end = Date.now();
      counts.requestErrors++;
      for (const u of list) {
        entry(u).delEnd = Math.max(entry(u).delEnd, end);
        remember(u, 'delete', sent, end, 'no answer');
      }
    }
  }
}

function recordGrant(
  url: string,
  token: string,
  user: string,
  sent: number,
  recv: number,
  expiresAt: number,
) {
  const g: Grant = { url, token, user, sent, recv, expiresAt, results: [] };
  remember(url, `grant ${token} ${user}`, sent, recv, `expires ${expiresAt}`);
  let list = epochGrants.get(url);
  if (!list) epochGrants.set(url, (list = []));
  list.push(g);
  counts.grants++;
  if (leasedAtKill.delete(url)) counts.regrantsAfterRestart++;
  return g;
}

async function claim(c: Conn, user: string, limit: number): Promise<Grant[] | null> {
  const sent = Date.now();
  try {
    const r = await c.send('POST', '/render_queue/claim', { limit });
    const recv = Date.now();
    if (r.status !== 200 || !Array.isArray(r.json)) return null;
    return (r.json as Array<{ id: string; leaseToken: string; expiresAt: number }>).map((j) =>
      recordGrant(j.id, j.leaseToken, user, sent, recv, j.expiresAt),
    );
  } catch {
    counts.requestErrors++;
    return null;
  }
}

/** Records a result's answer in the ledger (I1, I2) and on its grant (I5). */
function noteResult(g: Grant, rec: ResultRecord) {
  g.results.push(rec);
  remember(g.url, `${rec.outcome} ${g.token}`, rec.sent, Date.now(), rec.state);
  const e = entry(g.url);
  if (rec.outcome === 'rendered') {
    if (rec.state === 'acc') e.renderAckSent = Math.max(e.renderAckSent, rec.sent);
    if (rec.state === 'acc' || rec.state === 'unk') e.renderMaybeSent = Math.max(e.renderMaybeSent, rec.sent);
  } else if (rec.state === 'acc' || rec.state === 'unk') {
    e.fails.push({ sent: rec.sent, token: g.token, acked: rec.state === 'acc' });
  }
}

function stateOf(a: Answer | undefined): ResultRecord['state'] {
  if (!a) return 'unk';
  if (a.accepted) return 'acc';
  return a.code === 'unknown_job' ? 'gone' : 'rej';
}

/** Sends one job_results batch; answers by position, or null when the request died. */
async function report(c: Conn, results: Array<Record<string, unknown>>): Promise<Answer[] | null> {
  try {
    const r = await c.send('POST', '/render_queue/job_results', { results });
    if (r.status !== 200) {
      violation('job_results not 200', { status: r.status, body: r.text.slice(0, 300) });
      return null;
    }
    return r.json.results as Answer[];
  } catch {
    counts.requestErrors++;
    return null;
  }
}

function sameAnswer(first: Answer, again: Answer): boolean {
  if (first.accepted !== again.accepted) return false;
  if (first.accepted && again.accepted) return first.nextRenderTime === again.nextRenderTime;
  return !first.accepted && !again.accepted && first.code === again.code;
}

/** I7 for a repeated copy: the first answer again, marked duplicate (a superseded copy stays 409). */
function checkRepeat(url: string, first: Answer, again: Answer, how: string, token: string) {
  const needsDup = first.accepted || first.code === 'unknown_job';
  if (needsDup && !again.accepted && again.code === 'superseded') {
    // The key was granted again between the two copies: its old token is no longer the latest grant.
    const regranted = (epochGrants.get(url) ?? []).some((g) => g.token !== token && g.recv <= Date.now());
    if (regranted) {
      counts.repeatSupersededAfterRegrant++;
      return;
    }
  }
  if (!sameAnswer(first, again) || (needsDup && again.duplicate !== true))
    violation('repeated result answered differently', { how, first, again });
}

async function fleetLoop(c: Conn, impostor: Conn, user: string) {
  while (!stopLoad) {
    const jobs = await claim(c, user, LIMIT);
    if (!jobs || jobs.length === 0) {
      await sleep(50);
      continue;
    }
    for (const g of jobs) inFlight.set(g.url, g);
    await sleep(Math.random() * 300);
    if (stopLoad) {
      // Harper died while this client rendered: it reports after the restart, as a fleet would.
      const l = unanswered.get(user) ?? [];
      unanswered.set(user, l);
      for (const g of jobs)
        l.push({
          grant: g,
          result: { id: g.url, leaseToken: g.token, outcome: 'rendered', statusCode: 200 },
        });
      break;
    }
    const kept = jobs.filter((g) => {
      if (Math.random() >= 0.02) return true;
      counts.abandoned++;
      inFlight.delete(g.url);
      return false;
    });
    if (kept.length === 0) continue;
    const results = kept.map((g) => {
      const outcome = Math.random() < 0.15 ? 'failed' : 'rendered';
      return {
        id: g.url,
        leaseToken: g.token,
        outcome,
        statusCode: outcome === 'failed' ? 503 : 200,
        ...(outcome === 'failed' ? { error: { name: 'SoakError', message: 'deliberate failure' } } : {}),
      };
    });
    if (Math.random() < 0.03) {
      // Another fleet user reports the first lease: never accepted, changes nothing, releases nothing.
      const a = await report(impostor, [results[0]!]);
      if (a) {
        if (a[0]!.accepted || a[0]!.code !== 'superseded')
          violation('result from another user not 409 superseded', { answer: a[0] });
        else counts.impostor409++;
      }
    }
    const concurrent = Math.random() < 0.05;
    const sent = Date.now();
    counts.resultsSent += results.length;
    const [answers, twin] = await Promise.all([
      report(c, results),
      concurrent ? report(c, results) : Promise.resolve(null),
    ]);
    kept.forEach((g, i) => {
      inFlight.delete(g.url);
      const outcome = results[i]!.outcome as 'rendered' | 'failed';
      let a = answers?.[i];
      const b = twin?.[i];
      if (concurrent && a && b) {
        counts.dupConcurrent++;
        // Exactly one copy applies; the other carries its answer with `duplicate: true`.
        const firstIsA = a.duplicate !== true;
        checkRepeat(g.url, firstIsA ? a : b, firstIsA ? b : a, 'concurrent', g.token);
        if (a.duplicate === true && b.duplicate === true && (a.accepted || a.code === 'unknown_job'))
          violation('both concurrent copies marked duplicate', { a, b });
        a = firstIsA ? a : b;
      } else if (!a && b) a = b;
      const state = stateOf(a);
      if (state === 'acc') counts.accepted++;
      else if (state === 'gone') counts.gone++;
      else if (state === 'rej') counts.superseded++;
      else counts.unanswered++;
      noteResult(g, {
        sent,
        outcome,
        state,
        ...(a?.accepted ? { nextRenderTime: a.nextRenderTime } : {}),
      });
      if (state === 'unk') {
        let l = unanswered.get(user);
        if (!l) unanswered.set(user, (l = []));
        l.push({ grant: g, result: results[i]! });
      }
    });
    if (answers && !concurrent && Math.random() < 0.1) {
      const again = await report(c, results);
      if (again) {
        counts.dupSequential++;
        answers.forEach((a, i) => checkRepeat(kept[i]!.url, a, again[i]!, 'sequential', kept[i]!.token));
      }
    }
  }
}

// ---- restart, first grant, checks -------------------------------------------------------------

/** Spawns Harper on `root` while one probe claims from the first instant; ms spawn → first grant. */
async function restart(root: string, probe: Conn, measure: boolean) {
  epoch++;
  const spawnAt = performance.now();
  let up: HarperInstance | undefined;
  let failed: unknown;
  const boot = startHarper({ root, componentDir, logLevel: 'warn', readyTimeoutMs: 300_000 }).then(
    (x) => (up = x),
    (e) => (failed = e),
  );
  let firstGrantMs = NaN;
  const deadline = performance.now() + 60_000;
  while (measure && Number.isNaN(firstGrantMs) && performance.now() < deadline && failed === undefined) {
    const jobs = await claim(probe, probeUser.username, 1);
    if (jobs && jobs.length) {
      firstGrantMs = performance.now() - spawnAt;
      const g = jobs[0]!;
      const sent = Date.now();
      const a = await report(probe, [
        { id: g.url, leaseToken: g.token, outcome: 'rendered', statusCode: 200 },
      ]);
      noteResult(g, { sent, outcome: 'rendered', state: stateOf(a?.[0]), nextRenderTime: undefined });
      if (a?.[0]?.accepted) counts.accepted++;
      break;
    }
    await sleep(20);
  }
  await boot;
  if (failed !== undefined) throw failed;
  return { h: up!, firstGrantMs: Math.round(firstGrantMs), readyMs: Math.round(performance.now() - spawnAt) };
}

/** I5 over the grants of the process that just died; then forgets them. */
function judgeLeases() {
  const releasing = (r: ResultRecord) =>
    r.state === 'unk' ||
    r.state === 'gone' ||
    (r.state === 'acc' &&
      // An accepted failure in the fast lane keeps its lease (its row stays due): only a rescheduled
      // failure releases.
      (r.outcome === 'rendered' || (r.nextRenderTime !== undefined && r.nextRenderTime > r.sent)));
  for (const [url, gs] of epochGrants) {
    gs.sort((a, b) => a.recv - b.recv);
    for (let j = 1; j < gs.length; j++) {
      const later = gs[j]!;
      for (let i = 0; i < j; i++) {
        const earlier = gs[i]!;
        counts.leasePairsJudged++;
        if (earlier.expiresAt <= later.recv) continue;
        if (earlier.results.some((r) => releasing(r) && r.sent < later.recv)) continue;
        violation('two live leases for one key', {
          url,
          earlier: {
            token: earlier.token,
            user: earlier.user,
            recv: earlier.recv,
            expiresAt: earlier.expiresAt,
          },
          later: { token: later.token, user: later.user, sent: later.sent, recv: later.recv },
        });
      }
    }
  }
  leasedAtKill = new Set(
    [...epochGrants.values()].flatMap((gs) =>
      gs.filter((g) => !g.results.some((r) => r.state === 'acc' || r.state === 'gone')).map((g) => g.url),
    ),
  );
  epochGrants = new Map();
}

interface Row {
  cacheKey: string;
  strikes?: number;
  lastOutcome?: string | null;
  lastRenderedAt?: number | null;
}

async function readAllRows(h: HarperInstance): Promise<Map<string, Row>> {
  const rows = (await h.operation({
    operation: 'search_by_value',
    database: 'render_schedule',
    table: 'RenderSchedule',
    search_attribute: 'cacheKey',
    search_value: '*',
    get_attributes: ['cacheKey', 'strikes', 'lastOutcome', 'lastRenderedAt'],
  })) as Row[];
  return new Map(rows.map((r) => [r.cacheKey, r]));
}

/** I1–I4, I6, I8 against the table as the restarted process sees it (the load is stopped). */
async function checkRows(h: HarperInstance, restartNo: number) {
  const t0 = performance.now();
  const rows = await readAllRows(h);
  const n0 = violations.length;
  for (const key of rows.keys())
    if (!ledger.has(key)) violation('row never filed (I8)', { restartNo, url: key });
  let mustExist = 0;
  let mustBeGone = 0;
  let ackedRenders = 0;
  for (const [url, e] of ledger) {
    const row = rows.get(url);
    if (e.fileAckSent > e.delEnd) {
      mustExist++;
      if (!row)
        violation('acknowledged filing lost (I4)', {
          restartNo,
          url,
          fileAckSent: e.fileAckSent,
          delEnd: e.delEnd,
        });
    }
    if (e.delAckSent > e.fileEnd) {
      mustBeGone++;
      if (row)
        violation('deleted row reappeared (I3)', {
          restartNo,
          url,
          delAckSent: e.delAckSent,
          fileEnd: e.fileEnd,
          row,
        });
    }
    if (e.renderAckSent > e.delEnd) {
      ackedRenders++;
      if (!row || !(Number(row.lastRenderedAt) >= e.renderAckSent))
        violation('acknowledged render lost (I1)', {
          restartNo,
          url,
          renderAckSent: e.renderAckSent,
          row: row ?? null,
        });
    }
    const lowBase = Math.max(e.renderMaybeSent, e.delEnd);
    const ackedFails = new Set(e.fails.filter((f) => f.acked && f.sent > lowBase).map((f) => f.token)).size;
    if (ackedFails > 0 && (!row || row.lastOutcome !== 'failed' || Number(row.strikes) < ackedFails))
      violation('acknowledged failure lost (I1)', { restartNo, url, ackedFails, row: row ?? null });
    const highBase = Math.max(e.renderAckSent, e.delAckSent);
    e.fails = e.fails.filter((f) => f.sent > Math.min(lowBase, highBase));
    const maybeFails = new Set(e.fails.filter((f) => f.sent > highBase).map((f) => f.token)).size;
    if (row && Number(row.strikes ?? 0) > maybeFails)
      violation('failure counted twice (I2)', { restartNo, url, strikes: row.strikes, maybeFails });
  }
  // I6: the keeper, once live, holds exactly the table's rows.
  let keeperRows = NaN;
  try {
    keeperRows = await until(
      'the keeper holding every row',
      async () => {
        const r = await h.fetch('/prerender_admin/queue-state');
        if (r.status !== 200) return undefined;
        const n = Number(r.json.trust.keeper.rows);
        return n === rows.size ? n : undefined;
      },
      30_000,
      200,
    );
  } catch {
    const r = await h.fetch('/prerender_admin/queue-state');
    keeperRows = Number(r.json?.trust?.keeper?.rows);
    violation('keeper does not hold every row (I6)', { restartNo, keeperRows, tableRows: rows.size });
  }
  const present = [...rows.keys()];
  const absent = [...ledger.keys()].filter((u) => !rows.has(u));
  const sample = [
    ...Array.from({ length: Math.min(SAMPLE_EXPLAIN, present.length) }, () => [pick(present), true] as const),
    ...Array.from(
      { length: Math.min(SAMPLE_EXPLAIN / 2, absent.length) },
      () => [pick(absent), false] as const,
    ),
  ];
  for (const [url, held] of sample) {
    const r = await h.fetch('/prerender_admin/explain', { body: { url } });
    if (r.status !== 200 || (r.json.held !== null) !== held || (r.json.row !== null) !== held)
      violation('explain disagrees with the table (I6)', {
        restartNo,
        url,
        expectHeld: held,
        status: r.status,
        held: r.json?.held ?? null,
        row: r.json?.row ?? null,
      });
  }
  return {
    tableRows: rows.size,
    keeperRows,
    mustExist,
    mustBeGone,
    ackedRenders,
    newViolations: violations.length - n0,
    checkMs: Math.round(performance.now() - t0),
  };
}

/** Results the crash swallowed, sent once more by their own user: the new process never accepts them. */
async function retryUnanswered(conns: Map<string, Conn>) {
  for (const [user, list] of unanswered) {
    const c = conns.get(user)!;
    for (let i = 0; i < list.length; i += 100) {
      const part = list.slice(i, i + 100);
      const sent = Date.now();
      const a = await report(
        c,
        part.map((p) => p.result),
      );
      if (!a) continue;
      part.forEach((p, k) => {
        counts.retriedAfterRestart++;
        const ans = a[k]!;
        if (!ans.accepted && ans.code === 'superseded') counts.retriedAfterRestart409++;
        else
          violation('result of a lease of the previous process answered (I7)', {
            url: p.grant.url,
            answer: ans,
          });
        noteResult(p.grant, {
          sent,
          outcome: p.result.outcome as 'rendered' | 'failed',
          state: stateOf(ans),
          ...(ans.accepted ? { nextRenderTime: ans.nextRenderTime } : {}),
        });
      });
    }
  }
  unanswered.clear();
}

// ---- the run ----------------------------------------------------------------------------------

const info = machine();
console.log(
  JSON.stringify({
    bench: 'crash-soak',
    ...info,
    kills: KILLS,
    initialRows: INITIAL_ROWS,
    universe: UNIVERSE,
    componentDir: componentDir ?? 'this checkout',
  }),
);
const startedAt = Date.now();
let h = await startHarper({ componentDir, logLevel: 'warn' });
const root = h.root;
const perRestart: Array<Record<string, unknown>> = [];
try {
  await h.addUser(feeder.username, feeder.password, 'render_feeder');
  for (const u of [...fleetUsers, probeUser]) await h.addUser(u.username, u.password, 'render_fleet');
  const cfg = await h.fetch('/prerender_admin/config', {
    body: { queue: { jobLeaseTime: LEASE_MS, keeper: { stateInterval: 1000 } } },
  });
  if (cfg.status !== 200) throw new Error(`config: ${cfg.status} ${cfg.text}`);

  const feedConn = connection(h.url, feeder);
  const delConn = connection(h.url, feeder);
  const probe = connection(h.url, probeUser);
  const byUser = new Map(fleetUsers.map((u) => [u.username, connection(h.url, u)]));
  const fleet = fleetUsers.flatMap((u, i) =>
    Array.from({ length: CLIENTS_PER_USER }, () => ({
      user: u.username,
      conn: connection(h.url, u),
      impostor: byUser.get(fleetUsers[(i + 1) % USERS]!.username)!,
    })),
  );

  // Initial rows, half due.
  const t0 = Date.now();
  for (let i = 0; i < INITIAL_ROWS; i += 5000) {
    const batch = Array.from({ length: Math.min(5000, INITIAL_ROWS - i) }, (_, k) => {
      const url = urlOf(i + k);
      universe.push(url);
      return (i + k) % 2 === 0 ? { url, dueAt: t0 - 60_000 } : { url };
    });
    if (!(await file(feedConn, batch))) throw new Error('initial filing failed');
  }
  created = INITIAL_ROWS;
  await until('the keeper holding the initial rows', async () => {
    const r = await h.fetch('/prerender_admin/queue-state');
    return r.status === 200 && Number(r.json.trust.keeper.rows) === INITIAL_ROWS ? true : undefined;
  });

  let kills = 0;
  let bootKills = 0;
  let restarts = 0;
  while (kills < KILLS) {
    // Load for a random stretch, then the crash.
    stopLoad = false;
    const loops = [
      feederLoop(feedConn),
      deleterLoop(delConn),
      ...fleet.map((f) => fleetLoop(f.conn, f.impostor, f.user)),
    ];
    const loadMs = 300 + Math.random() * 9700;
    await sleep(loadMs);
    const loadAtKill = loadavg();
    const killedAt = Date.now();
    await h.kill();
    kills++;
    stopLoad = true;
    await Promise.all(loops);
    inFlight.clear();
    judgeLeases();
    // Sometimes crash again while the restarted process boots (no load, no probe: the keeper may
    // still be loading); the restart after that one is measured and checked.
    while (kills < KILLS && Math.random() < BOOT_KILL_SHARE) {
      const b = await restart(root, probe, false);
      restarts++;
      h = b.h;
      await sleep(Math.random() * 1500);
      const phase = await h.fetch('/prerender_admin/overview').then(
        (x) => (x.json?.keeper?.phase as string) ?? null,
        () => null,
      );
      await h.kill();
      kills++;
      bootKills++;
      judgeLeases();
      const rec = {
        restart: restarts,
        kill: kills,
        killedWhileBooting: true,
        readyMs: b.readyMs,
        keeperPhaseAtKill: phase,
      };
      perRestart.push(rec);
      console.log(JSON.stringify(rec));
    }
    const r = await restart(root, probe, true);
    restarts++;
    h = r.h;
    await retryUnanswered(byUser);
    const check = await checkRows(h, restarts);
    const rec = {
      restart: restarts,
      kill: kills,
      loadMsBeforeKill: Math.round(loadMs),
      killedAt,
      firstGrantMs: r.firstGrantMs,
      readyMs: r.readyMs,
      ...check,
      loadavg: loadAtKill,
    };
    perRestart.push(rec);
    console.log(JSON.stringify(rec));
  }
  stopLoad = true;
  const measured = perRestart.filter((p) => !p.killedWhileBooting);
  const firsts = measured.map((p) => Number(p.firstGrantMs)).filter((x) => Number.isFinite(x));
  console.log(
    JSON.stringify({
      summary: 'crash-soak',
      kills,
      bootKills,
      restarts,
      violations: violations.length,
      violationKinds: [...new Set(violations.map((v) => v.kind))],
      firstGrantMs: {
        n: firsts.length,
        median: median(firsts),
        worst: Math.max(...firsts),
        noGrant: measured.length - firsts.length,
      },
      readyMs: {
        median: median(perRestart.map((p) => Number(p.readyMs))),
        worst: Math.max(...perRestart.map((p) => Number(p.readyMs))),
      },
      urlsKnown: ledger.size,
      finalTableRows: perRestart.at(-1)?.tableRows,
      counts,
      minutes: Math.round((Date.now() - startedAt) / 6000) / 10,
      loadavgEnd: loadavg(),
    }),
  );
  await Promise.all(
    [feedConn, delConn, probe, ...byUser.values(), ...fleet.map((f) => f.conn)].map((c) => c.close()),
  );
} finally {
  await h.destroy();
}
