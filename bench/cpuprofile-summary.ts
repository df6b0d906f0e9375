// Reads a V8 .cpuprofile and says where the time went: share by area (our code, Harper, LMDB/msgpackr,
// Node internals, GC, idle), the top functions by self time, and the top functions by inclusive time
// (the share of samples with the function anywhere on the stack).
// Run: node dist/bench/cpuprofile-summary.js <file.cpuprofile> [top=25]
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function area(url: string, name: string): string {
  if (name === '(idle)' || name === '(program)') return 'idle/program';
  if (name === '(garbage collector)') return 'gc';
  if (/\/dist\/(services|util|resources)/.test(url)) return 'queue-keeper';
  if (/lmdb|msgpackr/.test(url)) return 'lmdb+msgpackr';
  if (/harperdb\//.test(url)) return 'harper';
  if (/node_modules\//.test(url)) return 'other packages';
  if (url.startsWith('node:') || url === '') return 'node+native';
  return 'other';
}

function label(n: ProfileNode): string {
  const f = n.callFrame;
  const file = f.url.replace(/^.*\/(node_modules|dist)\//, '$1/');
  return `${f.functionName || '(anonymous)'} ${file}:${f.lineNumber + 1}`;
}

export function summarizeProfile(p: Profile, top = 25) {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const incl = new Map<string, number>();
  const areas = new Map<string, number>();
  let total = 0;
  let busy = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const dt = p.timeDeltas[i] ?? 0;
    const leaf = byId.get(p.samples[i]!)!;
    total += dt;
    const a = area(leaf.callFrame.url, leaf.callFrame.functionName);
    areas.set(a, (areas.get(a) ?? 0) + dt);
    if (a === 'idle/program') continue;
    busy += dt;
    self.set(label(leaf), (self.get(label(leaf)) ?? 0) + dt);
    const onStack = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const n = byId.get(id)!;
      if (n.callFrame.functionName === '(root)') break;
      onStack.add(label(n));
    }
    for (const l of onStack) incl.set(l, (incl.get(l) ?? 0) + dt);
  }
  const pct = (x: number, of: number) => Math.round((1000 * x) / of) / 10;
  const topOf = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `${pct(v, busy).toFixed(1).padStart(5)}%  ${k}`);
  return {
    totalMs: Math.round(total / 1000),
    busyMs: Math.round(busy / 1000),
    areasPctOfBusy: Object.fromEntries(
      [...areas]
        .filter(([k]) => k !== 'idle/program')
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => [k, pct(v, busy)]),
    ),
    selfTop: topOf(self),
    inclusiveTop: topOf(incl),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: cpuprofile-summary <file.cpuprofile> [top]');
  const s = summarizeProfile(
    JSON.parse(readFileSync(file, 'utf8')) as Profile,
    Number(process.argv[3] ?? 25),
  );
  console.log(`${file}: ${s.busyMs} ms busy of ${s.totalMs} ms`);
  console.log('areas (% of busy):', JSON.stringify(s.areasPctOfBusy));
  console.log('self:\n' + s.selfTop.join('\n'));
  console.log('inclusive:\n' + s.inclusiveTop.join('\n'));
}
