// A newcomer's first minute against a real `paddock serve`: register, see the recovery
// codes, continue, ask for the app on the start page (an account that has asked for
// nothing has no sandbox), and land on the live sandbox's desktop (desktop-<sandbox>,
// after the handoff), whose header offers the switch to dev and whose preview shows the
// app. The app itself stays on the role's own apps host (live-<user>): the welcome page
// served from inside the sandbox through the proxy, with its WebSocket connected through
// the proxy too. Then switch to the dev role: signing in again lands on the dev desktop,
// and the dev apps host shows the other sandbox.
// Run by internal/server's TestBrowserNewcomer, which sets BASE_URL (and SCREENSHOT_DIR).
// Prints "live=<id>" and "dev=<id>" for the Go test to check against the API.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const base = process.env.BASE_URL;
if (!base) throw new Error('BASE_URL is not set');
const port = new URL(base).port;
const step = (s) => console.log(`app.mjs: ${s}`);

const { context, close } = await launch(base, { width: 900, height: 760 });

// desktopPage waits for the desktop of the role's sandbox and returns the sandbox's ID.
async function desktopPage(page, role) {
  await page.waitForURL((u) => /^desktop-sb-[a-z2-7]{10}\.localhost$/.test(u.hostname) && u.pathname === '/', { timeout: 60000 });
  await page.locator('#role').filter({ hasText: `${role} sandbox` }).waitFor({ timeout: 30000 });
  const other = role === 'live' ? 'dev' : 'live';
  await page.getByRole('link', { name: `Switch to ${other}` }).waitFor();
  return new URL(page.url()).hostname.replace(/^desktop-/, '').replace(/\.localhost$/, '');
}

// appPage checks the app on the role's own apps host and returns the sandbox it names.
async function appPage(page, role) {
  await page.waitForURL((u) => u.pathname === '/' && u.hostname.startsWith(`${role}-`), { timeout: 60000 });
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
  const session = await (await page.request.get('/auth/session')).json();
  const userID = session.user.id;
  assert.match(userID, /^[0-9a-f]{32}$/);
  await page.getByRole('button', { name: /open my app/i }).click();

  // "Open my app" lands on the live sandbox's desktop, not the app.
  const live = await desktopPage(page, 'live');
  assert.match(live, /^sb-[a-z2-7]{10}$/);
  step(`landed on the live desktop of ${live}`);
  await screenshot(page, 'landing-desktop');
  // Its preview is the app of that sandbox.
  await page.getByRole('tab', { name: 'Preview' }).click();
  const frame = page.frameLocator('#preview');
  await frame.getByText('Your paddock sandbox is running').waitFor({ timeout: 60000 });
  assert.equal((await frame.locator('#sandbox').textContent()).trim(), live);

  // The app stays on the live apps host.
  await page.goto(`http://live-${userID}.localhost:${port}/`);
  assert.equal(await appPage(page, 'live'), live);
  step(`the live app of ${live} on its own host`);
  await screenshot(page, 'app-live');

  // Signing in again lands on the desktop as well.
  await page.goto('/');
  assert.equal(await desktopPage(page, 'live'), live);

  // The signed-in page offers the role switch; / is then the dev desktop.
  await page.goto('/login');
  await page.getByRole('button', { name: /switch to dev/i }).click();
  const dev = await desktopPage(page, 'dev');
  assert.notEqual(dev, live, 'the dev role must be served by the other sandbox');
  step(`switched to the dev desktop of ${dev}`);
  await page.goto(`http://dev-${userID}.localhost:${port}/`);
  assert.equal(await appPage(page, 'dev'), dev);
  step(`the dev app of ${dev} on its own host`);
  await screenshot(page, 'app-dev');
  assert.deepEqual(errors, []);
  console.log(`live=${live}`);
  console.log(`dev=${dev}`);
} finally {
  await close();
}
