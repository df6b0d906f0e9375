// Optional wake over MQTT: queue-keeper publishes `queue_status/<hostname>` ({hostname, status,
// updatedTime}) on every status change, a pause or resume at once. A status of `queued` means a node
// has work to hand out, so the claim loop stops backing off and claims now.
import { connect, type MqttClient } from 'mqtt';

export interface MqttWakeOptions {
  /** Broker URL, e.g. `mqtt://127.0.0.1:1883` (Harper's MQTT port). */
  url: string;
  /** Defaults to the fleet's own credentials (the fleet role may read `queue_status`). */
  username?: string;
  password?: string;
  /** Default `queue_status/#`. */
  topic?: string;
}

export interface MqttWakeEvents {
  onStatus(hostname: string | undefined, status: string): void;
  onConnection(connected: boolean, error?: string): void;
}

/** The status a message carries, whether it is the row itself or wrapped as `{value: row}`. */
export function statusOf(payload: Buffer): { hostname?: string; status: string } | null {
  let v: unknown;
  try {
    v = JSON.parse(payload.toString('utf8'));
  } catch {
    return null;
  }
  const row = (v as { value?: unknown } | null)?.value ?? v;
  if (typeof row !== 'object' || row === null) return null;
  const { status, hostname } = row as { status?: unknown; hostname?: unknown };
  if (typeof status !== 'string') return null;
  return { status, hostname: typeof hostname === 'string' ? hostname : undefined };
}

export class MqttWake {
  private client: MqttClient | null = null;
  private connected = false;

  constructor(
    private readonly opts: Required<Pick<MqttWakeOptions, 'url' | 'topic'>> & MqttWakeOptions,
    private readonly events: MqttWakeEvents,
  ) {}

  /** Starts connecting; never waits for the broker (the claim loop does not need it to run). */
  start(): void {
    const c = connect(this.opts.url, {
      username: this.opts.username,
      password: this.opts.password,
      // A broker restart or a network blip is retried quietly; the claim loop keeps polling meanwhile.
      reconnectPeriod: 5_000,
      connectTimeout: 10_000,
      clean: true,
    });
    this.client = c;
    c.on('connect', () => {
      c.subscribe(this.opts.topic, { qos: 1 }, (err) => {
        if (err) this.events.onConnection(false, err.message);
      });
      if (!this.connected) {
        this.connected = true;
        this.events.onConnection(true);
      }
    });
    c.on('close', () => {
      if (this.client !== c) return; // our own stop()
      if (this.connected) {
        this.connected = false;
        this.events.onConnection(false);
      }
    });
    c.on('error', (err) => {
      if (this.connected || this.client !== c) return;
      this.events.onConnection(false, err.message);
    });
    c.on('message', (_topic, payload) => {
      const s = statusOf(payload);
      if (s) this.events.onStatus(s.hostname, s.status);
    });
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c) await c.endAsync(true);
  }
}
