// A fake `/render_queue/channel` on 127.0.0.1: just enough RFC 6455 (handshake, masked client text
// frames, unmasked server frames, close) to speak the channel's JSON messages. It records every message
// and answers through a handler the test sets; `push` sends a frame on its own.
import { createHash } from 'node:crypto';
import http from 'node:http';
import { closeLoopback, listenLoopback } from './loopback.js';
import type { Duplex } from 'node:stream';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export interface ChannelMessage {
  results?: Array<{ id: string; leaseToken: string; outcome: string }>;
  credits?: number;
  withdraw?: boolean;
  queues?: string[];
  ref?: string;
}

export interface FakeSocket {
  auth: string | undefined;
  send(frame: unknown): void;
  close(code: number, reason?: string): void;
}

export class FakeChannelServer {
  readonly messages: ChannelMessage[] = [];
  readonly sockets: FakeSocket[] = [];
  httpRequests = 0;
  /** Called when a socket opens; default: say ready. */
  onOpen: (s: FakeSocket) => void = (s) =>
    s.send({ type: 'ready', maxMessageBytes: 1 << 20, maxResults: 100, maxCredits: 100 });
  /** Called for each message; default: ack it with every result accepted. */
  onMessage: (m: ChannelMessage, s: FakeSocket) => void = (m, s) => s.send(ack(m));
  private server: http.Server | null = null;
  /** Upgraded sockets leave the HTTP server's books: stop() ends them itself. */
  private readonly raw = new Set<Duplex>();
  url = '';

  async start(): Promise<string> {
    this.server = http.createServer((_req, res) => {
      this.httpRequests++;
      res.writeHead(500).end();
    });
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex) => {
      const key = String(req.headers['sec-websocket-key']);
      const accept = createHash('sha1')
        .update(key + GUID)
        .digest('base64');
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
          `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
      );
      const fake: FakeSocket = {
        auth: req.headers.authorization,
        send: (frame) => socket.write(encode(0x1, Buffer.from(JSON.stringify(frame)))),
        close: (code, reason = '') => {
          const body = Buffer.alloc(2 + Buffer.byteLength(reason));
          body.writeUInt16BE(code, 0);
          body.write(reason, 2);
          socket.end(encode(0x8, body));
        },
      };
      this.sockets.push(fake);
      this.raw.add(socket);
      socket.on('close', () => this.raw.delete(socket));
      let buffered = Buffer.alloc(0);
      socket.on('data', (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        for (;;) {
          const frame = decode(buffered);
          if (!frame) break;
          buffered = buffered.subarray(frame.length);
          if (frame.opcode === 0x8) {
            socket.end(encode(0x8, frame.payload.subarray(0, 2)));
            return;
          }
          if (frame.opcode !== 0x1) continue;
          const m = JSON.parse(frame.payload.toString('utf8')) as ChannelMessage;
          this.messages.push(m);
          this.onMessage(m, fake);
        }
      });
      socket.on('error', () => {});
      this.onOpen(fake);
    });
    this.url = await listenLoopback(this.server);
    return this.url;
  }

  async stop(): Promise<void> {
    if (this.server) await closeLoopback(this.server, this.raw);
  }
}

/** An ack for `m` with every result accepted. */
export function ack(m: ChannelMessage, credits = 0): Record<string, unknown> {
  return {
    type: 'ack',
    ref: m.ref,
    results: (m.results ?? []).map((r) => ({ id: r.id, accepted: true, nextRenderTime: 1 })),
    credits,
  };
}

function encode(opcode: number, payload: Buffer): Buffer {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x80 | opcode, n]) : Buffer.alloc(n < 65536 ? 4 : 10);
  if (n >= 126 && n < 65536) {
    head[0] = 0x80 | opcode;
    head[1] = 126;
    head.writeUInt16BE(n, 2);
  } else if (n >= 65536) {
    head[0] = 0x80 | opcode;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([head, payload]);
}

/** One complete client frame at the start of `b` (masked, unfragmented), or null until it is all here. */
function decode(b: Buffer): { opcode: number; payload: Buffer; length: number } | null {
  if (b.length < 2) return null;
  const opcode = b[0]! & 0x0f;
  let n = b[1]! & 0x7f;
  let at = 2;
  if (n === 126) {
    if (b.length < 4) return null;
    n = b.readUInt16BE(2);
    at = 4;
  } else if (n === 127) {
    if (b.length < 10) return null;
    n = Number(b.readBigUInt64BE(2));
    at = 10;
  }
  if (b.length < at + 4 + n) return null;
  const mask = b.subarray(at, at + 4);
  const payload = Buffer.from(b.subarray(at + 4, at + 4 + n));
  for (let i = 0; i < n; i++) payload[i]! ^= mask[i % 4]!;
  return { opcode, payload, length: at + 4 + n };
}
