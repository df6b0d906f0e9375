// What a job's `deviceType` means to a renderer: the viewport, pixel density, touch and user agent the
// page is opened with. The server only names the device; pages differ by device because sites read
// exactly these (responsive layouts, `(pointer: coarse)`, user-agent sniffing), and crawlers fetch a
// page as a phone and as a desktop. The table is plain data, resolved once when a renderer is created.

export interface Viewport {
  width: number;
  height: number;
}

export interface DeviceProfile {
  /** The CSS pixels the page lays out in. */
  viewport: Viewport;
  /** Device pixels per CSS pixel (`window.devicePixelRatio`). */
  deviceScaleFactor: number;
  /** Honours `<meta name="viewport">` and reports a mobile browser, as a phone or tablet does. */
  isMobile: boolean;
  /** Touch events and `(pointer: coarse)`. */
  hasTouch: boolean;
  /** The `User-Agent` of every request the page makes. */
  userAgent: string;
}

/** A change to one device's profile: only the fields given replace the base profile's. */
export interface DeviceProfileOverride {
  viewport?: Viewport;
  deviceScaleFactor?: number;
  isMobile?: boolean;
  hasTouch?: boolean;
  userAgent?: string;
}

export interface DeviceProfileOptions {
  /**
   * Per device name: changes to that built-in profile, or a new device (based on `desktop`). Each
   * field given replaces the base profile's; a `userAgent` here is sent exactly as given.
   */
  devices?: Readonly<Record<string, DeviceProfileOverride>>;
  /**
   * The user agent of every device whose override names none, sent exactly as given: an operator who
   * must match one string (an origin's allow-list) sets it here, one device's in `devices`.
   */
  userAgent?: string;
}

/**
 * Appended to each built-in user agent, so an origin can tell the fleet's requests from a visitor's
 * in its logs (and exempt them from bot rules) while the device part still reads as the browser it is.
 */
export const FLEET_UA_TOKEN = 'queue-keeper-fleet/0.1';

/** The device whose profile a name the table does not know renders with. */
export const FALLBACK_DEVICE = 'desktop';

// Chrome's reduced user agents (the form Chrome itself sends since version 110): the platform and
// model are frozen, so only the major version needs to follow the bundled Chromium. A tablet is told
// from a phone the way sites tell them apart: Android without the `Mobile` token.
const CHROME_MAJOR = 143;
const chromeUa = (platform: string, mobile: boolean): string =>
  `Mozilla/5.0 (${platform}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${CHROME_MAJOR}.0.0.0 ` +
  `${mobile ? 'Mobile ' : ''}Safari/537.36 ${FLEET_UA_TOKEN}`;

/**
 * The built-in profiles: a full-HD desktop, an Android phone of the common 412-CSS-pixel width, and a
 * tablet of the common 820 x 1180 size. Phones and tablets honour the page's viewport meta tag and
 * have touch, so a page's mobile layout is the one rendered.
 */
export const DEVICE_PROFILES: Readonly<Record<'desktop' | 'mobile' | 'tablet', DeviceProfile>> =
  Object.freeze({
    desktop: Object.freeze({
      viewport: Object.freeze({ width: 1920, height: 1080 }),
      deviceScaleFactor: 1,
      isMobile: false,
      hasTouch: false,
      userAgent: chromeUa('Windows NT 10.0; Win64; x64', false),
    }),
    mobile: Object.freeze({
      viewport: Object.freeze({ width: 412, height: 915 }),
      deviceScaleFactor: 2.625,
      isMobile: true,
      hasTouch: true,
      userAgent: chromeUa('Linux; Android 10; K', true),
    }),
    tablet: Object.freeze({
      viewport: Object.freeze({ width: 820, height: 1180 }),
      deviceScaleFactor: 2,
      isMobile: true,
      hasTouch: true,
      userAgent: chromeUa('Linux; Android 10; K', false),
    }),
  });

/** The names the server accepts in render.deviceTypes; an override for any other could never apply. */
const DEVICE_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/**
 * Resolves the table once (built-ins, then `userAgent`, then each override) and answers the lookup a
 * renderer makes per job: a device the table does not know gets the `desktop` profile. Throws a
 * TypeError naming the field when an option is malformed, so a bad table fails the renderer's
 * creation, not every job.
 */
export function deviceProfiles(opts: DeviceProfileOptions = {}): (deviceType: string) => DeviceProfile {
  if (opts.userAgent !== undefined) userAgentOf(opts.userAgent, 'userAgent');
  const d: unknown = opts.devices;
  if (d !== undefined && (typeof d !== 'object' || d === null || Array.isArray(d)))
    throw new TypeError('devices must be an object of profile changes by device name');
  // A Map, not an object: a device named `constructor` must not find Object.prototype's.
  const table = new Map<string, DeviceProfile>();
  for (const [name, p] of Object.entries(DEVICE_PROFILES))
    table.set(name, Object.freeze({ ...p, userAgent: opts.userAgent ?? p.userAgent }));
  for (const [name, o] of Object.entries(opts.devices ?? {})) {
    if (!DEVICE_NAME.test(name)) throw new TypeError(`devices: ${JSON.stringify(name)} is not a device name`);
    table.set(name, merged(table.get(name) ?? table.get(FALLBACK_DEVICE)!, o, `devices.${name}`));
  }
  const fallback = table.get(FALLBACK_DEVICE)!;
  return (deviceType) => table.get(deviceType) ?? fallback;
}

function merged(base: DeviceProfile, o: DeviceProfileOverride, at: string): DeviceProfile {
  if (typeof o !== 'object' || o === null) throw new TypeError(`${at} must be an object`);
  const known = new Set(['viewport', 'deviceScaleFactor', 'isMobile', 'hasTouch', 'userAgent']);
  for (const k of Object.keys(o)) if (!known.has(k)) throw new TypeError(`${at}.${k} is not a profile field`);
  return Object.freeze({
    viewport: o.viewport === undefined ? base.viewport : viewportOf(o.viewport, `${at}.viewport`),
    deviceScaleFactor:
      o.deviceScaleFactor === undefined ? base.deviceScaleFactor : scaleOf(o.deviceScaleFactor, at),
    isMobile: o.isMobile === undefined ? base.isMobile : flagOf(o.isMobile, `${at}.isMobile`),
    hasTouch: o.hasTouch === undefined ? base.hasTouch : flagOf(o.hasTouch, `${at}.hasTouch`),
    userAgent: o.userAgent === undefined ? base.userAgent : userAgentOf(o.userAgent, `${at}.userAgent`),
  });
}

function viewportOf(v: Viewport, at: string): Viewport {
  const side = (n: unknown) => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= 10_000;
  if (typeof v !== 'object' || v === null || !side(v.width) || !side(v.height))
    throw new TypeError(`${at} must be { width, height } in whole CSS pixels from 1 to 10000`);
  return Object.freeze({ width: v.width, height: v.height });
}

function scaleOf(v: number, at: string): number {
  if (typeof v !== 'number' || !(v > 0 && v <= 10))
    throw new TypeError(`${at}.deviceScaleFactor must be a number above 0, at most 10`);
  return v;
}

function flagOf(v: boolean, at: string): boolean {
  if (typeof v !== 'boolean') throw new TypeError(`${at} must be true or false`);
  return v;
}

// A control character would end the header line (or make the HTTP client refuse the request).
function userAgentOf(v: string, at: string): string {
  if (typeof v !== 'string' || !/^[^\x00-\x1f\x7f]+$/.test(v))
    throw new TypeError(`${at} must be a non-empty string without control characters`);
  return v;
}
