// The console (/console) end to end in a real (headless) chromium: each section driven
// the way a person uses it, bad input included, and a screenshot of each. Run by
// internal/server's TestBrowserConsole through internal/browsertest, which sets:
//   BASE_URL        the control plane
//   USERNAME, PASSWORD          a user whose live and dev sandboxes are running
//   ADMIN_USERNAME, ADMIN_PASSWORD  an admin
//   SCREENSHOT_DIR  where to write screenshots
// It prints lines the Go test checks (live=, dev=, promoted_live=, token_prefix=).
// Exits non-zero, with the reason, at the first thing that is not as expected.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const base = process.env.BASE_URL;
if (!base) throw new Error('BASE_URL is not set');
const user = process.env.USERNAME;
const password = process.env.PASSWORD;
const admin = process.env.ADMIN_USERNAME;
const adminPassword = process.env.ADMIN_PASSWORD;
const newPassword = 'a console chosen passphrase';
const secretValue = 'value-typed-into-the-console-42';

const step = (s) => console.log(`console.mjs: ${s}`);
const slow = { timeout: 90_000 }; // sandbox lifecycle under a loaded machine

const { context, close } = await launch(base, { width: 1280, height: 800 });
const problems = [];

function watch(page) {
  page.setDefaultTimeout(20_000);
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));
}

async function shot(page, name) {
  const file = await screenshot(page, name);
  if (file) step(`screenshot ${file}`);
}

async function signIn(page, name, pw) {
  await page.goto('/login');
  await page.getByLabel('Username', { exact: true }).fill(name);
  await page.getByLabel('Password', { exact: true }).fill(pw);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname !== '/login');
}

// section opens a console section by its nav link and waits for its data.
async function section(page, name, id) {
  await page.getByRole('navigation', { name: 'Console sections' }).getByRole('link', { name, exact: true }).click();
  // Shown and loaded change together in one task, so a stale "loaded" cannot pass.
  await page.locator(`#${id}:not([hidden])[data-loaded="true"]`).waitFor();
  assert.equal(await page.locator(`#${id}`).isVisible(), true);
}

async function formError(form) {
  const box = form.locator('[data-error]');
  await box.waitFor({ state: 'visible' });
  return (await box.textContent()).trim();
}

async function confirm(page, ok) {
  const d = page.locator('dialog#confirm');
  await d.waitFor({ state: 'visible' });
  if (ok) await d.getByRole('button', { name: /Delete|Revoke|Promote/ }).click();
  else await page.keyboard.press('Escape'); // keyboard: Escape cancels
  await d.waitFor({ state: 'hidden' });
}

async function focused(page) {
  return page.evaluate(() => document.activeElement && document.activeElement.id);
}

function row(page, table, text) {
  return page.locator(`${table} tbody tr`, { hasText: text });
}

