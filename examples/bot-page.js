// A host app's resource that answers a bot with the page queue-keeper stored for a URL:
// GET /prerendered?url=https://example.com/a[&device=mobile] gives the rendered page of that device
// (desktop by default) with its stored status code and content type, or 404 when none is stored. Pages
// are keyed `<url>|<device>`, one per device in render.deviceTypes. Copy it into your app's resources and send your bot traffic
// to it (for example from the middleware that recognises crawler user agents).
// test/integration/pages.test.ts loads this very file next to queue-keeper and requests it.
import { Resource, databases } from 'harperdb';

export class prerendered extends Resource {
  static loadAsInstance = false; // no automatic auth: bots carry no credentials

  async get(target) {
    const url = target.get('url');
    const device = target.get('device') ?? 'desktop';
    const page = url ? await databases.render_queue.RenderedPage.get(`${url}|${device}`) : undefined;
    if (!page?.body) return undefined;
    // A Blob, streamed from its file; a body stored as a plain string is answered as it is.
    const body = typeof page.body === 'string' ? page.body : page.body.stream();
    return new Response(body, {
      status: page.statusCode ?? 200,
      headers: { 'content-type': page.contentType ?? 'text/html; charset=utf-8' },
    });
  }
}
