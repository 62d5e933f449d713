// What every browser script shares: a headless Debian chromium on a fresh profile, and
// screenshots into SCREENSHOT_DIR when it is set.
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

// launch opens a browser context on baseURL with a fresh profile; no network but the
// control plane (this machine has none), so nothing in the background may try to reach
// one. close() ends the browser and removes the profile.
export async function launch(baseURL, viewport) {
  const profile = await mkdtemp(path.join(tmpdir(), 'paddock-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    baseURL,
    viewport,
  });
  const close = async () => {
    await context.close();
    await rm(profile, { recursive: true, force: true });
  };
  return { context, close };
}

// screenshot saves page as SCREENSHOT_DIR/<name>.png and returns the path, or does
// nothing when SCREENSHOT_DIR is not set.
export async function screenshot(page, name) {
  const dir = process.env.SCREENSHOT_DIR || '';
  if (!dir) return '';
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}
