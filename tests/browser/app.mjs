// A newcomer's first minute against a real `paddock serve`: register, see the recovery
// codes, continue, ask for the app on the start page (an account that has asked for
// nothing has no sandbox), and land on the live sandbox's app — the welcome page served from
// inside the sandbox on the user's live apps host (after the handoff) through the proxy, with its WebSocket connected through
// the proxy too. Then switch to the dev role and see the other sandbox.
// Run by internal/server's TestBrowserNewcomer, which sets BASE_URL (and SCREENSHOT_DIR).
// Prints "live=<id>" and "dev=<id>" for the Go test to check against the API.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const base = process.env.BASE_URL;
if (!base) throw new Error('BASE_URL is not set');
const step = (s) => console.log(`app.mjs: ${s}`);

const { context, close } = await launch(base, { width: 900, height: 760 });

async function appPage(page, role) {
  await page.waitForURL((u) => u.pathname === '/');
  // The app is on the role's own apps host, never the control plane's origin.
  assert.match(new URL(page.url()).hostname, new RegExp(`^${role}-[0-9a-f]{32}\\.localhost$`));
  const body = page.locator('body');
  await body.getByText('Your paddock sandbox is running').waitFor();
  assert.equal((await page.locator('#role').textContent()).trim(), role);
  // The page's own WebSocket goes through the proxy to the same sandbox.
  await page.locator('#ws').getByText(/WebSocket: connected \(echo: ping\)/).waitFor({ timeout: 15000 });
  return (await page.locator('#sandbox').textContent()).trim();
}

try {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/register');
  await page.getByLabel('Username').fill('newcomer');
  await page.getByLabel('Password', { exact: true }).fill('correct horse battery staple');
  const confirm = page.getByLabel(/Confirm|Repeat|again/i);
  if (await confirm.count()) await confirm.fill('correct horse battery staple');
  await page.getByRole('button', { name: /create|register|sign up/i }).click();
  await page.getByText(/recovery codes/i).first().waitFor();
  await page.getByRole('link', { name: /continue/i }).click();
  await page.waitForURL((u) => u.pathname === '/start');
  await page.getByRole('button', { name: /open my app/i }).click();
  const live = await appPage(page, 'live');
  assert.match(live, /^sb-[a-z2-7]{10}$/);
  step(`landed on the live sandbox ${live}`);
  await screenshot(page, 'app-live');

  // The signed-in page offers the role switch.
  await page.goto('/login');
  await page.getByRole('button', { name: /switch to dev/i }).click();
  await page.goto('/');
  const dev = await appPage(page, 'dev');
  assert.notEqual(dev, live, 'the dev role must be served by the other sandbox');
  step(`switched to the dev sandbox ${dev}`);
  await screenshot(page, 'app-dev');
  assert.deepEqual(errors, []);
  console.log(`live=${live}`);
  console.log(`dev=${dev}`);
} finally {
  await close();
}
