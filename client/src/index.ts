// @queue-keeper/fleet-client: a reference render fleet for queue-keeper (see README.md beside this package).
export { FleetClient, serverSkew } from './fleetClient.js';
export { FleetRefusedError } from './fleetOptions.js';
export {
  ChannelMessageError,
  FleetChannel,
  type ChannelHandlers,
  type ChannelLimits,
  type ChannelOptions,
} from './channel.js';
export type { FleetClientOptions, FleetCounters, FleetSnapshot, FleetState } from './fleetOptions.js';
export { toWire } from './wireResults.js';
export type {
  Job,
  Outcome,
  RenderFn,
  RenderResult,
  Logger,
  QueueStatus,
  WireResult,
  ResultAnswer,
} from './types.js';
export { consoleLogger, silentLogger } from './types.js';
export { backoffDelay, type BackoffPolicy } from './backoff.js';
export { CircuitBreaker, type BreakerOptions, type BreakerState } from './breaker.js';
export { systemClock, Waker, type Clock, type Timer } from './clock.js';
export {
  WebhookReceiver,
  WebhookVerifier,
  type WebhookReceiverOptions,
  type WebhookDelivery,
} from './webhookReceiver.js';
export type { MqttWakeOptions } from './mqttWake.js';
export {
  DEVICE_PROFILES,
  FALLBACK_DEVICE,
  FLEET_UA_TOKEN,
  deviceProfiles,
  type DeviceProfile,
  type DeviceProfileOptions,
  type DeviceProfileOverride,
  type Viewport,
} from './deviceProfiles.js';
export { fetchRenderer, type FetchRendererOptions } from './renderers/fetchRenderer.js';
// Loads playwright-core and @sparticuz/chromium only when called: both stay optional peer dependencies.
export {
  CHROMIUM_ARGS,
  chromiumRenderer,
  type ChromiumRenderer,
  type ChromiumRendererOptions,
  type ChromiumRendererStats,
  type RenderBrowser,
  type RenderContext,
  type RenderContextOptions,
  type RenderPage,
  type RenderRequest,
  type RenderResponse,
} from './renderers/chromium.js';
