// The vibecoding loop in a real browser: the user's dev sandbox serves a Vite + React app
// through paddock's proxy; an agent changes the theme (a CSS variable) through the file
// API, and the page takes it by Vite's HMR over the proxied WebSocket without a reload (a
// marker on window and the React state survive); the undo API (what `paddock undo` calls)
// brings the old theme back the same way, without restarting the dev server. When the dev
// server has crashed, undo starts it again.
// Run by internal/server's TestBrowserVibecoding, which sets BASE_URL, USERNAME, PASSWORD,
// TOKEN, SANDBOX (the dev sandbox), THEME_PATH and NEW_THEME.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const base = env('BASE_URL');
const step = (s) => console.log(`vibe.mjs: ${s}`);
const api = async (method, path, body, type = 'application/octet-stream') => {
  const res = await fetch(base + path, { method, body, headers: { Authorization: `Bearer ${env('TOKEN')}`, 'Content-Type': type } });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
};
const accent = (page) => page.evaluate(() => getComputedStyle(document.querySelector('h1')).color);

const { context, close } = await launch(base, { width: 900, height: 700 });
try {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/', { timeout: 60000 });
  await page.goto('/login');
  await page.getByRole('button', { name: /switch to dev/i }).click();
  // / is the dev desktop now; the app is on the dev apps host.
  await page.waitForURL((u) => /^desktop-/.test(u.hostname), { timeout: 60000 });
  const me = await (await page.request.get(base + '/auth/session')).json();
  await page.goto(`http://dev-${me.user.id}.localhost:${new URL(base).port}/`);
  await page.waitForURL((u) => /^dev-/.test(u.hostname), { timeout: 60000 });
  await page.getByRole('heading', { name: 'my-site' }).waitFor({ timeout: 60000 });
  step(`the Vite app is served on ${new URL(page.url()).origin}`);
  // HMR's WebSocket is connected through the proxy once Vite's client says so.
  await page.waitForFunction(() => performance.getEntriesByType('resource').some((r) => r.name.includes('/@vite/client')), null, { timeout: 30000 });

  await page.evaluate(() => { window.__marker = 'kept'; });
  await page.getByRole('button', { name: /count is 0/ }).click();
  await page.getByRole('button', { name: 'count is 1' }).waitFor();
  const before = await accent(page);
  assert.equal(before, 'rgb(37, 99, 235)');
  await screenshot(page, 'vibe-before');

  await api('PUT', `/api/v1/sandboxes/${env('SANDBOX')}/files/content?path=${env('THEME_PATH')}`, env('NEW_THEME'));
  await page.waitForFunction(() => getComputedStyle(document.querySelector('h1')).color === 'rgb(220, 38, 38)', null, { timeout: 30000 });
  assert.equal(await page.evaluate(() => window.__marker), 'kept', 'the page reloaded instead of taking the change by HMR');
  await page.getByRole('button', { name: 'count is 1' }).waitFor({ timeout: 1000 });
  step('the new theme arrived by HMR; the page kept its state');
  await screenshot(page, 'vibe-changed');

  const undo = await api('POST', `/api/v1/sandboxes/${env('SANDBOX')}/history/undo`);
  assert.equal(undo.app_restarted, false, `undo restarted the dev server: ${JSON.stringify(undo)}`);
  await page.waitForFunction((c) => getComputedStyle(document.querySelector('h1')).color === c, before, { timeout: 30000 });
  assert.equal(await page.evaluate(() => window.__marker), 'kept', 'undo reloaded the page');
  await page.getByRole('button', { name: 'count is 1' }).waitFor({ timeout: 1000 });
  step('undo brought the old theme back by HMR, the dev server not restarted');
  await screenshot(page, 'vibe-undone');

  // The dev server crashes: undo still works, starting it again, and the page served
  // after it has the old theme. (The page is reloaded by hand: Vite's client, told by the
  // proxy that its socket's app is gone, reloads as soon as anything answers, which can be
  // the proxy's page for an app not listening yet.)
  await api('PUT', `/api/v1/sandboxes/${env('SANDBOX')}/files/content?path=${env('THEME_PATH')}`, env('NEW_THEME'));
  await page.waitForFunction(() => getComputedStyle(document.querySelector('h1')).color === 'rgb(220, 38, 38)', null, { timeout: 30000 });
  const appPath = `/api/v1/sandboxes/${env('SANDBOX')}/app`;
  const beforeCrash = await api('GET', appPath);
  const kill = await api('POST', `/api/v1/sandboxes/${env('SANDBOX')}/exec`, JSON.stringify({ argv: ['pkill', '-KILL', '-f', 'node_modules/.bin/vite'] }), 'application/json');
  assert.equal(kill.exit_code, 0, `pkill: ${JSON.stringify(kill)}`);
  // The supervisor notices the crash when the app's process group is gone; until then it
  // reports the dead server as running. Wait for that, as a person would see it in the app's state.
  let crashed;
  for (let i = 0; ; i++) {
    crashed = await api('GET', appPath);
    if (crashed.state !== 'running' || crashed.restarts > beforeCrash.restarts) break;
    assert.ok(i < 300, `the supervisor never saw the crash: ${JSON.stringify(crashed)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const undo2 = await api('POST', `/api/v1/sandboxes/${env('SANDBOX')}/history/undo`);
  // Either undo started the dev server again, or the supervisor already had (its first
  // backoff is short) and the running server takes the restored files by itself.
  const after = await api('GET', appPath);
  assert.ok(undo2.app_restarted || after.restarts > beforeCrash.restarts,
    `after the crash, nothing started the dev server again: undo ${JSON.stringify(undo2)}, app ${JSON.stringify(after)}`);
  // The proxy answers 502 until the restarted server listens: reload until it does.
  for (let i = 0; ; i++) {
    // The proxy's answer for an app not answering refreshes itself (Refresh: 2); a reload
    // that meets that refresh is aborted, and the next round tries again.
    await page.reload().catch((e) => step(`reload: ${String(e).split('\n')[0]}`));
    try {
      await page.getByRole('heading', { name: 'my-site' }).waitFor({ timeout: 2000 });
      break;
    } catch (e) {
      if (i === 30) {
        step(`app: ${JSON.stringify(await api('GET', `/api/v1/sandboxes/${env('SANDBOX')}/app`))}`);
        step(`page: ${(await page.content()).slice(0, 400)}`);
        throw e;
      }
    }
  }
  assert.equal(await accent(page), before);
  step('after a crash of the dev server, undo started it again with the old theme');
  await screenshot(page, 'vibe-reconnected');
  assert.deepEqual(errors, []);
  console.log('vibe=ok');
} finally {
  await close();
}
