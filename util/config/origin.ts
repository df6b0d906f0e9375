// `render.callbackOrigin`, the origin a prerender fleet reaches this node at (docs/prerender-fleet.md),
// in the one form it is stored and compared in. The configuration checks it here; the origin a node
// derives when it is unset is util/prerender/origin.ts's.

/** `render.callbackOrigin` as stored: `scheme://host[:port]`, http or https, no path; throws naming why. */
export function normaliseOrigin(value: string): string {
  const trimmed = value.endsWith('/') ? value.slice(0, -1) : value;
  let url: URL;
  try {
    url = new URL(trimmed);
  } catch {
    throw new Error('must be an origin such as https://render-1.example.com:9926');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('must use http or https');
  if (url.username !== '' || url.password !== '') throw new Error('must not carry credentials');
  // URL reads "https://a" with the path "/": anything more is a path the fleet would drop.
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '')
    throw new Error('must be an origin only (scheme://host[:port]), with no path, query or fragment');
  const origin = `${url.protocol}//${url.host}`;
  return origin;
}
