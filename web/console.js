// The queue-keeper operator console. It polls the admin endpoints this origin already serves (the
// browser holds the operator's basic-auth credentials for it) and redraws every panel from scratch.
//
// Charts are plain inline SVG drawn here, not by a chart library: a few bar charts do not justify a
// dependency that every operator must trust with an admin session, and one would bring a build step or
// a vendored bundle into a component that otherwise serves three static files.
//
// Honesty rule: a panel shows numbers only from the answer of the refresh that just finished. When an
// answer is missing (503 from queue-state, an error, a timeout), the panel is blanked and says why —
// never left holding the previous numbers, which would look live.

const REFRESH_MS = 3000;
// Longer than a refresh so one slow answer does not pile requests up, short enough that a hung server
// blanks the page within seconds instead of leaving old numbers up.
const REQUEST_TIMEOUT_MS = 8000;
/** Failing rows the console shows: the top of GET /prerender_admin/failing. */
const FAILING_SHOWN = 10;
/** Retired rows the console shows: the newest of GET /prerender_admin/retired. */
const RETIRED_SHOWN = 10;
const BLANK = '—';
const SVG_NS = 'http://www.w3.org/2000/svg';
const CLASS_ROWS_SHOWN = 50;
const FLOW_SERIES = [
  { key: 'cameDue', label: 'came due' },
  { key: 'added', label: 'added' },
  { key: 'triggered', label: 'moved earlier' },
  { key: 'rescheduled', label: 'rescheduled' },
  { key: 'removed', label: 'removed' },
];

const numberFormat = new Intl.NumberFormat();
// Ages are computed on the server's clock (from the Date header), so a laptop whose clock is off by
// minutes does not show a fresh publish as minutes old.
let serverOffsetMs = 0;

// ---------- small helpers ----------

function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`console.html has no element #${id}`);
  return el;
}

function fmtCount(n) {
  return typeof n === 'number' && Number.isFinite(n) ? numberFormat.format(n) : BLANK;
}

function trimZero(s) {
  return s.endsWith('.0') ? s.slice(0, -2) : s;
}

