// What wakes a fleet from outside its claim loop: a Standard Webhooks receiver, an MQTT subscription to
// `queue_status/#` (a node turning `queued`), and the process signals that stop it. Each is optional.
import type { Clock } from './clock.js';
import type { FleetClientOptions, FleetCounters } from './fleetOptions.js';
import { MqttWake } from './mqttWake.js';
import type { Logger } from './types.js';
import { WebhookReceiver } from './webhookReceiver.js';
import type { AddressInfo } from 'node:net';

export interface WakeEdgesDeps {
  opts: Pick<FleetClientOptions, 'username' | 'password' | 'webhook' | 'mqtt' | 'handleSignals'>;
  clock: Clock;
  log: Logger;
  count: FleetCounters;
  /** Claim now (a wake arrived). */
  wake: () => void;
  /** A handled signal arrived. */
  stop: () => void;
}

export class WakeEdges {
  private webhook: WebhookReceiver | null = null;
  private mqtt: MqttWake | null = null;
  private mqttNote = '';
  private signalHandler: (() => void) | null = null;
  private signals: NodeJS.Signals[] = [];

  constructor(private readonly deps: WakeEdgesDeps) {}

  /** The webhook receiver's bound address (when one is configured and listening). */
  get webhookAddress(): AddressInfo | null {
    return this.webhook?.address() ?? null;
  }

  /** Starts the webhook receiver (listening when this resolves) and the MQTT subscription. */
  async open(): Promise<void> {
    const { opts, count, log } = this.deps;
    if (opts.webhook) {
      this.webhook = new WebhookReceiver(
        opts.webhook,
        {
          onDelivery: () => {
            count.webhookWakes++;
            this.deps.wake();
          },
          onRejected: () => {
            count.webhookRejected++;
          },
        },
        this.deps.clock,
      );
      await this.webhook.listen();
    }
    if (opts.mqtt) {
      const mqttOpts = opts.mqtt;
      this.mqtt = new MqttWake(
        {
          topic: 'queue_status/#',
          username: opts.username,
          password: opts.password,
          ...mqttOpts,
        },
        {
          onStatus: (_host, status) => {
            if (status !== 'queued') return;
            count.mqttWakes++;
            this.deps.wake();
          },
          onConnection: (up, error) => {
            const note = up ? 'mqtt connected' : `mqtt disconnected${error ? `: ${error}` : ''}`;
            if (note === this.mqttNote) return;
            this.mqttNote = note;
            (up ? log.info : log.warn)(note, { url: mqttOpts.url });
          },
        },
      );
      this.mqtt.start();
    }
  }

  /** `handleSignals`: true = SIGTERM and SIGINT stop the fleet, or the signals listed. */
  installSignals(): void {
    const h = this.deps.opts.handleSignals;
    if (!h) return;
    this.signals = h === true ? ['SIGTERM', 'SIGINT'] : h;
    this.signalHandler = () => this.deps.stop();
    for (const s of this.signals) process.once(s, this.signalHandler);
  }

  /** Removes the signal handlers, closes the receiver and ends the subscription. */
  async close(): Promise<void> {
    if (this.signalHandler) for (const s of this.signals) process.off(s, this.signalHandler);
    this.signalHandler = null;
    await this.webhook?.close();
    await this.mqtt?.stop();
  }
}
