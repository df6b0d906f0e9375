// The device profile table (what a job's deviceType means to a renderer) and the fetch renderer
// sending the job's device user agent to a page served on loopback.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import {
  DEVICE_PROFILES,
  FLEET_UA_TOKEN,
  deviceProfiles,
  type DeviceProfileOptions,
} from '../src/deviceProfiles.js';
import { fetchRenderer } from '../src/renderers/fetchRenderer.js';
import type { Job } from '../src/types.js';
import { closeLoopback, listenLoopback } from './loopback.js';

test('mobile is a dense touch phone, tablet a larger touch screen, desktop a wide mouse screen, each with its own Chrome user agent', () => {
  const { desktop, mobile, tablet } = DEVICE_PROFILES;
  assert.deepEqual(
    [desktop, mobile, tablet].map((p) => [p.isMobile, p.hasTouch]),
    [
      [false, false],
      [true, true],
      [true, true],
    ],
  );
  assert.ok(mobile.viewport.width < tablet.viewport.width && tablet.viewport.width < desktop.viewport.width);
  assert.ok(mobile.deviceScaleFactor > tablet.deviceScaleFactor);
  assert.equal(desktop.deviceScaleFactor, 1);
  // Sites tell a phone from a tablet by Android's `Mobile` token, and a desktop by its platform.
  assert.match(mobile.userAgent, /\(Linux; Android [^)]*\).* Chrome\/\d+[.\d]* Mobile Safari\//);
  assert.match(tablet.userAgent, /\(Linux; Android [^)]*\).* Chrome\/\d+[.\d]* Safari\//);
  assert.doesNotMatch(tablet.userAgent, /Mobile/);
  assert.match(desktop.userAgent, /\(Windows NT [^)]*\).* Chrome\/\d+[.\d]* Safari\//);
  for (const p of [desktop, mobile, tablet]) {
    assert.ok(p.userAgent.endsWith(` ${FLEET_UA_TOKEN}`), 'the fleet names itself');
    assert.doesNotMatch(p.userAgent, /Headless/);
  }
});

test('a device the table does not know, even one named like an object property, gets the desktop profile', () => {
  const profileOf = deviceProfiles();
  assert.equal(profileOf('mobile'), profileOf('mobile'));
  assert.deepEqual(profileOf('mobile'), DEVICE_PROFILES.mobile);
  assert.deepEqual(profileOf('tablet'), DEVICE_PROFILES.tablet);
  for (const name of ['desktop', 'watch', 'constructor', '__proto__', ''])
    assert.deepEqual(profileOf(name), DEVICE_PROFILES.desktop, name);
});

test('userAgent replaces every built-in user agent as given; an override replaces only the fields it names, and a new device starts from desktop', () => {
  const profileOf = deviceProfiles({
    userAgent: 'ExampleBot/1',
    devices: {
      tablet: { viewport: { width: 768, height: 1024 } },
      mobile: { userAgent: 'PhoneBot/2', deviceScaleFactor: 3 },
      'tv-4k': { viewport: { width: 3840, height: 2160 }, deviceScaleFactor: 2 },
    },
  });
  assert.deepEqual(profileOf('desktop'), { ...DEVICE_PROFILES.desktop, userAgent: 'ExampleBot/1' });
  assert.deepEqual(profileOf('tablet'), {
    ...DEVICE_PROFILES.tablet,
    viewport: { width: 768, height: 1024 },
    userAgent: 'ExampleBot/1',
  });
  assert.deepEqual(profileOf('mobile'), {
    ...DEVICE_PROFILES.mobile,
    userAgent: 'PhoneBot/2',
    deviceScaleFactor: 3,
  });
  assert.deepEqual(profileOf('tv-4k'), {
    ...DEVICE_PROFILES.desktop,
    viewport: { width: 3840, height: 2160 },
    deviceScaleFactor: 2,
    userAgent: 'ExampleBot/1',
  });
  assert.deepEqual(profileOf('watch'), profileOf('desktop'));
  const overridden = deviceProfiles({ devices: { desktop: { viewport: { width: 1366, height: 768 } } } });
  assert.deepEqual(
    overridden('watch').viewport,
    { width: 1366, height: 768 },
    'the fallback is desktop as overridden',
  );
});

test('a malformed table is refused naming the field, and the built-in table is never changed', () => {
  const bad: Array<[DeviceProfileOptions, RegExp]> = [
    [{ devices: { Mobile: {} } }, /devices: "Mobile" is not a device name/],
    [{ devices: { mobile: { viewport: { width: 0, height: 10 } } } }, /devices\.mobile\.viewport/],
    [{ devices: { mobile: { viewport: { width: 390.5, height: 844 } } } }, /devices\.mobile\.viewport/],
    [{ devices: { mobile: { deviceScaleFactor: Number.NaN } } }, /devices\.mobile\.deviceScaleFactor/],
    [{ devices: { mobile: { isMobile: 'yes' as unknown as boolean } } }, /devices\.mobile\.isMobile/],
    [{ devices: { mobile: { userAgent: 'a\r\nx-injected: 1' } } }, /devices\.mobile\.userAgent/],
    [{ devices: { mobile: { width: 390 } as never } }, /devices\.mobile\.width is not a profile field/],
    [{ devices: { mobile: null as never } }, /devices\.mobile must be an object/],
    [{ userAgent: '' }, /userAgent must be a non-empty string/],
  ];
  for (const [opts, message] of bad)
    assert.throws(() => deviceProfiles(opts), { name: 'TypeError', message });
  assert.throws(() => {
    (DEVICE_PROFILES.mobile.viewport as { width: number }).width = 1;
  }, TypeError);
  assert.equal(DEVICE_PROFILES.mobile.viewport.width, 412);
});

const job = (url: string, deviceType: string): Job => ({
  id: `${url}|${deviceType}`,
  url,
  queue: 'q',
  isFromSitemap: false,
  expiresAt: 0,
  leaseToken: 't',
  callbackOrigin: 'http://127.0.0.1:9926',
  deviceType,
});

test('the fetch renderer asks for each page with its device user agent, desktop for a device it does not know', async (t) => {
  const agents: Array<string | undefined> = [];
  const server = http.createServer((req, res) => {
    agents.push(req.headers['user-agent']);
    res.writeHead(200, { 'content-type': 'text/html' }).end('<p>x</p>');
  });
  const base = await listenLoopback(server);
  t.after(() => closeLoopback(server));
  const render = fetchRenderer();
  for (const device of ['mobile', 'tablet', 'desktop', 'watch'])
    assert.equal((await render(job(`${base}/`, device), new AbortController().signal)).outcome, 'rendered');
  const own = fetchRenderer({ userAgent: 'ExampleBot/1', devices: { mobile: { userAgent: 'PhoneBot/2' } } });
  for (const device of ['mobile', 'desktop'])
    await own(job(`${base}/`, device), new AbortController().signal);
  assert.deepEqual(agents, [
    DEVICE_PROFILES.mobile.userAgent,
    DEVICE_PROFILES.tablet.userAgent,
    DEVICE_PROFILES.desktop.userAgent,
    DEVICE_PROFILES.desktop.userAgent,
    'PhoneBot/2',
    'ExampleBot/1',
  ]);
});
