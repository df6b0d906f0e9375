// Which stored copy answers a request's `Accept-Encoding`: brotli, then gzip, then the page as stored.
// A coding with q=0 is refused; `*` stands for any coding not named. Pure.

export type Coding = 'br' | 'gzip' | 'identity';

function weights(header: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    let q = 1;
    for (const p of params) {
      const [k, val] = p.trim().split('=');
      if (k === 'q') q = Number(val);
    }
    out.set(name.trim(), Number.isFinite(q) ? q : 0);
  }
  return out;
}

export function chooseCoding(
  acceptEncoding: string | null | undefined,
  available: { br: boolean; gzip: boolean },
): Coding {
  if (!acceptEncoding) return 'identity';
  const w = weights(acceptEncoding);
  const accepts = (c: string) => (w.get(c) ?? w.get('*') ?? 0) > 0;
  if (available.br && accepts('br')) return 'br';
  if (available.gzip && (accepts('gzip') || accepts('x-gzip'))) return 'gzip';
  return 'identity';
}
