// A hostile page served by a user's sandbox, in a real (headless) chromium signed in as
// that user. The page (hostile.html, put into the sandbox by the Go test) tries to act as
// the user on the control plane, reach another user's apps host, frame the control plane
// and plant cookies; this script judges what it got, then checks from outside that the
// browser still acts as the user, and only where it should. Run by internal/server's
// TestBrowserHostilePage, which sets:
//   BASE_URL     the control plane (http://127.0.0.1:PORT)
//   USERNAME, PASSWORD   the user to sign in as
//   HOSTILE_URL  where the page is (a path on the control plane: the browser must be sent
//                to an apps host for it)
//   OTHER_HOST   an apps host of the same user (dev entry point)
//   BOB_LIVE     another user's live entry point; BOB_SESSION that user's session
//   SANDBOX, PROTO  a sandbox of the user and the exec stream's subprotocol
// Exits non-zero naming every attempt that got through.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const step = (s) => console.log(`hostile.mjs: ${s}`);
const { context, close } = await launch(base, { width: 900, height: 700 });
const leaks = [];

try {
  const page = await context.newPage();
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/', { timeout: 60000 });
  step(`signed in, at ${page.url()}`);

  const params = new URLSearchParams({
    control: base, bob_live: env('BOB_LIVE'), bob_session: env('BOB_SESSION'),
    sandbox: env('SANDBOX'), proto: env('PROTO'),
  });
  await page.goto(env('HOSTILE_URL') + '?' + params);
  await page.waitForFunction(() => window.__done === true, null, { timeout: 90000 });
  const where = new URL(page.url());
  step(`the hostile page runs on ${where.origin}`);
  const results = await page.evaluate(() => window.__results);
  for (const [k, v] of Object.entries(results)) step(`  ${k}: ${v.replace(/\s+/g, ' ').slice(0, 160)}`);
  await screenshot(page, 'hostile');

  const judge = (name, leaked) => { if (leaked) leaks.push(`${name}: ${results[name]}`); };
  judge('read /auth/session (control plane)', /csrf_token/.test(results['read /auth/session (control plane)']));
  judge('read /auth/session (own origin)', /csrf_token/.test(results['read /auth/session (own origin)']));
  judge('list secrets (control plane)', /^200 /.test(results['list secrets (control plane)']));
  judge('list secrets (own origin)', /^200 \{"secrets"/.test(results['list secrets (own origin)']));
  for (const k of ['mint a token (control plane)', 'mint a token (own origin)', 'mint a token (control plane, no preflight)']) {
    judge(k, /^201 /.test(results[k]));
  }
  judge('read /console (control plane)', /csrf-token/.test(results['read /console (control plane)']));
  for (const k of ['change the password (control plane, no preflight)', 'change the password (control plane)']) {
    judge(k, /^204/.test(results[k]));
  }
  judge('frame /console', /^readable/.test(results['frame /console']));
  judge('WebSocket to the control plane', results['WebSocket to the control plane'] === 'opened');
  judge("read another user's apps host", /BOB-SECRET/.test(results["read another user's apps host"]));
  judge('frame /api/v1/me', /^readable/.test(results['frame /api/v1/me']));
  judge('frame /login', /^readable/.test(results['frame /login']));
  judge('document.cookie', /paddock_app=(?!tossed)/.test(results['document.cookie']));

  // Seen from the browser itself: no frame rendered anything of the control plane.
  for (const f of page.frames()) {
    if (f === page.mainFrame() || !f.url().startsWith(base)) continue;
    const text = await f.evaluate(() => document.body ? document.body.innerText : '').catch(() => '');
    if (text.trim() !== '') leaks.push(`the control plane's ${new URL(f.url()).pathname} rendered in a frame: ${text.slice(0, 80)}`);
  }

  // The browser still acts as this user on the control plane: no planted session won.
  const me = await page.goto(base + '/api/v1/me');
  const who = JSON.parse(await me.text());
  if (who.username !== env('USERNAME')) leaks.push(`after the page, the control plane sees ${who.username}`);
  const sessions = (await context.cookies(base)).filter((c) => /paddock_session/.test(c.name));
  if (sessions.length !== 1) leaks.push(`cookies for the control plane: ${JSON.stringify(sessions.map((c) => c.name + '@' + c.path))}`);
  const role = (await context.cookies(base)).find((c) => /paddock_role/.test(c.name));
  if (role && role.value === 'dev') leaks.push('the page set the role cookie of the control plane');

  // Another user's host does not open for this user, even by navigation.
  const bob = await page.goto(env('BOB_LIVE') + '/bob-secret.txt');
  const bobText = await bob.text();
  if (bob.status() !== 404 || /BOB-SECRET/.test(bobText)) leaks.push(`another user's host answered ${bob.status()}: ${bobText.slice(0, 80)}`);

  // The user's other host still works, tossed cookies and all.
  const other = await page.goto(env('OTHER_HOST') + '/');
  if (other.status() !== 200) leaks.push(`the user's other host answered ${other.status()} after the page tossed cookies`);

  step(leaks.length ? `LEAKS:\n  ${leaks.join('\n  ')}` : 'every attempt failed');
  assert.deepEqual(leaks, []);
} finally {
  await close();
}
