// The sign-up, sign-out, sign-in and recovery flows of paddock's control-plane
// pages, in a real (headless) chromium. Run by internal/web's TestBrowserAuthFlow
// through internal/browsertest, which sets:
//   BASE_URL        the control plane, e.g. http://127.0.0.1:41234
//   HOME_PATH       where a browser lands after signing in (default "/")
//   SCREENSHOT_DIR  where to write screenshots (optional)
//   CHROMIUM        the browser (default /usr/bin/chromium)
// Exits non-zero, with the reason, at the first thing that is not as expected.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const base = process.env.BASE_URL;
if (!base) throw new Error('BASE_URL is not set');
const home = process.env.HOME_PATH || '/';
const user = `user${Date.now() % 1e8}`;
const password = 'correct horse battery staple';
const newPassword = 'a brand new passphrase';

const step = (s) => console.log(`auth.mjs: ${s}`);

const { context, close } = await launch(base, { width: 900, height: 860 });

// CSP violations and script errors are failures: the pages run no script at all.
const problems = [];

async function shot(page, name) {
  const file = await screenshot(page, name);
  if (file) step(`screenshot ${file}`);
}

async function alertText(page) {
  return (await page.getByRole('alert').first().textContent()).trim();
}

async function onHome(page) {
  await page.waitForURL((u) => u.pathname === home);
  assert.match(await page.locator('body').textContent(), /APP HOME/);
}

async function sessionStatus(page) {
  return (await page.request.get('/auth/session')).status();
}

try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15000);
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));

  step(`register ${user}`);
  await page.goto('/register');
  assert.equal(await page.title(), 'Create an account · paddock');
  await page.getByLabel('Username', { exact: true }).fill(user);
  await page.getByLabel('Password', { exact: true }).fill(password);
  await shot(page, 'register');
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.locator('ol.codes code').first().waitFor();
  const codes = (await page.locator('ol.codes code').allTextContents()).map((c) => c.trim());
  assert.equal(codes.length, 10, `recovery codes shown: ${codes}`);
  assert.equal(new Set(codes).size, 10);
  assert.match(await alertText(page), /Save these recovery codes now/);
  await shot(page, 'recovery-codes');

  step('continue to the app');
  await page.getByRole('link', { name: 'Continue to your app' }).click();
  await onHome(page);
  assert.equal(await sessionStatus(page), 200);

  step('sign out from /login');
  await page.goto('/login');
  assert.match(await page.locator('main').textContent(), new RegExp(`signed in as ${user}`));
  await shot(page, 'signed-in');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL('**/login');
  await page.getByLabel('Username', { exact: true }).waitFor();
  assert.equal(await sessionStatus(page), 401);

  step('a wrong password is refused, the username kept');
  await page.getByLabel('Username', { exact: true }).fill(user);
  await page.getByLabel('Password', { exact: true }).fill('not my password at all');
  await page.getByRole('button', { name: 'Sign in' }).click();
  assert.match(await alertText(page), /Invalid username or password/);
  assert.equal(await page.getByLabel('Username', { exact: true }).inputValue(), user);
  assert.equal(await page.getByLabel('Password', { exact: true }).inputValue(), '');
  await shot(page, 'login-error');

  step('sign in');
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await onHome(page);
  assert.equal(await sessionStatus(page), 200);

  step('switch to the dev sandbox and back');
  await page.goto('/login');
  await page.getByRole('button', { name: 'Switch to dev' }).click();
  await onHome(page);
  assert.equal((await (await page.request.get('/auth/session')).json()).role, 'dev');
  await page.goto('/login');
  await page.getByRole('button', { name: 'Switch to live' }).click();
  await onHome(page);

  step('recover with a code');
  await page.goto('/recovery');
  await page.getByLabel('Username', { exact: true }).fill(user);
  await page.getByLabel('Recovery code').fill(codes[0]);
  await page.getByLabel('New password').fill(newPassword);
  await shot(page, 'recovery');
  await page.getByRole('button', { name: 'Set new password' }).click();
  await onHome(page);
  const who = await (await page.request.get('/auth/session')).json();
  assert.equal(who.user.username, user);

  step('a used code is refused');
  await page.goto('/recovery');
  await page.getByLabel('Username', { exact: true }).fill(user);
  await page.getByLabel('Recovery code').fill(codes[0]);
  await page.getByLabel('New password').fill('yet another passphrase');
  await page.getByRole('button', { name: 'Set new password' }).click();
  assert.match(await alertText(page), /Invalid username or password/);
  await shot(page, 'recovery-replayed');

  assert.deepEqual(problems, [], 'console errors (CSP violations?)');
  step('ok');
} finally {
  await close();
}
