// A loopback site whose pages build their content with JavaScript, for the tests that render with real
// headless Chromium: a page's text exists only after its script fetched /data/<n>, answered 200 ms late
// so the network is still busy after `load`.
import type http from 'node:http';

/** The text /data/<n> answers and the page appends as <p id="built">. */
export const builtText = (n: string): string => `built ${n}: héllo — 日本語 🎉`;

/** The page /js/<n>: an <h1>, then a script that fetches /data/<n> and appends it as <p id="built">. */
export function jsPage(n: string): string {
  return `<!doctype html><html><head><title>js ${n}</title></head><body><h1>page ${n}</h1>
<script>
fetch('/data/${n}').then((r) => r.json()).then((d) => {
  const p = document.createElement('p');
  p.id = 'built';
  p.textContent = d.text;
  document.body.append(p);
});
</script></body></html>`;
}

/**
 * Answers /data/<n> (counted in `hits`) and /js/<n> (with `pageHeaders`); false for any other path, which
 * the caller answers.
 */
export function serveJsSite(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  hits: Map<string, number>,
  pageHeaders: Record<string, string> = { 'content-type': 'text/html; charset=utf-8' },
): boolean {
  const path = req.url ?? '/';
  const data = /^\/data\/([\w-]+)$/.exec(path);
  if (data) {
    hits.set(data[1]!, (hits.get(data[1]!) ?? 0) + 1);
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify({ text: builtText(data[1]!) }));
    }, 200);
    return true;
  }
  const page = /^\/js\/([\w-]+)$/.exec(path);
  if (page) {
    res.writeHead(200, pageHeaders);
    res.end(jsPage(page[1]!));
    return true;
  }
  return false;
}
