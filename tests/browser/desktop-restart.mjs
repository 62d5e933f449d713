// The desktop while the control plane is SIGKILLed and started again on the same data
// dir and port: sign in (landing on the live desktop), leave a shell with state in the
// terminal and save a file, then tell the Go test to kill and restart paddock (the file
// SIGNAL_DIR/ready) and wait for it (SIGNAL_DIR/restarted). After the restart the page
// carries on without being reloaded (still signed in on the desktop's host): the next
// save of the open file reaches the disk, the terminal tab reattaches to the same shell
// (its state and scrollback there), and a new terminal is a new shell.
// Run by internal/server's TestBrowserDesktopSurvivesSIGKILL, which sets BASE_URL,
// USERNAME, PASSWORD, SANDBOX and SIGNAL_DIR (and SCREENSHOT_DIR).
import assert from 'node:assert/strict';
import { stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { launch, screenshot } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const sandbox = env('SANDBOX');
const signals = env('SIGNAL_DIR');
const t0 = Date.now();
const step = (s) => console.log(`desktop-restart.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });

async function setEditor(page, text) {
  await page.locator('#editor .cm-content').click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(text);
}

// onDisk polls the file through the desktop's own API until it holds want.
async function onDisk(page, desk, name, want) {
  const url = `${desk}/api/v1/sandboxes/${sandbox}/files/content?path=${name}`;
  for (const deadline = Date.now() + 60000; Date.now() < deadline; await page.waitForTimeout(200)) {
    const got = await page.evaluate((u) => fetch(u).then((r) => (r.ok ? r.text() : null), () => null), url);
    if (got === want) return;
  }
  throw new Error(`${name} never held ${JSON.stringify(want)} on disk`);
}

let page;
try {
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept('restart.txt'));
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  const desk = new URL(page.url()).origin;
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });
  step(`on the desktop ${desk}`);

  await page.getByRole('tab', { name: 'Files' }).click();
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'restart.txt' }).waitFor();
  await setEditor(page, 'before\n');
  await page.keyboard.press('Control+S');
  await page.locator('#status').filter({ hasText: /Saved restart.txt/ }).waitFor({ timeout: 30000 });
  await onDisk(page, desk, 'restart.txt', 'before\n');

  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.locator('#term-1 .xterm-rows').waitFor();
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('S=kept-$((3*3)); echo "answer-$((6*7))"\n');
  await page.locator('#term-1 .xterm-rows').getByText('answer-42').first().waitFor({ timeout: 30000 });
  step('saved a file and left a shell with state; asking for the SIGKILL');

  await writeFile(path.join(signals, 'ready'), '');
  for (const deadline = Date.now() + 120000; ; await page.waitForTimeout(200)) {
    try {
      await stat(path.join(signals, 'restarted'));
      break;
    } catch {
      if (Date.now() > deadline) throw new Error('the Go test never restarted paddock');
    }
  }
  step('paddock was killed and started again');

  // The tab reconnects by itself and reattaches to the same shell (the agent kept it; the
  // new control plane knows it as kept by its ID): its state and its scrollback are there.
  await page.waitForFunction(() => { const s = window.paddockDesktop.terminal.sessions[0]; return s.ready || s.ended; }, null, { timeout: 90000 });
  await page.locator('#term-1 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo "same shell: $S"\n');
  await page.locator('#term-1 .xterm-rows').getByText('same shell: kept-9').first().waitFor({ timeout: 60000 });
  assert.ok(await page.locator('#term-1 .xterm-rows').getByText('answer-42').count() > 0, 'the scrollback was lost');
  assert.equal(await page.locator('#term-1 .xterm-rows').getByText(/the shell ended/).count(), 0, 'the tab says its shell ended');
  await screenshot(page, 'desktop-terminal-after-sigkill');
  // A new terminal is a new shell.
  await page.getByRole('button', { name: 'New terminal' }).click();
  await page.locator('#term-2 .xterm-rows').waitFor();
  await page.locator('#term-2 .xterm-helper-textarea').focus();
  await page.keyboard.type('echo "after-$((40+3)) ${S:-unset}"\n');
  await page.locator('#term-2 .xterm-rows').getByText('after-43 unset').first().waitFor({ timeout: 60000 });
  step('the tab reattached to the same shell after the restart; a new terminal is a new shell');

  // A save after the restart reaches the disk.
  await page.getByRole('tab', { name: 'Files' }).click();
  await setEditor(page, 'after\n');
  await page.keyboard.press('Control+S');
  await onDisk(page, desk, 'restart.txt', 'after\n');
  await page.locator('#status').filter({ hasText: /Saved restart.txt/ }).waitFor({ timeout: 30000 });
  assert.equal(await page.locator('#signin').isHidden(), true, 'the page says it is signed out');
  await screenshot(page, 'desktop-after-sigkill');
  step('a save after the restart reached the disk');
  assert.deepEqual(errors, []);
} catch (e) {
  if (page) {
    const text = async (sel) => (await page.locator(sel).first().textContent().catch(() => '')) ?? '';
    console.log(`desktop-restart.mjs: status ${JSON.stringify(await text('#status'))}, signin hidden ${await page.locator('#signin').isHidden().catch(() => '?')}`);
    console.log(`desktop-restart.mjs: terminal ${JSON.stringify(await text('#term-1 .xterm-rows'))}`);
    await screenshot(page, 'desktop-after-sigkill-failed');
  }
  throw e;
} finally {
  await close();
}
