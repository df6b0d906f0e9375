// A small client of the prerender fleet protocol, written to the protocol and acting as an unchanged
// prerender render fleet does: it finds nodes over MQTT (`queue_status/#`, QoS 1, its worker id as
// client id, Basic credentials), reaches a host at `http://` or `https://<hostname>:<queuePort>` by the
// fleet's rule, claims with `{"limit": n}`, and posts each result to
// `<job.callbackOrigin>/render_queue/job_result` in the raw framing (`x-metadata-size`, UTF-8 JSON
// metadata without a lease token, then the page encoded as `headers["content-encoding"]` says). Every
// request carries `authorization: Basic …` and `x-worker-id`. Requests go through undici, as the
// fleet's do. It never skips a job for its lease: a test that acts as the fleet applies that rule itself.
import {
  brotliCompressSync,
  constants as zlibConstants,
  createBrotliCompress,
  createGzip,
  gzipSync,
} from 'node:zlib';
import assert from 'node:assert/strict';
import type { Transform } from 'node:stream';
import { connectAsync, type MqttClient } from 'mqtt';
import { request } from 'undici';
import { basicAuth, type Credentials } from './harness.js';

/** A job as a prerender fleet reads it from a claim. */
export interface PrerenderJob {
  id: string;
  url: string;
  expiresAt: number;
  isFromSitemap: boolean;
  callbackOrigin: string;
  deviceType: string;
  [field: string]: unknown;
}

/** The `queue_status/<node>` message. */
export interface QueueStatusMessage {
  hostname: string;
  status: string;
  updatedTime: number | string;
  node?: string;
  [field: string]: unknown;
}

export type PageEncoding = 'gzip' | 'br' | 'identity';

/** The JSON metadata at the start of a framed result (no leaseToken: that is the token protocol). */
export interface ResultMetadata {
  id: string;
  url: string;
  statusCode?: number;
  headers: Record<string, string>;
  renderTime?: number;
  redirectedTo?: string;
  isIndexable?: boolean;
  outcome?: string;
  reason?: string;
  error?: { name: string; message: string; phase?: string };
  [field: string]: unknown;
}

export interface FleetAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** How long the request took, from sending to the last byte of the answer (ms). */
  ms: number;
}

/** The response headers a prerender fleet forwards with a page (besides content-encoding). */
export const FORWARDED_HEADERS = [
  'etag',
  'last-modified',
  'link',
  'x-robots-tag',
  'retry-after',
  'cache-control',
  'content-type',
  'vary',
] as const;

/** Where a fleet reaches a host it found over MQTT: http for loopback names, else https. */
export function hostOrigin(hostname: string, queuePort: number): string {
  const scheme = hostname === 'localhost' || hostname === '127.0.0.1' ? 'http' : 'https';
  return `${scheme}://${hostname}:${queuePort}`;
}

/** True when `s` is an origin only: scheme, host and optional port, nothing after. */
export function isOrigin(s: unknown): boolean {
  if (typeof s !== 'string') return false;
  try {
    const u = new URL(s);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin === s;
  } catch {
    return false;
  }
}

export function encodePage(content: string | Buffer, encoding: PageEncoding): Buffer {
  const raw = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
  if (encoding === 'gzip') return gzipSync(raw);
  if (encoding === 'br') return brotliCompressSync(raw);
  return raw;
}

/** The framed body: metadata bytes (JSON of `meta`, or the bytes given) followed by the page bytes. */
export function frame(meta: unknown, page: Buffer = Buffer.alloc(0)): { body: Buffer; metadataSize: number } {
  const m = Buffer.isBuffer(meta) ? meta : Buffer.from(JSON.stringify(meta), 'utf8');
  return { body: Buffer.concat([m, page]), metadataSize: m.length };
}

/**
 * `size` zero bytes compressed as `encoding`, streamed so that neither side of the test holds them: a
 * decompression bomb (about 1,000:1 for gzip, far more for brotli).
 */
export async function zeroBomb(encoding: 'gzip' | 'br', size: number): Promise<Buffer> {
  const z: Transform =
    encoding === 'gzip'
      ? createGzip({ level: 9 })
      : createBrotliCompress({
          params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 5, [zlibConstants.BROTLI_PARAM_LGWIN]: 24 },
        });
  const out: Buffer[] = [];
  z.on('data', (c: Buffer) => out.push(c));
  const ended = new Promise<void>((resolve, reject) => {
    z.on('end', resolve);
    z.on('error', reject);
  });
  const chunk = Buffer.alloc(1 << 20);
  for (let left = size; left > 0; left -= chunk.length) {
    const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
    if (!z.write(piece)) await new Promise((r) => z.once('drain', r));
  }
  z.end();
  await ended;
  return Buffer.concat(out);
}

async function answer(res: Awaited<ReturnType<typeof request>>, startedAt: number): Promise<FleetAnswer> {
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, ms: Date.now() - startedAt };
}

