// The desktop's controls that desktop.mjs does not click, in a real browser:
//   files     a binary file opens as binary (not shown), a file over 2 MiB opens
//             read-only and one over 16 MiB not at all, each saying why
//   timeline  Checkpoint now (a change made in the terminal), Undo, Redo and Restore
//             selected, each checked on disk
//   preview   Logs shows the running app's output (a request just made), then the ended
//             run's after Restart app, which restarts the app alone (the terminal's shell
//             lives on) and the frame loads again on the app's host directly; a frame that
//             lost its cookie comes back through the handoff; Restart sandbox brings the
//             app back
//   keyboard  Alt+<n> and the arrow keys switch panes; every control in sight has a name
//   hung      the app stops answering and ignores SIGTERM: undo still works, the app
//             restarts and the preview shows the restored page by itself
// Run by internal/server's TestBrowserDesktopPanes, which sets BASE_URL, USERNAME,
// PASSWORD and SANDBOX (and SCREENSHOT_DIR); its app hangs while /workspace/hang exists.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const sandbox = env('SANDBOX');
const t0 = Date.now();
const step = (s) => console.log(`desktop-panes.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });
const long = { timeout: 60000 };

const statusIs = (page, re) => page.locator('#status').filter({ hasText: re }).waitFor({ timeout: 30000 });

let page;
try {
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept(page.__answer ?? ''));
  const answer = (v) => { page.__answer = v; };
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, long);
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });
  // put writes a file through the API, the bytes made in the page.
  const put = (path, kind, size) => page.evaluate(async ({ sb, path, kind, size }) => {
    const body = kind === 'binary' ? new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 0, 1, 2]) : 'a line of text\n'.repeat(Math.ceil(size / 15));
    const r = await fetch(`/api/v1/sandboxes/${sb}/files/content?path=${path}`, { method: 'PUT', body });
    return r.status;
  }, { sb: sandbox, path, kind, size });
  const read = (path) => page.evaluate(async ({ sb, path }) => {
    const r = await fetch(`/api/v1/sandboxes/${sb}/files/content?path=${path}`);
    return r.status === 200 ? r.text() : `status ${r.status}`;
  }, { sb: sandbox, path });
  step('on the desktop');

  // Keyboard: Alt+<n> picks a pane, the arrow keys move between the pane tabs; every
  // control in sight has a name a screen reader can say.
  const selected = () => page.locator('[aria-label="Desktop panes"] [role=tab][aria-selected=true]').textContent();
  await page.keyboard.press('Alt+3');
  assert.equal(await selected(), 'Timeline');
  await page.keyboard.press('ArrowRight');
  assert.equal(await selected(), 'Preview');
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowLeft');
  assert.equal(await selected(), 'Terminal');
  await page.keyboard.press('Alt+1');
  assert.equal(await selected(), 'Files');
  assert.ok(await page.locator('#pane-files').isVisible());
  const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, input, select, textarea, a[href]')]
    .filter((el) => el.getClientRects().length)
    .filter((el) => !(el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || el.textContent.trim() || el.title || el.labels?.length))
    .map((el) => el.outerHTML.slice(0, 80)));
  assert.deepEqual(unnamed, [], 'controls without a name');
  step('keyboard: Alt+n and the arrow keys switch panes; every control has a name');

  // Files: binary, large (read-only) and too large, each saying why.
  assert.equal(await put('logo.png', 'binary'), 200);
  assert.equal(await put('big.txt', 'text', 3 << 20), 200);
  assert.equal(await put('huge.txt', 'text', 17 << 20), 200);
  await page.getByRole('tab', { name: 'Files' }).click();
  await page.locator('#refresh').click();
  const open = async (name) => {
    await page.locator(`.tree [data-path="${name}"]`).click();
    await page.locator('#file-title').filter({ hasText: name }).waitFor();
  };
  const notice = page.locator('#editor-notice');
  const editable = () => page.locator('#editor .cm-content').getAttribute('contenteditable');
  await open('logo.png');
  await notice.filter({ hasText: /logo\.png is a binary file .*not shown/ }).waitFor();
  assert.equal(await editable(), 'false', 'a binary file is editable');
  assert.doesNotMatch(await page.locator('#editor .cm-content').innerText(), /PNG/);
  await open('big.txt');
  await notice.filter({ hasText: /Read-only: big\.txt is 3(\.0)? MiB, over the editor's 2(\.0)? MiB/ }).waitFor();
  assert.equal(await editable(), 'false', 'a file over 2 MiB is editable');
  assert.match(await page.locator('#editor .cm-content').innerText(), /a line of text/);
  await open('huge.txt');
  await notice.filter({ hasText: /huge\.txt is 17(\.0)? MiB: too large to open here/ }).waitFor();
  assert.equal(await editable(), 'false', 'a file over 16 MiB is editable');
  await screenshot(page, 'desktop-files-large');
  step(`binary, read-only and too large: ${await notice.textContent()}`);

  // Timeline: a change made in the terminal, recorded by Checkpoint now.
  answer('a.txt');
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'a.txt' }).waitFor();
  await page.locator('#editor .cm-content').click();
  await page.keyboard.insertText('one\n');
  await page.keyboard.press('Control+S');
  await statusIs(page, /Saved a.txt/);
  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.locator('#term-1 .xterm-rows').waitFor();
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo two > /workspace/a.txt; echo "wrote-$((1+1))"\n');
  await page.locator('#term-1 .xterm-rows').getByText('wrote-2').first().waitFor({ timeout: 30000 });
  await page.getByRole('tab', { name: 'Timeline' }).click();
  answer('by hand');
  await page.getByRole('button', { name: 'Checkpoint now' }).click();
  // The agent's watcher records a change once the workspace has been still for half a
  // second: on a slow machine it has recorded the terminal's write before the click, and
  // Checkpoint now finds nothing left to record. Either way the write is the current
  // checkpoint, which the undo below takes back.
  await statusIs(page, /Checkpoint \w+ recorded|Nothing changed since the last checkpoint/);
  if (/recorded/.test(await page.locator('#status').textContent())) {
    await page.locator('#checkpoints .cp.current').filter({ hasText: 'by hand' }).waitFor();
    step('Checkpoint now recorded the terminal\'s change');
  } else {
    await page.locator('#checkpoints .cp.current').filter({ hasText: 'watcher' }).waitFor();
    step('the watcher had recorded the terminal\'s change before Checkpoint now');
  }
  // Undo, Redo, Restore selected.
  await page.locator('#undo').click();
  await statusIs(page, /Undo done/);
  assert.equal(await read('a.txt'), 'one\n');
  await page.locator('#redo').click();
  await statusIs(page, /Redo done/);
  assert.equal(await read('a.txt'), 'two\n');
  await page.locator('#checkpoints .cp').filter({ hasText: 'write logo.png' }).first().click();
  await page.locator('#diff').getByText('logo.png').first().waitFor();
  await page.getByRole('button', { name: 'Restore selected' }).click();
  await statusIs(page, /Restore done/);
  assert.match(await read('a.txt'), /^status 404$/, 'a.txt is still there after restoring a checkpoint before it');
  assert.equal(await read('logo.png').then((s) => s.length), 8);
  await page.locator('#undo').click();
  await statusIs(page, /Undo done/);
  assert.equal(await read('a.txt'), 'two\n');
  await screenshot(page, 'desktop-timeline-buttons');
  step('undo, redo, restore selected and undo of the restore, each on disk');

  // Preview: the app's state, its logs, and Restart.
  await page.evaluate(async (sb) => fetch(`/api/v1/sandboxes/${sb}/files/content?path=index.html`, { method: 'PUT', body: '<h1>the page</h1>\n' }), sandbox);
  await page.getByRole('tab', { name: 'Preview' }).click();
  const frame = page.frameLocator('#preview');
  await frame.getByText('the page').waitFor(long);
  await page.locator('#app-state').filter({ hasText: 'app: running' }).waitFor(long);
  // Logs: the running app's output holds a request made now (the app logs each one).
  await page.getByRole('button', { name: 'Logs', exact: true }).click();
  await page.locator('#app-output').waitFor({ state: 'visible' });
  const mark = `logmark${Date.now()}`;
  const appFrame = page.frames().find((f) => new URL(f.url()).hostname.startsWith('app-'));
  assert.ok(appFrame, `no frame on the app's host: ${page.frames().map((f) => f.url())}`);
  await appFrame.evaluate((m) => fetch(`/${m}`).then((r) => r.status), mark);
  await page.getByRole('button', { name: 'Refresh logs' }).click();
  const served = `served /${mark}`;
  await page.locator('#app-output-current').filter({ hasText: served }).waitFor({ timeout: 30000 });
  await screenshot(page, 'preview-logs');
  step(`logs of the running app: ${await page.locator('#app-output-current').textContent()}`);
  // Restart app: the app starts again, the terminal's shell keeps running; the run that
  // ended is the last run's output in Logs.
  const restarts = () => page.evaluate(async (sb) => (await (await fetch(`/api/v1/sandboxes/${sb}/app`)).json()).restarts, sandbox);
  const before = await restarts();
  // The frame's navigations: after its first load, it loads again on the app's host
  // directly, not through the desktop's handoff.
  const navs = [];
  page.on('request', (r) => { if (r.isNavigationRequest() && r.frame() !== page.mainFrame()) navs.push(new URL(r.url())); });
  const appHost = `app-${sandbox}.localhost`;
  const frameLoaded = (host, path) => page.waitForRequest((r) => r.isNavigationRequest() && r.frame() !== page.mainFrame() &&
    new URL(r.url()).hostname === host && new URL(r.url()).pathname === path, long);
  let direct = frameLoaded(appHost, '/');
  await page.getByRole('button', { name: 'Restart app' }).click();
  await statusIs(page, /The app restarted/);
  await page.waitForFunction(async ({ sb, n }) => (await (await fetch(`/api/v1/sandboxes/${sb}/app`)).json()).restarts > n, { sb: sandbox, n: before }, { timeout: 30000, polling: 250 });
  await page.locator('#app-output-last').filter({ hasText: served }).waitFor({ timeout: 30000 });
  await page.getByRole('button', { name: 'Logs', exact: true }).click();
  await page.locator('#app-output').waitFor({ state: 'hidden' });
  await direct;
  await frame.getByText('the page').waitFor(long);
  // (A load that finds the app not listening yet loads again by itself, on the same URL.)
  assert.deepEqual([...new Set(navs.map((u) => u.hostname + u.pathname))], [appHost + '/'], 'the frame reloaded other than directly');
  step('Restart app: the frame loaded the app again directly');
  // A frame that lost its app-host cookie is told so by the host and goes through the
  // desktop's handoff.
  await context.clearCookies({ domain: appHost });
  navs.length = 0;
  direct = frameLoaded(appHost, '/');
  const handoff = frameLoaded(new URL(page.url()).hostname, '/desktop/preview');
  await page.getByRole('button', { name: 'Reload' }).click();
  await direct;
  await handoff;
  await frame.getByText('the page').waitFor(long);
  step(`a frame without its cookie came back through the handoff: ${navs.map((u) => u.host + u.pathname).join(' → ')}`);
  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo "still-$((2+2))"\n');
  await page.locator('#term-1 .xterm-rows').getByText('still-4').first().waitFor({ timeout: 30000 });
  await page.getByRole('tab', { name: 'Preview' }).click();
  step('Restart app restarted the app alone: the terminal kept its shell');
  await page.getByRole('button', { name: 'Restart sandbox' }).click();
  await statusIs(page, /The sandbox restarted/);
  await frame.getByText('the page').waitFor(long);
  await page.locator('#app-state').filter({ hasText: 'app: running' }).waitFor(long);
  step('logs shown and hidden; the sandbox restarted and the preview came back');

  // Hung: the app stops answering and ignores SIGTERM. Undo works, the app restarts,
  // the preview shows the restored page by itself.
  await page.getByRole('tab', { name: 'Files' }).click();
  answer('hang');
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'hang' }).waitFor();
  await page.getByRole('tab', { name: 'Preview' }).click();
  // The app, opened in a tab of its own, finds it hung: no answer in 5 s. The desktop's
  // API still answers.
  const tab = await context.newPage();
  const opened = await tab.goto(`${new URL(page.url()).origin}/desktop/preview`, { timeout: 5000 }).then(() => 'answered', (e) => e.name);
  await tab.close();
  assert.equal(opened, 'TimeoutError', 'the app answered: it is not hung');
  const api = await page.evaluate(async (sb) => {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 5000);
    try { return (await fetch(`/api/v1/sandboxes/${sb}/app`, { signal: ctl.signal })).status; } catch (e) { return e.name; }
  }, sandbox);
  assert.equal(api, 200, 'the desktop API waits on the hung app');
  await page.getByRole('tab', { name: 'Timeline' }).click();
  await page.locator('#undo').click();
  await statusIs(page, /Undo done/);
  assert.match(await read('hang'), /^status 404$/);
  await page.getByRole('tab', { name: 'Preview' }).click();
  await frame.getByText('the page').waitFor(long);
  await page.locator('#app-state').filter({ hasText: 'app: running' }).waitFor(long);
  await screenshot(page, 'desktop-preview-after-hang');
  step('undo while the app hung: the app restarted and the preview shows the page');

  assert.deepEqual(errors, []);
  step('done');
} catch (e) {
  if (page) {
    await screenshot(page, 'desktop-panes-failure').catch(() => {});
    step(`status: ${await page.locator('#status').textContent().catch(() => '?')}`);
  }
  throw e;
} finally {
  await close();
}
