// The desktop's bad input and faults, each with a precise message in the page and nothing
// lost: a path outside the workspace (new file, rename), the open file deleted on disk
// before a save, a 1 MB paste into the terminal, keys typed past the buffer while the
// terminal's connection is down, and a tab closed in the middle of an upload (the file on
// disk stays as it was). A stale ETag is desktop.mjs's conflict; the app killed
// mid-request is desktop-appkill.mjs's.
// Run by internal/server's TestBrowserDesktopFaults, which sets BASE_URL, USERNAME,
// PASSWORD and SANDBOX (and SCREENSHOT_DIR).
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
const step = (s) => console.log(`desktop-faults.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });

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
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  const desk = new URL(page.url()).origin;
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });
  const api = (path, init) => page.evaluate(async ({ sb, path, init }) => {
    const r = await fetch(`/api/v1/sandboxes/${sb}${path}`, init);
    return { status: r.status, text: await r.text() };
  }, { sb: sandbox, path, init });
  step(`on the desktop ${desk}`);

  // A path outside the workspace: refused, saying which path and why; nothing made.
  await page.getByRole('tab', { name: 'Files' }).click();
  answer('../escape.txt');
  await page.getByRole('button', { name: 'New file' }).click();
  await statusIs(page, /escape\.txt.*(outside|\.\.)/);
  assert.equal(await page.locator('#status').getAttribute('data-kind'), 'error');
  step(`new file ../escape.txt: ${await page.locator('#status').textContent()}`);
  answer('keep.txt');
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'keep.txt' }).waitFor();
  await page.locator('#editor .cm-content').click();
  await page.keyboard.insertText('kept\n');
  await page.keyboard.press('Control+S');
  await statusIs(page, /Saved keep.txt/);
  answer('../../etc/keep.txt');
  await page.getByRole('button', { name: 'Rename' }).click();
  await statusIs(page, /etc\/keep\.txt.*(outside|\.\.)/);
  step(`rename to ../../etc/keep.txt: ${await page.locator('#status').textContent()}`);
  assert.equal((await api('/files/content?path=keep.txt')).text, 'kept\n', 'keep.txt moved or lost');

  // The open file deleted on disk, then saved: the page says it was deleted and keeps the
  // text; saving it again makes the file anew with it.
  assert.equal((await api('/files/content?path=keep.txt', { method: 'DELETE' })).status, 204);
  await page.locator('#editor .cm-content').click();
  await page.keyboard.press('Control+End');
  await page.keyboard.insertText('more\n');
  await page.keyboard.press('Control+S');
  await page.locator('#conflict').getByText('It was deleted').waitFor({ timeout: 30000 });
  await statusIs(page, /Not saved: .*keep\.txt/);
  step(`save of a deleted file: ${await page.locator('#status').textContent()}`);
  await screenshot(page, 'desktop-save-deleted');
  await page.getByRole('button', { name: 'Save mine (create it again)' }).click();
  await statusIs(page, /Saved keep.txt/);
  assert.equal((await api('/files/content?path=keep.txt')).text, 'kept\nmore\n');
  step('the deleted file was made again with the editor\'s text');

  // A 1 MB paste arrives whole.
  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.waitForFunction(() => window.paddockDesktop.terminal.current?.ready, null, { timeout: 60000 });
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  // The marker is printed (not echoed: the quotes split it in the typed line) once the
  // shell has run stty and is about to start cat, so the paste goes to cat and not to a
  // shell still starting.
  await page.keyboard.type('stty -echo; echo paste-""ready; cat > /tmp/paste\n');
  await page.locator('#term-1 .xterm-rows').getByText('paste-ready').first().waitFor({ timeout: 60000 });
  await page.waitForFunction(() => !window.paddockDesktop.terminal.current.term.modes.bracketedPasteMode, null, { timeout: 30000 });
  step('cat waits for the paste');
  await page.evaluate(() => window.paddockDesktop.terminal.current.term.paste(('y'.repeat(99) + '\n').repeat(10000)));
  await page.keyboard.press('Control+D');
  await page.keyboard.type('stty echo; echo "pasted=$(wc -c < /tmp/paste)"\n');
  await page.locator('#term-1 .xterm-rows').getByText('pasted=1000000').first().waitFor({ timeout: 120000 });
  step('a 1 MB paste arrived whole');

  // Keys typed while the connection is down wait for it, up to a bound; past it the tab
  // says how much was not sent, rather than dropping it silently.
  await page.evaluate(() => {
    const s = window.paddockDesktop.terminal.current;
    s.ready = false; // as between a drop and the reattach
    s.term.paste('z'.repeat(1100000));
  });
  await page.locator('#term-1 .xterm-rows').getByText(/not sent: the connection is down/).first().waitFor({ timeout: 30000 });
  await page.evaluate(() => { const s = window.paddockDesktop.terminal.current; s.pending = []; s.pendingBytes = 0; s.ready = true; });
  step('keys past the buffer while disconnected are reported');

  // A tab closed in the middle of an upload: the file on disk stays as it was.
  assert.equal((await api('/files/content?path=big.bin', { method: 'PUT', body: 'original\n' })).status, 200);
  const other = await context.newPage();
  await other.goto(desk + '/#files');
  await other.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });
  const cdp = await context.newCDPSession(other);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: 256 * 1024 });
  const started = other.waitForRequest((r) => r.method() === 'PUT' && r.url().includes('big.bin'));
  await other.locator('.toolbar input[type=file]').setInputFiles({ name: 'big.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(8 << 20, 7) });
  await started;
  await other.locator('#status').filter({ hasText: /Uploading big.bin/ }).waitFor();
  await other.waitForTimeout(1000);
  // Still going (32 s at this rate), not refused.
  assert.match(await other.locator('#status').textContent(), /^Uploading big.bin/);
  await other.close();
  step('closed a tab mid-upload');
  // The agent discards the partial file once the body breaks off; the file stays as it was.
  for (const deadline = Date.now() + 30000; ; await page.waitForTimeout(200)) {
    const got = await api('/files/content?path=big.bin');
    const list = JSON.parse((await api('/files/list?path=.')).text).entries.map((e) => e.name);
    if (got.text === 'original\n' && list.filter((n) => n.includes('big.bin')).length === 1) break;
    if (Date.now() > deadline) throw new Error(`after the closed upload: big.bin holds ${got.text.length} bytes; the workspace lists ${list}`);
  }
  step('the upload cut off left big.bin as it was');
  await screenshot(page, 'desktop-faults');
  assert.deepEqual(errors, []);
} catch (e) {
  if (page) {
    console.log(`desktop-faults.mjs: status ${JSON.stringify(await page.locator('#status').textContent().catch(() => ''))}`);
    await screenshot(page, 'desktop-faults-failed');
  }
  throw e;
} finally {
  await close();
}