/** The node's `queue_status` messages as one fleet sees them over MQTT. */
export class QueueStatusWatch {
  readonly messages: Array<{ topic: string; at: number; message: QueueStatusMessage }> = [];
  /** The latest message per hostname, as the fleet keeps its producers. */
  readonly hosts = new Map<string, QueueStatusMessage>();

  private constructor(private readonly client: MqttClient) {
    client.on('message', (topic, payload) => {
      const message = JSON.parse(payload.toString('utf8')) as QueueStatusMessage;
      this.messages.push({ topic, at: Date.now(), message });
      this.hosts.set(message.hostname, message);
    });
  }

  static async open(mqttUrl: string, credentials: Credentials, workerId: string): Promise<QueueStatusWatch> {
    const client = await connectAsync(mqttUrl, {
      username: credentials.username,
      password: credentials.password,
      clientId: workerId,
      reconnectPeriod: 0,
    });
    const watch = new QueueStatusWatch(client);
    await client.subscribeAsync('queue_status/#', { qos: 1, rh: 0 });
    return watch;
  }

  /** The hostnames a fleet would claim from now: those whose latest status is `queued`. */
  eligible(): string[] {
    return [...this.hosts.values()].filter((m) => m.status === 'queued').map((m) => m.hostname);
  }

  close(): Promise<void> {
    return this.client.endAsync();
  }
}

export type ReportedJob = Pick<PrerenderJob, 'id' | 'url' | 'callbackOrigin'>;

/** One worker of a prerender fleet: its user, its worker id and the port it reaches every host on. */
export class PrerenderFleetWorker {
  constructor(
    readonly credentials: Credentials,
    readonly workerId: string,
    readonly queuePort: number,
  ) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: basicAuth(this.credentials), 'x-worker-id': this.workerId, ...extra };
  }

  watch(mqttUrl: string): Promise<QueueStatusWatch> {
    return QueueStatusWatch.open(mqttUrl, this.credentials, this.workerId);
  }

  /** `POST /render_queue/claim {"limit": n}` at a host found over MQTT. */
  async claim(
    hostname: string,
    limit: number,
  ): Promise<FleetAnswer & { jobs: PrerenderJob[] | undefined; queueStatus: string | undefined }> {
    const startedAt = Date.now();
    const res = await request(`${hostOrigin(hostname, this.queuePort)}/render_queue/claim`, {
      method: 'POST',
      headers: this.headers({ 'content-type': 'application/json' }),
      body: JSON.stringify({ limit }),
    });
    const a = await answer(res, startedAt);
    let jobs: PrerenderJob[] | undefined;
    try {
      const parsed = JSON.parse(a.text) as unknown;
      jobs = Array.isArray(parsed) ? (parsed as PrerenderJob[]) : undefined;
    } catch {
      jobs = undefined;
    }
    const qs = a.headers['x-queue-status'];
    return { ...a, jobs, queueStatus: typeof qs === 'string' ? qs : undefined };
  }

  /** A framed result posted as is: the body bytes and the x-metadata-size header value given. */
  async postFramed(
    origin: string,
    body: Buffer,
    metadataSize: string | number | undefined,
    extraHeaders: Record<string, string> = {},
  ): Promise<FleetAnswer> {
    // A job without a usable origin cannot be reported at all: the fleet drops the render.
    assert.ok(
      isOrigin(origin),
      `the job carries callbackOrigin, an origin to post the result to (it has ${JSON.stringify(origin)})`,
    );
    const headers = this.headers({ 'content-type': 'application/octet-stream', ...extraHeaders });
    if (metadataSize !== undefined) headers['x-metadata-size'] = String(metadataSize);
    const startedAt = Date.now();
    const res = await request(`${origin}/render_queue/job_result`, { method: 'POST', headers, body });
    return answer(res, startedAt);
  }

  /**
   * Reports a job as the fleet does: the metadata (id and url from the job unless given), the page
   * encoded as `encoding` with `content-encoding` added to the headers, posted to the job's
   * callbackOrigin. Without `content` there are no page bytes and no content-encoding.
   */
  report(
    job: ReportedJob,
    meta: Partial<ResultMetadata>,
    content?: string | Buffer,
    encoding: PageEncoding = 'gzip',
  ): Promise<FleetAnswer> {
    const page = content === undefined ? undefined : encodePage(content, encoding);
    return this.reportBytes(job, meta, page, encoding);
  }

  /** As `report`, with page bytes already encoded as `encoding` (which need not decode). */
  reportBytes(
    job: ReportedJob,
    meta: Partial<ResultMetadata>,
    page: Buffer | undefined,
    encoding: PageEncoding,
  ): Promise<FleetAnswer> {
    const headers: Record<string, string> = { ...(meta.headers ?? {}) };
    if (page !== undefined && encoding !== 'identity') headers['content-encoding'] = encoding;
    const { body, metadataSize } = frame({ id: job.id, url: job.url, ...meta, headers }, page);
    return this.postFramed(job.callbackOrigin, body, metadataSize);
  }
}

/** `x-result-status` of an answer, or undefined. */
export function resultStatus(a: FleetAnswer): string | undefined {
  const v = a.headers['x-result-status'];
  return typeof v === 'string' ? v : undefined;
}