function fmtDuration(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return BLANK;
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(ms)} ms`;
  if (a < 60_000) return `${trimZero((ms / 1000).toFixed(1))} s`;
  if (a < 3_600_000) return `${trimZero((ms / 60_000).toFixed(1))} min`;
  if (a < 172_800_000) return `${trimZero((ms / 3_600_000).toFixed(1))} h`;
  return `${trimZero((ms / 86_400_000).toFixed(1))} d`;
}

function serverNow() {
  return Date.now() + serverOffsetMs;
}

function fmtAgo(at) {
  if (typeof at !== 'number' || !Number.isFinite(at)) return BLANK;
  const d = serverNow() - at;
  return d < 0 ? `in ${fmtDuration(-d)}` : `${fmtDuration(d)} ago`;
}

/** A count, or a blank that carries no data-value (the test and any scraper can tell the two apart). */
function setCount(id, n) {
  const el = byId(id);
  const ok = typeof n === 'number' && Number.isFinite(n);
  el.textContent = ok ? fmtCount(n) : BLANK;
  if (ok) el.setAttribute('data-value', String(n));
  else el.removeAttribute('data-value');
  return el;
}

function setText(id, text) {
  const el = byId(id);
  el.textContent = text === null || text === undefined || text === '' ? BLANK : String(text);
  return el;
}

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function svgText(parent, x, y, text, cls, anchor = 'middle') {
  const t = svgEl('text', { x, y, class: cls, 'text-anchor': anchor }, parent);
  t.textContent = text;
  return t;
}

function titled(el, text) {
  svgEl('title', {}, el).textContent = text;
  return el;
}

/** Bar height in pixels: a non-zero count never disappears into a zero-height bar. */
function barHeight(n, max, plotH) {
  if (!(n > 0)) return 0;
  return Math.max(1, (n / max) * plotH);
}

function markUnavailable(source, unavailable) {
  for (const panel of document.querySelectorAll(`[data-source="${source}"]`)) {
    panel.classList.toggle('unavailable', unavailable);
  }
}

// ---------- fetching ----------

function noteServerClock(res) {
  const date = Date.parse(res.headers.get('date') ?? '');
  if (Number.isFinite(date)) serverOffsetMs = date - Date.now();
}

function describeError(status, body, text) {
  if (body && typeof body.error === 'string') return body.error;
  if (text) return `HTTP ${status}: ${text.slice(0, 200)}`;
  return `HTTP ${status}`;
}

/** One admin call: never throws; `error` is a sentence when the answer is not a 2xx. */
async function call(path, method = 'GET', payload) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), REQUEST_TIMEOUT_MS);
  try {
    const headers = { accept: 'application/json' };
    if (payload !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(path, {
      method,
      headers,
      body: payload === undefined ? undefined : JSON.stringify(payload),
      credentials: 'same-origin',
      cache: 'no-store',
      signal: ctl.signal,
    });
    noteServerClock(res);
    const text = await res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = null;
    }
    return {
      status: res.status,
      ok: res.ok,
      body,
      text,
      error: res.ok ? null : describeError(res.status, body, text),
    };
  } catch (e) {
    const error =
      e && e.name === 'AbortError'
        ? `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`
        : `request failed: ${e && e.message ? e.message : String(e)}`;
    return { status: 0, ok: false, body: null, error };
  } finally {
    clearTimeout(timer);
  }
}

// ---------- charts ----------

/** A horizontal bar split into parts: [{count, cls, label}]; `total` is the full width. */
function drawSplitBar(svg, parts, total, emptyLabel) {
  const W = 480;
  const H = 30;
  svg.replaceChildren();
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svgEl('rect', { x: 0, y: 4, width: W, height: H - 8, class: 'track' }, svg);
  if (!(total > 0)) {
    svgText(svg, W / 2, H / 2 + 4, emptyLabel, 'axis');
    return;
  }
  let x = 0;
  for (const p of parts) {
    const w = (Math.min(p.count, total) / total) * W;
    const rect = svgEl(
      'rect',
      { x, y: 4, width: Math.max(0, w), height: H - 8, class: p.cls, 'data-count': p.count },
      svg,
    );
    titled(rect, `${p.label}: ${fmtCount(p.count)}`);
    x += w;
  }
}

function drawComing(svg, byHour) {
  const W = 480;
  const H = 170;
  const left = 36;
  const bottom = 20;
  const top = 14;
  const plotW = W - left - 4;
  const plotH = H - top - bottom;
  svg.replaceChildren();
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  if (!byHour) return;
  const max = Math.max(1, ...byHour);
  const slot = plotW / byHour.length;
  svgText(svg, left - 4, top + 4, fmtCount(max), 'axis', 'end');
  svgText(svg, left - 4, top + plotH, '0', 'axis', 'end');
  svgEl('line', { x1: left, y1: top + plotH, x2: W - 4, y2: top + plotH, class: 'baseline' }, svg);
  byHour.forEach((n, i) => {
    const h = barHeight(n, max, plotH);
    const rect = svgEl(
      'rect',
      {
        x: left + i * slot + 1,
        y: top + plotH - h,
        width: Math.max(1, slot - 2),
        height: h,
        class: 'bar series-coming',
        'data-testid': 'coming-bar',
        'data-hour': i,
        'data-count': n,
      },
      svg,
    );
    titled(rect, `due in ${i}–${i + 1} h: ${fmtCount(n)} rows`);
    if (i % 3 === 0) svgText(svg, left + i * slot + slot / 2, H - 5, `+${i}h`, 'axis');
  });
}

function binLabels(edges) {
  const labels = [`< ${edges[0]}`];
  for (let i = 1; i < edges.length; i++) labels.push(`${edges[i - 1]}–${edges[i]}`);
  labels.push(`≥ ${edges[edges.length - 1]}`);
  return labels;
}

function drawLateness(svg, lateness) {
  const W = 480;
  const H = 180;
  const bottom = 34;
  const top = 16;
  const plotH = H - top - bottom;
  svg.replaceChildren();
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  if (!lateness) return;
  const series = [
    { key: 'sitemap', values: lateness.sitemap },
    { key: 'discovered', values: lateness.discovered },
  ];
  const labels = binLabels(lateness.edges);
  const max = Math.max(1, ...lateness.sitemap, ...lateness.discovered);
  const group = W / labels.length;
  const barW = Math.min(34, (group - 16) / 2);
  svgEl('line', { x1: 0, y1: top + plotH, x2: W, y2: top + plotH, class: 'baseline' }, svg);
  labels.forEach((label, bin) => {
    const mid = bin * group + group / 2;
    series.forEach((s, k) => {
      const n = s.values[bin] ?? 0;
      const h = barHeight(n, max, plotH);
      const x = mid - barW + k * barW;
      const rect = svgEl(
        'rect',
        {
          x: x + 1,
          y: top + plotH - h,
          width: barW - 2,
          height: h,
          class: `bar series-${s.key}${bin >= 3 ? ' late' : ''}`,
          'data-testid': 'lateness-bar',
          'data-series': s.key,
          'data-bin': bin,
          'data-count': n,
        },
        svg,
      );
      titled(rect, `${s.key}, ${label} cadences late: ${fmtCount(n)} rows`);
      if (n > 0) svgText(svg, x + barW / 2, top + plotH - h - 3, fmtCount(n), 'value');
    });
    svgText(svg, mid, H - 18, label, 'axis');
  });
  svgText(svg, W / 2, H - 3, 'cadences late', 'axis');
}

function drawFlow(container, flow) {
  container.replaceChildren();
  if (!flow) return;
  for (const s of FLOW_SERIES) {
    const values = flow.map((m) => m[s.key] ?? 0);
    const total = values.reduce((a, b) => a + b, 0);
    const row = document.createElement('div');
    row.className = 'flow-row';
    const label = document.createElement('span');
    label.className = 'flow-label';
    label.textContent = s.label;
    const W = 300;
    const H = 32;
    const svg = svgEl('svg', {
      viewBox: `0 0 ${W} ${H}`,
      class: 'chart flow-chart',
      role: 'img',
      'aria-label': `${s.label} per minute`,
    });
    const max = Math.max(1, ...values);
    const slot = W / Math.max(1, values.length);
    svgEl('line', { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: 'baseline' }, svg);
    values.forEach((n, i) => {
      const h = barHeight(n, max, H - 2);
      const rect = svgEl(
        'rect',
        {
          x: i * slot,
          y: H - h,
          width: Math.max(1, slot - 1),
          height: h,
          class: `bar series-${s.key}`,
          'data-testid': 'flow-bar',
          'data-series': s.key,
          'data-minute': flow[i].minute,
          'data-count': n,
        },
        svg,
      );
      titled(rect, `${s.label}, ${values.length - 1 - i} min ago: ${fmtCount(n)}`);
    });
    const sum = document.createElement('span');
    sum.className = 'flow-total';
    sum.setAttribute('data-testid', `flow-total-${s.key}`);
    sum.setAttribute('data-value', String(total));
    sum.textContent = fmtCount(total);
    row.append(label, svg, sum);
    container.appendChild(row);
  }
}

// ---------- tables ----------

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text === null || text === undefined || text === '' ? BLANK : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fillTable(id, rows, columns, emptyText) {
  const table = byId(id);
  const tbody = table.tBodies[0];
  tbody.replaceChildren();
  if (rows === null) return;
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const td = cell(tr, emptyText, 'muted');
    td.colSpan = columns;
    tbody.appendChild(tr);
    return;
  }
  for (const r of rows) tbody.appendChild(r);
}

function latenessClass(cadences) {
  if (typeof cadences !== 'number') return 'num';
  if (cadences >= 2) return 'num bad';
  if (cadences >= 1) return 'num warn';
  return 'num';
}

function renderClasses(lateness) {
  const note = byId('classes-note');
  if (!lateness) {
    note.textContent = '';
    fillTable('classes-table', null, 7, '');
    return;
  }
  const all = lateness.classes;
  const shown = all.slice(0, CLASS_ROWS_SHOWN);
  const parts = [];
  if (all.length > shown.length) parts.push(`showing the worst ${shown.length} of ${all.length} classes`);
  if (lateness.listsTruncated) parts.push('the server keeps only the worst 200 classes');
  note.textContent = parts.join('; ');
  const rows = shown.map((c) => {
    const tr = document.createElement('tr');
    tr.setAttribute('data-testid', 'class-row');
    cell(tr, c.route);
    cell(tr, c.cadenceMs > 0 ? `every ${fmtDuration(c.cadenceMs)}` : 'none');
    cell(tr, c.fromSitemap ? 'sitemap' : 'discovered');
    cell(tr, fmtCount(c.rows), 'num');
    cell(tr, fmtCount(c.due), 'num');
    cell(tr, c.oldestDueAt === null ? BLANK : fmtAgo(c.oldestDueAt), 'num');
    const late = c.oldestLatenessCadences;
    cell(
      tr,
      late === null ? BLANK : c.cadenceMs > 0 ? late.toFixed(2) : fmtDuration(late),
      latenessClass(c.cadenceMs > 0 ? late : null),
    );
    return tr;
  });
  fillTable('classes-table', rows, 7, 'no classes: the keeper holds no rows');
}

// ---------- panels ----------

function renderState(r) {
  const live = r.ok && r.body && r.body.now ? r.body : null;
  markUnavailable('state', !live);
  const banner = byId('state-banner');
  banner.hidden = Boolean(live);
  if (!live) {
    const phase =
      r.body && r.body.trust && r.body.trust.phase
        ? r.body.trust.phase
        : r.status === 0
          ? 'unreachable'
          : `HTTP ${r.status}`;
    setText('state-phase', phase);
    setText('state-error', r.error);
  }
  const now = live ? live.now : null;
  for (const [id, key] of [
    ['due', 'due'],
    ['in-flight', 'inFlight'],
    ['unclaimed', 'unclaimed'],
    ['due-sitemap', 'dueSitemap'],
    ['due-discovered', 'dueDiscovered'],
    ['due-urgent', 'dueUrgent'],
  ]) {
    setCount(id, now ? now[key] : null);
  }
  const byState = now && now.rowsByState ? now.rowsByState : null;
  setCount('rows-suppressed', byState ? byState.suppressed : null);
  setCount('rows-gone', byState ? byState.gone : null);
  byId('unclaimed').classList.toggle('warn', Boolean(now && now.unclaimed > 0));
  const inFlightPart = now ? Math.min(now.inFlight, now.due) : 0;
  const split = byId('due-split');
  if (now) {
    drawSplitBar(
      split,
      [
        { count: inFlightPart, cls: 'part-inflight', label: 'in flight' },
        { count: now.unclaimed, cls: 'part-unclaimed', label: 'unclaimed' },
      ],
      now.due,
      'nothing due',
    );
  } else split.replaceChildren();

  const coming = live ? live.coming : null;
  setCount('next15m', coming ? coming.next15m : null);
  setCount('next60m', coming ? coming.next60m : null);
  setCount('next24h', coming ? coming.next24h : null);
  drawComing(byId('coming-chart'), coming ? coming.byHour : null);
  drawLateness(byId('lateness-chart'), live ? live.lateness : null);
  drawFlow(byId('flow-charts'), live ? live.flow : null);
  renderClasses(live ? live.lateness : null);
  renderTrust(live, r);
}

function renderTrust(live, r) {
  const trust = live ? live.trust : r.body && r.body.trust ? r.body.trust : null;
  const exact = byId('trust-exact');
  exact.textContent = trust ? (trust.exact ? 'yes' : 'no') : BLANK;
  exact.className = `mid ${trust && trust.exact ? 'good' : 'bad'}`;
  setText('trust-phase', trust ? trust.phase : null);
  const k = live ? live.trust.keeper : null;
  setText(
    'trust-state-age',
    live ? `${fmtDuration(live.trust.stateAgeMs)} ago (limit ${fmtDuration(live.trust.maxAgeMs)})` : null,
  );
  setText('trust-rows', k ? `${fmtCount(k.rows)} rows in ${fmtCount(k.classes)} classes` : null);
  setText(
    'trust-load',
    k && k.load
      ? `${fmtCount(k.load.rows)} rows in ${fmtDuration(k.load.ms)}${k.load.partial ? ' (partial)' : ''}`
      : null,
  );
  const p = k ? k.lastPublish : null;
  setText(
    'trust-publish',
    p
      ? `${fmtAgo(p.at)}: ${fmtCount(p.published)} published, ${fmtCount(p.skippedLeased)} skipped as leased, ${fmtDuration(p.ms)}`
      : null,
  );
  const v = k ? k.lastVerify : null;
  setText(
    'trust-verify',
    v
      ? `${fmtAgo(v.at)}: ${fmtCount(v.rows)} rows in the table, repaired ${fmtCount(v.repaired)} in ${fmtDuration(v.ms)}`
      : k
        ? 'not yet'
        : null,
  );
  const repaired = setCount('trust-repaired', k ? k.repairedTotal : null);
  repaired.classList.toggle('warn', Boolean(k && k.repairedTotal > 0));
  setText('trust-error', k ? (k.lastError ?? 'none') : null);
  setText('trust-devices', live && live.devices ? devicesText(live.devices) : null);
}

/** The devices line: the configured devices, the orphaned rows, and a device duty while one runs. */
function devicesText(d) {
  const parts = [d.configured.join(', ')];
  if (d.orphanedRows) parts.push(`${fmtCount(d.orphanedRows)} orphaned rows`);
  for (const duty of d.duties) {
    if (duty.phase === 'done' || duty.phase === 'cancelled') continue;
    parts.push(`${duty.kind} ${duty.device ?? ''}: ${duty.phase}, ${fmtCount(duty.rows)} rows so far`);
  }
  return parts.join('; ');
}

function renderStatus(overview, state) {
  // The overview is the node's own view; the 503 body of queue-state carries the same two fields, so the
  // status stays visible while the keeper is loading.
  const src =
    overview.ok && overview.body ? overview.body : state.body && state.body.now ? state.body.now : null;
  const status = src && typeof src.status === 'string' ? src.status : null;
  const el = setText('node-status', status);
  el.className = `status status-${status ?? 'unknown'}`;
  byId('node-paused').textContent = src && src.paused ? 'operator pause in force' : '';
  setText('node-name', overview.ok && overview.body ? overview.body.node : null);
}

function renderOverview(r) {
  const o = r.ok && r.body ? r.body : null;
  markUnavailable('overview', !o);
  const leases = o ? o.leases : null;
  setCount('lease-occupancy', leases ? leases.occupancy : null);
  setCount('lease-max', leases ? leases.maxLeases : null);
  const chart = byId('lease-chart');
  if (leases) {
    drawSplitBar(
      chart,
      [{ count: leases.occupancy, cls: 'part-inflight', label: 'leases held' }],
      leases.maxLeases,
      'no lease slots',
    );
  } else chart.replaceChildren();
  setText(
    'lease-oldest-age',
    leases && leases.oldestLeaseAgeMs !== null
      ? fmtDuration(leases.oldestLeaseAgeMs)
      : leases
        ? 'none held'
        : null,
  );
  setText(
    'lease-oldest-expiry',
    leases && leases.oldestLeaseExpiresAt !== null
      ? fmtAgo(leases.oldestLeaseExpiresAt)
      : leases
        ? 'none held'
        : null,
  );
  const ready = o ? o.ready : null;
  setText('ready-set', ready ? `${fmtCount(ready.remaining)} / ${fmtCount(ready.count)}` : null);
  setText('ready-age', ready ? (ready.ageMs === null ? 'never' : `${fmtDuration(ready.ageMs)} ago`) : null);
}

function renderNotify(fleets, hooks, stall) {
  const fleetList = fleets.ok && Array.isArray(fleets.body) ? fleets.body : null;
  const names = new Map((fleetList ?? []).map((f) => [f.id, f.name]));
  const fleetName = (id) => names.get(id) ?? id;

  markUnavailable('fleets', !fleetList);
  byId('fleets-note').textContent = fleetList ? '' : `unavailable: ${fleets.error}`;
  fillTable(
    'fleets-table',
    fleetList
      ? fleetList.map((f) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', 'fleet-row');
          cell(tr, f.name);
          cell(tr, f.state, f.state === 'active' ? 'good' : 'bad');
          cell(tr, f.queues.length ? f.queues.join(', ') : 'all queues');
          cell(tr, f.username);
          cell(tr, f.id, 'mono');
          return tr;
        })
      : null,
    5,
    'no fleets registered',
  );

  const hookList = hooks.ok && Array.isArray(hooks.body) ? hooks.body : null;
  markUnavailable('hooks', !hookList);
  byId('hooks-note').textContent = hookList ? '' : `unavailable: ${hooks.error}`;
  fillTable(
    'hooks-table',
    hookList
      ? hookList.map((h) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', 'hook-row');
          cell(tr, fleetName(h.fleetId));
          cell(tr, h.url, 'mono');
          cell(tr, h.queues.length ? h.queues.join(', ') : "the fleet's queues");
          const health = h.enabled
            ? 'enabled'
            : `disabled${h.disabledReason ? ` (${h.disabledReason})` : ''}`;
          const td = cell(tr, health, h.enabled ? 'good' : 'bad');
          td.setAttribute('data-testid', 'hook-health');
          if (h.lastError) {
            const err = document.createElement('div');
            err.className = 'muted small';
            err.textContent = h.lastError;
            td.appendChild(err);
          }
          if (h.secretOpens === false) {
            // The sealing key changed: nothing is sent to this hook until it is rotated.
            const sealed = document.createElement('div');
            sealed.className = 'bad small';
            sealed.setAttribute('data-testid', 'hook-secret-sealed');
            sealed.textContent = 'secret does not open under QUEUE_KEEPER_SECRET_KEY: rotate to resume';
            td.appendChild(sealed);
          }
          cell(tr, fmtCount(h.consecutiveFailures), h.consecutiveFailures > 0 ? 'num warn' : 'num');
          cell(tr, h.lastStatus, 'num');
          cell(tr, h.lastAttemptAt === null ? 'never' : fmtAgo(h.lastAttemptAt));
          return tr;
        })
      : null,
    7,
    'no notify hooks',
  );

  const ledger = stall.ok && Array.isArray(stall.body) ? stall.body : null;
  markUnavailable('stall', !ledger);
  byId('stall-note').textContent = ledger
    ? 'Queues the stall sweep has woken because nobody claimed from them; empty is healthy.'
    : `unavailable: ${stall.error}`;
  fillTable(
    'stall-table',
    ledger
      ? ledger.map((s) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', 'stall-row');
          cell(tr, fleetName(s.fleetId));
          cell(tr, s.queue);
          cell(tr, fmtCount(s.nudges), s.nudges > 1 ? 'num warn' : 'num');
          cell(tr, fmtAgo(s.lastNudgedAt));
          return tr;
        })
      : null,
    4,
    'no stalled queues',
  );
}

/**
 * One listed panel (failing, retired): its note, and a table of the list's first page, one row per entry
 * drawn by `row` (the cells after the row's test id), or the panel marked unavailable.
 */
function renderListPanel(name, answer, notes, columns, row) {
  const rows = answer.ok && answer.body && Array.isArray(answer.body.rows) ? answer.body.rows : null;
  markUnavailable(name, !rows);
  byId(`${name}-note`).textContent = rows
    ? answer.body.next
      ? notes.more
      : notes.all
    : `unavailable: ${answer.error}`;
  fillTable(
    `${name}-table`,
    rows
      ? rows.map((r) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', `${name}-row`);
          row(tr, r);
          return tr;
        })
      : null,
    columns,
    `no ${name} rows`,
  );
}

/** The top of the failing list: the rows whose last result failed, most strikes first. */
function renderFailing(failing) {
  renderListPanel(
    'failing',
    failing,
    {
      more: `The ${FAILING_SHOWN} worst; GET /prerender_admin/failing pages through the rest.`,
      all: 'Rows whose last render failed; empty is healthy.',
    },
    8,
    (tr, r) => {
      cell(tr, r.url, 'mono');
      cell(tr, r.deviceType ?? '');
      cell(tr, r.queue);
      cell(tr, fmtCount(r.strikes), r.strikes > 1 ? 'num warn' : 'num');
      cell(tr, r.lastStatusCode, 'num');
      const err = r.lastError ? [r.lastError.name, r.lastError.message].filter(Boolean).join(': ') : '';
      cell(tr, err);
      cell(tr, fmtAgo(r.failingSince));
      cell(tr, fmtAgo(r.nextRenderTime));
    },
  );
}

/** The newest of the retired list: rows a render verdict retired (a permanent redirect, noindex or gone too often). */
function renderRetired(retired) {
  renderListPanel(
    'retired',
    retired,
    {
      more: `The ${RETIRED_SHOWN} newest; GET /prerender_admin/retired pages through the rest.`,
      all: 'Rows a render verdict retired within render.retiredRetention.',
    },
    6,
    (tr, r) => {
      cell(tr, r.url, 'mono');
      cell(tr, r.deviceType);
      cell(tr, r.queue);
      cell(tr, r.reason, r.reason === 'redirect' ? '' : 'warn');
      cell(tr, r.lastStatusCode, 'num');
      cell(tr, fmtAgo(r.retiredAt));
    },
  );
}

/** The registered sitemaps from queue-state (docs/sitemaps.md): each one's state and last walk. */
function renderSitemaps(state) {
  const sm = state.ok && state.body && state.body.sitemaps ? state.body.sitemaps : null;
  byId('sitemaps-note').textContent = sm
    ? sm.failed > 0
      ? `${fmtCount(sm.failed)} of ${fmtCount(sm.total)} failed their last walk; GET /render_queue/sitemaps/<id> has the figures.`
      : `${fmtCount(sm.total)} registered, ${fmtCount(sm.walking)} walking.`
    : 'unavailable with queue-state';
  fillTable(
    'sitemaps-table',
    sm
      ? sm.sitemaps.map((s) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', 'sitemap-row');
          cell(tr, s.url, 'mono');
          cell(tr, s.state, s.state === 'failed' ? 'warn' : '');
          cell(tr, fmtCount(s.urlCount), 'num');
          cell(tr, s.lastWalkAt === null ? '—' : fmtAgo(s.lastWalkAt));
          cell(tr, s.reason ?? '');
          return tr;
        })
      : null,
    5,
    'no sitemaps registered',
  );
}

// ---------- serving (/p/) ----------

/** queue_keeper_served_total by result, from the Prometheus text of GET /prerender_admin/metrics. */
function servedCounts(text) {
  const counts = {};
  const re = /^queue_keeper_served_total\{result="([a-z_]+)"\} ([0-9.e+]+)$/gm;
  let m;
  while ((m = re.exec(text)) !== null) counts[m[1]] = Number(m[2]);
  return counts;
}

/**
 * The hit ratio: answers made from stored pages (hit, stale, 304, rendered) over every answer that
 * asked for a page (those, origin fetches and 404s); errors (400, 502, 503, 508) are left out.
 */
function hitRatio(c) {
  const stored = (c.hit ?? 0) + (c.stale ?? 0) + (c.not_modified ?? 0) + (c.rendered ?? 0);
  const all = stored + (c.origin ?? 0) + (c.not_found ?? 0);
  return all > 0 ? stored / all : null;
}

function renderServing(r) {
  const c = r.ok && typeof r.text === 'string' ? servedCounts(r.text) : null;
  markUnavailable('metrics', !c);
  const ratio = c ? hitRatio(c) : null;
  setText('serve-hit-ratio', ratio === null ? null : `${(ratio * 100).toFixed(1)} %`);
  setText(
    'serve-counts',
    c
      ? `${fmtCount(c.hit ?? 0)} hit, ${fmtCount(c.stale ?? 0)} stale, ${fmtCount(c.not_modified ?? 0)} not modified, ${fmtCount(c.rendered ?? 0)} rendered`
      : null,
  );
  setText(
    'serve-misses',
    c ? `${fmtCount(c.origin ?? 0)} from origin, ${fmtCount(c.not_found ?? 0)} not found` : null,
  );
  setText('serve-errors', c ? fmtCount(c.error ?? 0) : null);
}

// ---------- refresh loop ----------

async function refresh() {
  const [state, overview, fleets, hooks, stall, failing, retired, metrics] = await Promise.all([
    call('/prerender_admin/queue-state'),
    call('/prerender_admin/overview'),
    call('/prerender_admin/fleets'),
    call('/prerender_admin/hooks'),
    call('/prerender_admin/stall-ledger'),
    call(`/prerender_admin/failing?limit=${FAILING_SHOWN}`),
    call(`/prerender_admin/retired?limit=${RETIRED_SHOWN}`),
    call('/prerender_admin/metrics'),
  ]);
  renderServing(metrics);
  renderStatus(overview, state);
  renderState(state);
  renderOverview(overview);
  renderNotify(fleets, hooks, stall);
  renderFailing(failing);
  renderRetired(retired);
  renderSitemaps(state);
  byId('fetch-error').textContent = overview.ok ? '' : `overview: ${overview.error}`;
  const updated = byId('updated-at');
  updated.textContent = new Date().toLocaleTimeString();
  updated.setAttribute('data-at', String(Date.now()));
}

let timer = null;
let running = false;
let again = false;

/** Runs one refresh now (or right after the one running) and schedules the next. */
async function tick() {
  if (running) {
    again = true;
    return;
  }
  running = true;
  clearTimeout(timer);
  try {
    do {
      again = false;
      if (document.hidden) break;
      try {
        await refresh();
      } catch (e) {
        // A drawing bug must be visible, not leave half-updated panels looking fine.
        byId('fetch-error').textContent = `the console failed to draw: ${e && e.message ? e.message : e}`;
        console.error(e);
      }
    } while (again);
  } finally {
    running = false;
    timer = setTimeout(tick, REFRESH_MS);
  }
}

async function setPaused(paused) {
  const buttons = [byId('pause-button'), byId('resume-button')];
  for (const b of buttons) b.disabled = true;
  const msg = byId('action-message');
  msg.textContent = paused ? 'pausing…' : 'resuming…';
  const r = await call(paused ? '/prerender_admin/pause' : '/prerender_admin/resume', 'POST', {
    scope: 'all',
  });
  const at = new Date().toLocaleTimeString();
  msg.textContent = r.ok
    ? `${paused ? 'paused' : 'resumed'} all nodes at ${at}`
    : `${paused ? 'pause' : 'resume'} failed: ${r.error}`;
  for (const b of buttons) b.disabled = false;
  await tick();
}

// ---------- rows one by one ----------

/** The rows view's search: its query, and the cursor of the page shown (null: the first). */
const rowsView = { query: null, cursor: null, next: null };

function leaseText(lease) {
  if (!lease) return '';
  const who = lease.holder
    ? ` by ${lease.holder.user}${lease.holder.workerId ? ` (${lease.holder.workerId})` : ''}`
    : '';
  return `${lease.state}${who}, ends ${fmtAgo(lease.expiresAt)}`;
}

/** Lists a page of rows (GET /prerender_admin/rows); refreshed only when asked, so a selection stays. */
async function loadRows(cursor) {
  const q = new URLSearchParams(rowsView.query);
  if (cursor) q.set('cursor', cursor);
  const r = await call(`/prerender_admin/rows?${q}`);
  const rows = r.ok && r.body && Array.isArray(r.body.rows) ? r.body.rows : null;
  markUnavailable('rows', !rows);
  rowsView.cursor = cursor;
  rowsView.next = rows ? r.body.next : null;
  byId('rows-next').disabled = !rowsView.next;
  byId('rows-first').disabled = !cursor;
  byId('rows-all').checked = false;
  byId('rows-note').textContent = rows
    ? `${rows.length} row(s)${rowsView.next ? '; more on the next page' : ''}.`
    : `unavailable: ${r.error}`;
  fillTable(
    'rows-table',
    rows
      ? rows.map((row) => {
          const tr = document.createElement('tr');
          tr.setAttribute('data-testid', 'rows-row');
          tr.setAttribute('data-key', row.key);
          const pick = document.createElement('input');
          pick.type = 'checkbox';
          pick.value = row.key;
          pick.setAttribute('aria-label', `select ${row.key}`);
          pick.setAttribute('data-testid', 'rows-pick');
          const td = document.createElement('td');
          td.appendChild(pick);
          tr.appendChild(td);
          cell(tr, row.url, 'mono');
          cell(tr, row.deviceType ?? '');
          cell(tr, row.queue);
          cell(tr, row.state, row.state === 'leased' ? 'warn' : '');
          cell(tr, fmtAgo(row.nextRenderTime));
          cell(tr, fmtCount(row.strikes), row.strikes > 0 ? 'num warn' : 'num');
          cell(tr, leaseText(row.lease)).setAttribute('data-testid', 'rows-lease');
          return tr;
        })
      : null,
    8,
    'no rows here',
  );
}

function searchRows() {
  const query = { state: byId('rows-state').value };
  const queue = byId('rows-queue').value.trim();
  const prefix = byId('rows-prefix').value.trim();
  if (queue) query.queue = queue;
  if (prefix) query.prefix = prefix;
  rowsView.query = query;
  void loadRows(null);
}

/** One action on the checked rows (by row key); the page is listed again after it. */
async function rowsAction(label, path, method, answerKey) {
  const keys = [...document.querySelectorAll('[data-testid="rows-pick"]:checked')].map((b) => b.value);
  const msg = byId('rows-message');
  if (keys.length === 0) {
    msg.textContent = 'select rows first';
    return;
  }
  msg.textContent = `${label}…`;
  const r = await call(path, method, { urls: keys });
  msg.textContent = r.ok
    ? `${label}: ${r.body[answerKey]} of ${keys.length} at ${new Date().toLocaleTimeString()}`
    : `${label} failed: ${r.error}`;
  if (rowsView.query) await loadRows(rowsView.cursor);
}

byId('rows-form').addEventListener('submit', (e) => {
  e.preventDefault();
  searchRows();
});
byId('rows-next').addEventListener('click', () => void loadRows(rowsView.next));
byId('rows-first').addEventListener('click', () => void loadRows(null));
byId('rows-all').addEventListener('change', (e) => {
  for (const b of document.querySelectorAll('[data-testid="rows-pick"]')) b.checked = e.target.checked;
});
byId('rows-render-now').addEventListener(
  'click',
  () => void rowsAction('render now', '/prerender_admin/rows/render-now', 'POST', 'rows'),
);
byId('rows-release').addEventListener(
  'click',
  () => void rowsAction('release', '/prerender_admin/rows/release', 'POST', 'released'),
);
byId('rows-delete').addEventListener('click', () => {
  if (window.confirm('Delete the selected rows and their pages?'))
    void rowsAction('delete', '/prerender_admin/rows', 'DELETE', 'deleted');
});

byId('pause-button').addEventListener('click', () => void setPaused(true));
byId('resume-button').addEventListener('click', () => void setPaused(false));
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) void tick();
});
void tick();
