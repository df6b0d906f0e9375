// The headless Chromium the console test drives: the binary shipped inside the @sparticuz/chromium npm
// package (unpacked into the temp folder on first use), so no system browser is needed. CHROMIUM_PATH
// points at another Chromium instead. The flags keep it off the network (this machine has none) and let
// it run as root in a container; web security stays on, so the console's CSP is really enforced.
import chromiumBinary from '@sparticuz/chromium';
import { CHROMIUM_ARGS } from '@queue-keeper/fleet-client';
import { chromium, type Browser } from 'playwright-core';

export async function launchChromium(): Promise<Browser> {
  const executablePath = process.env.CHROMIUM_PATH || (await chromiumBinary.executablePath());
  // The fleet client's Chromium renderer starts its browsers with the same flags.
  return chromium.launch({ executablePath, args: [...CHROMIUM_ARGS], headless: true });
}
