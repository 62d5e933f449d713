// The desktop in a real browser: sign in, land on the live sandbox's desktop (served by
// its agent on desktop-<sandbox>), then each pane as a person uses it:
//   files     create index.html, edit it in the editor, save (If-Match); a change made on
//             disk meanwhile makes the next save a conflict, shown, never overwritten
//   terminal  a shell on a PTY echoes a command
//   preview   the app (on app-<sandbox>) shows the saved file
//   timeline  a checkpoint's line diff (binary files say so); undo brings the previous
//             version back, and the preview shows it by itself
//   crash     a file that makes the app crash-loop: the preview says so (exit code, last
//             output), and undo, which works while the app is down, brings it back
//   hostile   a page on the app's host cannot drive the desktop's API
// Run by internal/server's TestBrowserDesktop, which sets BASE_URL, USERNAME, PASSWORD,
// SANDBOX (the live sandbox's ID), SHOTS (where screenshots go) and DOC_SHOT (where to
// copy the files pane's, with a save conflict, for docs/; optional).
import assert from 'node:assert/strict';
import { copyFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { launch } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const sandbox = env('SANDBOX');
const shots = env('SHOTS');
await mkdir(shots, { recursive: true });
const t0 = Date.now();
const step = (s) => console.log(`desktop.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });

async function shot(page, name) {
  const file = path.join(shots, `${name}.png`);
  await page.screenshot({ path: file });
  step(`screenshot ${file}`);
  return file;
}

// typeInEditor replaces the editor's text.
async function setEditor(page, text) {
  const content = page.locator('#editor .cm-content');
  await content.click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(text);
}

const statusIs = (page, re) => page.locator('#status').filter({ hasText: re }).waitFor({ timeout: 30000 });

let page;
try {
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept(page.__answer ?? ''));
  page.on('framenavigated', (f) => { if (f !== page.mainFrame()) step(`frame → ${f.url()}`); });
  page.on('requestfinished', (r) => { if (r.frame() !== page.mainFrame()) r.response().then((x) => step(`frame request ${r.url()} → ${x?.status()}`)).catch(() => {}); });
  page.on('requestfailed', (r) => { if (r.frame() !== page.mainFrame()) step(`frame request ${r.url()} failed: ${r.failure()?.errorText}`); });
  const answer = (v) => { page.__answer = v; };

  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  // Signing in lands on the live desktop; GET /desktop on the control plane goes there too.
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  await page.goto(`${base}/desktop`);
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  const desk = new URL(page.url()).origin;
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor();
  step(`on the desktop ${desk}`);

  // Files: a new file, edited and saved.
  await page.getByRole('tab', { name: 'Files' }).click();
  answer('index.html');
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'index.html' }).waitFor();
  await setEditor(page, '<h1>version one</h1>\n');
  await page.keyboard.press('Control+S');
  await statusIs(page, /Saved index.html/);
  await setEditor(page, '<h1>version two</h1>\n');
  await page.getByRole('button', { name: 'Save' }).click();
  await statusIs(page, /Saved index.html/);
  // The editor highlights HTML.
  assert.ok(await page.locator('#editor .cm-content span').count() > 0, 'no syntax highlighting in the editor');
  await shot(page, 'files');
  step('saved index.html twice');

  // A change on disk behind the editor's back: the next save is refused and shown.
  const put = await page.evaluate(async (sb) => {
    const r = await fetch(`/api/v1/sandboxes/${sb}/files/content?path=index.html`, { method: 'PUT', body: '<h1>changed on disk</h1>\n' });
    return r.status;
  }, sandbox);
  assert.equal(put, 200);
  await setEditor(page, '<h1>version three</h1>\n');
  await page.keyboard.press('Control+S');
  await page.locator('#conflict').getByText('changed on disk since you opened it').waitFor();
  await page.locator('#merge').getByText('changed on disk').first().waitFor();
  await statusIs(page, /Not saved: .*changed since it was read/);
  const conflictShot = await shot(page, 'files-conflict');
  if (process.env.DOC_SHOT) await copyFile(conflictShot, process.env.DOC_SHOT);
  const onDisk = await page.evaluate(async (sb) => (await fetch(`/api/v1/sandboxes/${sb}/files/content?path=index.html`)).text(), sandbox);
  assert.equal(onDisk, '<h1>changed on disk</h1>\n', 'a stale save overwrote the change on disk');
  await page.getByRole('button', { name: "Take the disk's version" }).click();
  await page.locator('#conflict').waitFor({ state: 'hidden' });
  await setEditor(page, '<h1>version two</h1>\n');
  await page.keyboard.press('Control+S');
  await statusIs(page, /Saved index.html/);
  step('a stale save was refused with a conflict view, then resolved');

  // Terminal: a shell on a PTY.
  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.locator('#term-1 .xterm-rows').waitFor();
  await page.waitForTimeout(300); // the shell's prompt; the command is typed either way
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo "answer-$((6*7))"\n');
  await page.locator('#term-1 .xterm-rows').getByText('answer-42').first().waitFor({ timeout: 30000 });
  step('the terminal echoed');
  // A dropped connection reattaches to the same shell, its screen kept.
  await page.keyboard.type('S=kept-$((3*3))\n');
  await page.evaluate(() => window.paddockDesktop.terminal.current.ws.close());
  await page.locator('#term-1 .xterm-rows').getByText('reconnecting').first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => window.paddockDesktop.terminal.current.ws.readyState === 1, null, { timeout: 30000 });
  await page.keyboard.type('echo "same shell: $S"\n');
  await page.locator('#term-1 .xterm-rows').getByText('same shell: kept-9').first().waitFor({ timeout: 30000 });
  assert.equal(await page.locator('#term-1 .xterm-rows').getByText('answer-42').count() > 0, true, 'the scrollback was lost');
  // A second tab is a second shell.
  await page.getByRole('button', { name: 'New terminal' }).click();
  await page.locator('#term-2 .xterm-rows').waitFor();
  await page.keyboard.type('echo "tab two: ${S:-unset}"\n');
  await page.locator('#term-2 .xterm-rows').getByText('tab two: unset').first().waitFor({ timeout: 30000 });
  await page.locator('#term-tab-1').click();
  // The PTY has the terminal's size, and follows a resize of the window.
  await page.setViewportSize({ width: 900, height: 600 });
  await page.waitForFunction(() => window.paddockDesktop.terminal.current.term.cols < 120, null, { timeout: 30000 });
  const size = await page.evaluate(() => { const t = window.paddockDesktop.terminal.current.term; return `${t.rows} ${t.cols}`; });
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo "size=$(stty size)"\n');
  await page.locator('#term-1 .xterm-rows').getByText(`size=${size}`).first().waitFor({ timeout: 30000 });
  await page.setViewportSize({ width: 1280, height: 800 });
  // A large paste arrives whole (the page sends it in pieces under the stream's limit).
  await page.keyboard.type('cat > /tmp/paste\n');
  // Once cat reads the terminal, the shell has left bracketed-paste mode.
  await page.waitForFunction(() => !window.paddockDesktop.terminal.current.term.modes.bracketedPasteMode, null, { timeout: 30000 });
  await page.evaluate(() => window.paddockDesktop.terminal.current.term.paste(('x'.repeat(99) + '\n').repeat(2000)));
  await page.keyboard.press('Control+D');
  await page.keyboard.type('echo "pasted=$(wc -c < /tmp/paste)"\n');
  await page.locator('#term-1 .xterm-rows').getByText('pasted=200000').first().waitFor({ timeout: 60000 });
  await page.keyboard.type('clear\n');
  await shot(page, 'terminal');
  step('the terminal reattached after a drop; a second tab has its own shell; the PTY follows a resize; a 200 kB paste arrives whole');

  // Preview: the app serves the saved file.
  await page.getByRole('tab', { name: 'Preview' }).click();
  const frame = page.frameLocator('#preview');
  await frame.getByText('version two').waitFor({ timeout: 60000 });
  await page.locator('#app-state').filter({ hasText: 'app: running' }).waitFor({ timeout: 30000 });
  await shot(page, 'preview');
  step('the preview shows version two');

  // Timeline: undo goes back to the save before, and the preview follows by itself.
  await page.getByRole('tab', { name: 'Timeline' }).click();
  await page.locator('#checkpoints .cp').first().waitFor();
  await page.locator('#checkpoints .cp').first().click();
  await page.locator('#diff li').getByText('index.html').waitFor();
  // The checkpoint's line diff: the disk's version out, version two in.
  const lineDiff = page.locator('#diff .file-diff[data-path="index.html"] .udiff');
  await lineDiff.locator('.del').filter({ hasText: '-<h1>changed on disk</h1>' }).waitFor();
  await lineDiff.locator('.add').filter({ hasText: '+<h1>version two</h1>' }).waitFor();
  assert.match(await lineDiff.locator('.hunk').first().innerText(), /^@@ -1 \+1 @@/);
  await shot(page, 'timeline');
  await page.locator('#undo').click();
  await statusIs(page, /Undo done/);
  await page.getByRole('tab', { name: 'Preview' }).click();
  await frame.getByText('changed on disk').waitFor({ timeout: 60000 });
  step('undo restored the disk version, and the preview shows it');

  // Crash: a file that makes the app exit 3 at once, start after start.
  await page.getByRole('tab', { name: 'Files' }).click();
  answer('crash');
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'crash' }).waitFor();
  await page.getByRole('tab', { name: 'Preview' }).click();
  await page.getByRole('button', { name: 'Reload' }).click(); // a request makes it look
  await page.locator('#app-state').filter({ hasText: /backoff.*code 3/ }).waitFor({ timeout: 60000 });
  await page.locator('#app-output').filter({ hasText: 'crashing on purpose' }).waitFor({ timeout: 30000 });
  await page.getByRole('button', { name: 'Reload' }).click();
  await frame.getByText('not answering').waitFor({ timeout: 30000 });
  await shot(page, 'preview-crashed');
  step('the preview shows the crash-looping app');
  await page.getByRole('tab', { name: 'Timeline' }).click();
  await page.locator('#undo').click();
  await statusIs(page, /Undo done/);
  await page.getByRole('tab', { name: 'Preview' }).click();
  await page.locator('#app-state').filter({ hasText: 'app: running' }).waitFor({ timeout: 60000 });
  await frame.getByText('changed on disk').waitFor({ timeout: 60000 });
  await shot(page, 'desktop');
  step('undo while the app crash-looped brought it back');

  // The tree's other actions: a folder, an upload into it, a download, a rename, a delete.
  await page.getByRole('tab', { name: 'Files' }).click();
  answer('src');
  await page.getByRole('button', { name: 'New folder' }).click();
  await page.locator('.tree [data-path="src"]').waitFor();
  await page.locator('#upload + input[type=file], .toolbar input[type=file]').setInputFiles({ name: 'up.txt', mimeType: 'text/plain', buffer: Buffer.from('uploaded\n') });
  await statusIs(page, /Uploaded src\/up.txt/);
  await page.locator('.tree [data-path="src/up.txt"]').click();
  await page.locator('#file-title').filter({ hasText: 'src/up.txt' }).waitFor();
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download' }).click()]);
  assert.equal(download.suggestedFilename(), 'up.txt');
  answer('src/moved.txt');
  await page.getByRole('button', { name: 'Rename' }).click();
  await page.locator('.tree [data-path="src/moved.txt"]').waitFor();
  await page.getByRole('button', { name: 'Delete' }).click();
  await statusIs(page, /Deleted src\/moved.txt/);
  const left = await page.evaluate(async (sb) => (await (await fetch(`/api/v1/sandboxes/${sb}/files/list?path=src`)).json()).entries.map((e) => e.name), sandbox);
  assert.deepEqual(left, []);
  step('folder, upload, download, rename and delete');

  // A binary file's checkpoint says binary, with no line diff.
  const bin = await page.evaluate(async (sb) => (await fetch(`/api/v1/sandboxes/${sb}/files/content?path=logo.bin`, { method: 'PUT', body: new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3]) })).status, sandbox);
  assert.equal(bin, 200);
  await page.getByRole('tab', { name: 'Timeline' }).click();
  await page.locator('#checkpoints .cp').filter({ hasText: 'write logo.bin' }).first().click();
  await page.locator('#diff .file-diff[data-path="logo.bin"]').getByText('Binary file: no line diff.').waitFor();
  assert.equal(await page.locator('#diff .file-diff[data-path="logo.bin"] .udiff').count(), 0);
  await shot(page, 'timeline-binary');
  step('the timeline shows line diffs, and says binary for a binary file');

  // Narrow: the panes still fit.
  await page.setViewportSize({ width: 600, height: 800 });
  await page.getByRole('tab', { name: 'Files' }).click();
  await shot(page, 'narrow');
  await page.setViewportSize({ width: 1280, height: 800 });

  // Hostile: the app's page (same site, another origin) tries to drive the desktop.
  const app = `http://app-${sandbox}.localhost:${new URL(desk).port}`;
  const before = await page.evaluate(async (sb) => (await (await fetch(`/api/v1/sandboxes/${sb}/history`)).json()).current, sandbox);
  const hostile = await context.newPage();
  await hostile.goto(desk + '/desktop/preview');
  await hostile.waitForURL((u) => u.origin === app);
  const tried = await hostile.evaluate(async ({ desk, sb }) => {
    const api = `${desk}/api/v1/sandboxes/${sb}`;
    const out = {};
    const attempt = async (name, f) => { try { out[name] = await f(); } catch (e) { out[name] = 'error: ' + e.message; } };
    await attempt('read a file', async () => (await fetch(`${api}/files/content?path=index.html`, { credentials: 'include' })).text());
    await attempt('exec (no-cors)', async () => { await fetch(`${api}/exec`, { method: 'POST', mode: 'no-cors', credentials: 'include', body: JSON.stringify({ argv: ['touch', '/workspace/pwned'] }) }); return 'sent'; });
    await attempt('checkpoint (no-cors)', async () => { await fetch(`${api}/history/checkpoints`, { method: 'POST', mode: 'no-cors', credentials: 'include', body: '{"message":"pwned"}' }); return 'sent'; });
    await attempt('undo (no-cors, no body)', async () => { await fetch(`${api}/history/undo`, { method: 'POST', mode: 'no-cors', credentials: 'include' }); return 'sent'; });
    await attempt('write (cors)', async () => (await fetch(`${api}/files/content?path=pwned2`, { method: 'PUT', credentials: 'include', body: 'x' })).status);
    await attempt('terminal', () => new Promise((resolve) => {
      const ws = new WebSocket(`${api.replace('http', 'ws')}/exec/stream`, 'paddock.exec.v1');
      ws.onopen = () => { ws.send(JSON.stringify({ argv: ['touch', '/workspace/pwned3'] })); resolve('opened'); };
      ws.onerror = () => resolve('refused');
    }));
    return out;
  }, { desk, sb: sandbox });
  for (const [k, v] of Object.entries(tried)) step(`  hostile ${k}: ${String(v).slice(0, 100)}`);
  assert.ok(!/version|changed on disk/.test(tried['read a file']), 'the app page read a desktop file');
  assert.notEqual(tried.terminal, 'opened', 'the app page opened a terminal');
  await hostile.close();
  const seen = await page.evaluate(async (sb) => {
    const api = `/api/v1/sandboxes/${sb}`;
    const list = await (await fetch(`${api}/files/list?path=.`)).json();
    const hist = await (await fetch(`${api}/history`)).json();
    return { names: list.entries.map((e) => e.name), messages: hist.checkpoints.map((c) => c.message), current: hist.current };
  }, sandbox);
  assert.equal(seen.current, before, 'the app page moved the workspace (an undo went through)');
  assert.ok(!seen.names.some((n) => n.startsWith('pwned')), `the app page wrote to the workspace: ${seen.names}`);
  assert.ok(!seen.messages.includes('pwned'), 'the app page made a checkpoint');
  step('the app page could not drive the desktop');

  // Signed out (here: the session ends, as after paddock forgets the host's sign-in):
  // the page says so, keeps the editor's text, and signs in again through the handoff.
  await page.getByRole('tab', { name: 'Files' }).click();
  await page.locator('#tree, .tree').getByText('index.html').first().click();
  await page.locator('#file-title').filter({ hasText: 'index.html' }).waitFor();
  await setEditor(page, '<h1>unsaved</h1>\n');
  await context.clearCookies();
  await page.locator('#refresh').click();
  await page.locator('#signin').filter({ hasText: 'signed out' }).waitFor();
  assert.match(await page.locator('#editor .cm-content').innerText(), /unsaved/);
  await page.goto(base + '/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/', { timeout: 60000 });
  await page.goto(desk + '/');
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 60000 });
  assert.equal(new URL(page.url()).origin, desk);
  step('signed out: said so, kept the text; signing in again reopened the desktop');

  assert.deepEqual(errors, []);
  step('done');
} catch (e) {
  // What the page showed when it failed, and the frame's text, for the log.
  if (page) {
    await shot(page, 'failure').catch(() => {});
    step(`preview frame box: ${JSON.stringify(await page.locator('#preview').boundingBox().catch(() => null))}`);
    for (const f of page.frames()) step(`frame ${f.url()}: ${(await f.evaluate(() => document.body?.innerText ?? '').catch((x) => String(x))).slice(0, 300)}`);
  }
  throw e;
} finally {
  await close();
}
