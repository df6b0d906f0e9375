// The renderer that needs no browser: fetch the page with undici and hand back its HTML as served.
// Pages that build their content with JavaScript come back as their server HTML; the Chromium renderer
// (renderers/chromium.ts) runs the scripts.
import { request } from 'undici';
import { deviceProfiles, type DeviceProfileOverride } from '../deviceProfiles.js';
import type { RenderFn, RenderResult } from '../types.js';

export interface FetchRendererOptions {
  /** Give up on one page after this; default 30 s (the lease margin aborts sooner when needed). */
  timeoutMs?: number;
  /** Pages larger than this are `failed`; default 5 MiB (the server's render.maxBodyBytes). */
  maxBytes?: number;
  /** Every device's user agent, sent as given (see deviceProfiles.ts for the order of precedence). */
  userAgent?: string;
  /** Changes to the device profiles, or new devices, by device name (see deviceProfiles.ts). */
  devices?: Readonly<Record<string, DeviceProfileOverride>>;
}

/**
 * 2xx and 4xx with an HTML (or XHTML) body are `rendered` with the origin's status; 3xx is
 * `redirected` (never followed: the target is a page of its own); a non-HTML body is `non-indexable`;
 * 5xx, a timeout or a network error is `failed`, so the queue retries it. Each request carries the
 * user agent of the job's device profile, the only part of a device a server without scripts sees.
 */
export function fetchRenderer(opts: FetchRendererOptions = {}): RenderFn {
  const maxBytes = opts.maxBytes ?? 5 << 20;
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const profileOf = deviceProfiles({ devices: opts.devices, userAgent: opts.userAgent });
  return async (job, signal): Promise<RenderResult> => {
    const r = await request(job.url, {
      method: 'GET',
      signal,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      headers: {
        'user-agent': profileOf(job.deviceType).userAgent,
        accept: 'text/html,application/xhtml+xml;q=0.9,*/*;q=0.1',
      },
    });
    const contentType = headerOf(r.headers['content-type']);
    if (r.statusCode >= 300 && r.statusCode < 400) {
      await r.body.dump();
      return { outcome: 'redirected', statusCode: r.statusCode, contentType };
    }
    if (r.statusCode >= 500) {
      await r.body.dump();
      return {
        outcome: 'failed',
        statusCode: r.statusCode,
        error: { name: 'OriginError', message: `the origin answered ${r.statusCode}` },
      };
    }
    if (contentType && !/^\s*(text\/html|application\/xhtml\+xml)\b/i.test(contentType)) {
      await r.body.dump();
      return { outcome: 'non-indexable', statusCode: r.statusCode, contentType };
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of r.body) {
      size += (c as Buffer).length;
      if (size > maxBytes) {
        r.body.destroy();
        return {
          outcome: 'failed',
          statusCode: r.statusCode,
          error: { name: 'PageTooLarge', message: `the page is larger than ${maxBytes} bytes` },
        };
      }
      chunks.push(c as Buffer);
    }
    return {
      outcome: 'rendered',
      statusCode: r.statusCode,
      contentType: contentType ?? 'text/html',
      body: Buffer.concat(chunks).toString('utf8'),
    };
  };
}

function headerOf(v: string | string[] | undefined): string | null {
  return typeof v === 'string' ? v : Array.isArray(v) ? (v[0] ?? null) : null;
}