try {
  const page = context.pages()[0] ?? (await context.newPage());
  watch(page);

  step(`sign in as ${user}`);
  await signIn(page, user, password);
  await page.goto('/console');
  await page.locator('#sandboxes[data-loaded="true"]').waitFor();
  assert.equal(await page.title(), 'Sandboxes · Console · paddock');

  // ---- Sandboxes
  step('sandboxes: live and dev are listed, each with a desktop link');
  const liveRow = row(page, '#sandbox-table', /\blive\b/);
  const devRow = row(page, '#sandbox-table', /\bdev\b/);
  await liveRow.waitFor();
  const live = await liveRow.getAttribute('data-id');
  const dev = await devRow.getAttribute('data-id');
  console.log(`live=${live}`);
  console.log(`dev=${dev}`);
  assert.match(await liveRow.textContent(), /running/);
  assert.equal(await liveRow.getByRole('link', { name: /Open the desktop/ }).getAttribute('href'), `/console/desktop/${live}`);

  step('sandboxes: a bad memory size is refused in the page, the form kept');
  const create = page.locator('#create-sandbox');
  await create.getByLabel('Name').fill('scratch');
  await create.getByLabel('Memory').fill('lots');
  await create.getByRole('button', { name: 'Create sandbox' }).click();
  assert.match(await formError(create), /memory/i);
  assert.equal(await create.getByLabel('Name').inputValue(), 'scratch');
  assert.equal(await create.getByLabel('Memory').inputValue(), 'lots');
  assert.equal(await focused(page), 'sb-memory', 'the cursor is in the field the message names');

  step('sandboxes: create scratch (256Mi)');
  await create.getByLabel('Memory').fill('256Mi');
  await create.getByRole('button', { name: 'Create sandbox' }).click();
  const scratch = row(page, '#sandbox-table', 'scratch');
  await scratch.waitFor(slow);
  assert.match(await scratch.textContent(), /256 MiB/);
  assert.equal(await create.getByLabel('Name').inputValue(), '', 'the form is cleared once the sandbox is made');

  step('sandboxes: stop, start, restart');
  await scratch.getByRole('button', { name: 'Stop scratch', exact: true }).click();
  await scratch.getByRole('button', { name: 'Start scratch', exact: true }).waitFor(slow);
  assert.match(await scratch.textContent(), /stopped/);
  await scratch.getByRole('button', { name: 'Start scratch', exact: true }).click();
  await scratch.getByRole('button', { name: 'Restart scratch', exact: true }).waitFor(slow);
  assert.match(await scratch.textContent(), /running/);
  await scratch.getByRole('button', { name: 'Restart scratch', exact: true }).click();
  await page.locator('#flash', { hasText: 'scratch: restart done' }).waitFor(slow);
  await shot(page, 'console-sandboxes');

  step('sandboxes: delete asks first; Escape keeps it, Delete removes it');
  await scratch.getByRole('button', { name: 'Delete scratch', exact: true }).click();
  await confirm(page, false);
  assert.equal(await scratch.count(), 1);
  await scratch.getByRole('button', { name: 'Delete scratch', exact: true }).click();
  await confirm(page, true);
  await scratch.waitFor({ state: 'detached', ...slow });

  // ---- Roles
  step('roles: looking at them starts nothing (dev stopped first)');
  await devRow.getByRole('button', { name: /^Stop / }).click();
  await devRow.getByRole('button', { name: /^Start / }).waitFor(slow);
  await section(page, 'Roles', 'roles');
  assert.match(await page.locator('#role-cards').textContent(), new RegExp(live));
  assert.match(await page.getByRole('article', { name: 'dev sandbox' }).textContent(), /stopped/);
  step('roles: promote swaps live and dev (and starts dev)');
  await shot(page, 'console-roles');
  await page.getByRole('button', { name: 'Promote dev to live' }).click();
  await confirm(page, true);
  await page.locator('#flash', { hasText: 'Promoted' }).waitFor(slow);
  // The old dev is live.
  await page.getByRole('article', { name: 'live sandbox' }).filter({ hasText: dev }).waitFor();
  console.log(`promoted_live=${dev}`);

  // ---- Secrets
  step('secrets: a bad name is refused naming it; the value typed is kept');
  await section(page, 'Secrets', 'secrets');
  const setSecret = page.locator('#set-secret');
  await setSecret.getByLabel('Name').fill('Bad Name!');
  await setSecret.getByLabel('Value').fill(secretValue);
  await setSecret.getByRole('button', { name: 'Save secret' }).click();
  assert.match(await formError(setSecret), /Bad Name!|name/);
  assert.equal(await setSecret.getByLabel('Value').inputValue(), secretValue);
  assert.equal(await setSecret.getByLabel('Name').inputValue(), 'Bad Name!');
  assert.equal(await focused(page), 'secret-name');

  step('secrets: save (keyboard: Enter in the name field), then a second version');
  await setSecret.getByLabel('Name').fill('api-key');
  await setSecret.getByLabel('Name').press('Enter');
  const apiKey = row(page, '#secret-table', 'api-key');
  await apiKey.waitFor();
  assert.match(await apiKey.locator('td').nth(1).textContent(), /^1$/);
  assert.equal(await setSecret.getByLabel('Value').inputValue(), '', 'the value is gone from the page once saved');
  assert.equal((await page.content()).includes(secretValue), false, 'the value is nowhere in the page');
  await setSecret.getByLabel('Name').fill('api-key');
  await setSecret.getByLabel('Value').fill(`${secretValue}-2`);
  await setSecret.getByRole('button', { name: 'Save secret' }).click();
  await page.locator('#flash', { hasText: 'version 2' }).waitFor();
  await apiKey.locator('td').nth(1).filter({ hasText: /^2$/ }).waitFor();
  await setSecret.getByLabel('Name').fill('db-url');
  await setSecret.getByLabel('Value').fill('postgres://example');
  await setSecret.getByRole('button', { name: 'Save secret' }).click();
  await row(page, '#secret-table', 'db-url').waitFor();
  await shot(page, 'console-secrets');
  assert.equal((await page.content()).includes(secretValue), false);

  step('secrets: delete asks first');
  await apiKey.getByRole('button', { name: 'Delete secret api-key' }).click();
  await confirm(page, true);
  await apiKey.waitFor({ state: 'detached' });

  // ---- API tokens
  step('tokens: a bad expiry is refused, the form kept');
  await section(page, 'API tokens', 'tokens');
  const mkToken = page.locator('#create-token');
  await mkToken.getByLabel('Name').fill('console-made');
  await mkToken.getByLabel('Expires in').fill('soon');
  await mkToken.getByRole('button', { name: 'Create token' }).click();
  assert.match(await formError(mkToken), /expires_in/);
  assert.equal(await mkToken.getByLabel('Name').inputValue(), 'console-made');

  step('tokens: create (read only, 24h): shown once, and it works');
  await mkToken.getByLabel('Expires in').fill('24h');
  await mkToken.getByLabel('write').uncheck();
  await mkToken.getByRole('button', { name: 'Create token' }).click();
  await page.locator('#new-token').waitFor({ state: 'visible' });
  const secret = (await page.locator('#new-token-value').textContent()).trim();
  assert.ok(secret.length > 20, `token shown: ${secret.length} characters`);
  const made = row(page, '#token-table', 'console-made');
  await made.waitFor();
  assert.match(await made.textContent(), /read/);
  assert.doesNotMatch(await made.textContent(), /write/);
  const prefix = (await made.locator('code').textContent()).trim();
  console.log(`token_prefix=${prefix}`);
  const asToken = await page.request.get('/api/v1/me', { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(asToken.status(), 200);
  await shot(page, 'console-tokens');
  step('tokens: the token is not shown again after leaving the section');
  await section(page, 'Secrets', 'secrets');
  await section(page, 'API tokens', 'tokens');
  assert.equal(await page.locator('#new-token').isVisible(), false);
  assert.equal((await page.content()).includes(secret), false);
  step('tokens: revoke');
  await made.getByRole('button', { name: 'Revoke token console-made' }).click();
  await confirm(page, true);
  await made.waitFor({ state: 'detached' });
  assert.equal((await page.request.get('/api/v1/me', { headers: { Authorization: `Bearer ${secret}` } })).status(), 401);

  // ---- Account
  step('account: a second browser signed in as the same user');
  const { context: other, close: closeOther } = await launch(base, { width: 1000, height: 700 });
  const otherPage = other.pages()[0] ?? (await other.newPage());
  watch(otherPage);
  await signIn(otherPage, user, password);
  assert.equal((await otherPage.request.get('/auth/session')).status(), 200);
  await otherPage.goto('/console');
  await otherPage.locator('#sandboxes:not([hidden])[data-loaded="true"]').waitFor();

  await section(page, 'Account', 'account');
  const change = page.locator('#change-password');
  step('account: wrong current password is named');
  await change.getByLabel('Current password').fill('not the password');
  await change.getByLabel('New password', { exact: true }).fill(newPassword);
  await change.getByLabel('New password again').fill(newPassword);
  await change.getByRole('button', { name: 'Change password' }).click();
  assert.match(await formError(change), /not your current password/i);
  assert.equal(await change.getByLabel('New password', { exact: true }).inputValue(), newPassword, 'the new password typed is kept');
  assert.equal(await focused(page), 'pw-current');
  step('account: a weak new password is refused by the server, naming the rule');
  await change.getByLabel('Current password').fill(password);
  await change.getByLabel('New password', { exact: true }).fill('password1234');
  await change.getByLabel('New password again').fill('password1234');
  await change.getByRole('button', { name: 'Change password' }).click();
  assert.match(await formError(change), /^new_password: password .*common/);
  step('account: mismatched confirmation is caught');
  await change.getByLabel('New password', { exact: true }).fill(newPassword);
  await change.getByLabel('New password again').fill(`${newPassword}x`);
  await change.getByRole('button', { name: 'Change password' }).click();
  assert.match(await formError(change), /differ/);
  step('account: change it; the other browser is signed out, this one is not');
  await change.getByLabel('New password again').fill(newPassword);
  await change.getByRole('button', { name: 'Change password' }).click();
  await page.locator('#flash', { hasText: 'Password changed' }).waitFor();
  assert.equal(await change.locator('[data-error]').isVisible(), false);
  assert.equal((await page.request.get('/auth/session')).status(), 200);
  assert.equal((await otherPage.request.get('/auth/session')).status(), 401);
  step('account: the other browser\'s console says its session ended');
  await section(otherPage, 'Secrets', 'secrets');
  assert.match(await otherPage.locator('#secret-table tbody').textContent(), /Your session has ended\. Sign in again/);
  await closeOther();

  step('account: new recovery codes need the password, and are shown once');
  const codes = page.locator('#recovery-codes');
  await codes.getByLabel('Current password').fill(password); // the old one: wrong now
  await codes.getByRole('button', { name: 'Make new recovery codes' }).click();
  assert.match(await formError(codes), /not your current password/i);
  await codes.getByLabel('Current password').fill(newPassword);
  await codes.getByRole('button', { name: 'Make new recovery codes' }).click();
  await page.locator('#new-codes').waitFor({ state: 'visible' });
  assert.equal(await page.locator('#new-codes li').count(), 10);
  await shot(page, 'console-account');

  // ---- Events
  step('events: newest first, paged');
  await section(page, 'Events', 'events');
  const firstAction = (await page.locator('#event-table tbody tr').first().locator('td').nth(1).textContent()).trim();
  assert.equal(firstAction, 'auth.recovery_codes.regenerate');
  const times = await page.locator('#event-table time').evaluateAll((ts) => ts.map((t) => Date.parse(t.getAttribute('datetime'))));
  // An event's place is when it was recorded, its time when its action began: an action
  // that takes a while (a sandbox's start) may be recorded after one that began later, so
  // neighbours may be out of time order by that long, never by more.
  for (let i = 1; i < times.length; i++) assert.ok(times[i - 1] + 2000 >= times[i], `events are newest first (${times[i - 1]} before ${times[i]})`);
  await shot(page, 'console-events');
  const older = page.getByRole('button', { name: 'Older' });
  assert.equal(await older.isEnabled(), true, 'more than one page of events');
  const firstRows = await page.locator('#event-table tbody').textContent();
  await older.click();
  await page.getByRole('button', { name: 'Newest' }).waitFor({ state: 'visible' });
  await page.waitForFunction(() => !document.querySelector('#events-newest').disabled);
  assert.notEqual(await page.locator('#event-table tbody').textContent(), firstRows);
  await page.getByRole('button', { name: 'Newest' }).click();
  await page.waitForFunction(() => document.querySelector('#events-newest').disabled);

  step('narrow window: the sandboxes section still fits');
  await page.setViewportSize({ width: 390, height: 800 });
  await section(page, 'Sandboxes', 'sandboxes');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(overflow <= 1, `page scrolls sideways by ${overflow}px`);
  await shot(page, 'console-narrow');
  await page.setViewportSize({ width: 1280, height: 800 });

  step('a plain user has no admin section');
  assert.equal(await page.getByRole('link', { name: 'Admin' }).count(), 0);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL('**/login');

  // ---- Admin
  step(`admin: sign in as ${admin}`);
  await signIn(page, admin, adminPassword);
  await page.goto('/console#admin');
  await page.locator('#admin[data-loaded="true"]').waitFor();
  assert.match(await page.locator('#user-table').textContent(), new RegExp(user));
  assert.match(await page.locator('#all-sandbox-table').textContent(), new RegExp(user));
  const mkInvite = page.locator('#create-invite');
  await mkInvite.getByLabel('Expires in').fill('forever');
  await mkInvite.getByRole('button', { name: 'Create invite' }).click();
  assert.match(await formError(mkInvite), /expires_in/);
  await mkInvite.getByLabel('Expires in').fill('48h');
  await mkInvite.getByRole('button', { name: 'Create invite' }).click();
  await page.locator('#new-invite').waitFor({ state: 'visible' });
  const invite = page.locator('#invite-table tbody tr', { hasText: 'open' });
  await invite.waitFor();
  await shot(page, 'console-admin');
  await invite.getByRole('button', { name: /Revoke invite/ }).click();
  await page.locator('#invite-table tbody tr', { hasText: 'revoked' }).waitFor();

  assert.deepEqual(problems, [], 'no script errors or CSP violations');
  step('ok');
} finally {
  await close();
}
