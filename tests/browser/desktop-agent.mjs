// The desktop's Agent pane in a real browser, against a scripted model behind the real
// gateway (internal/server's TestBrowserDesktopAgent sets the script):
//   turn 1   "make the header blue": the edit shows as it happens, before the answer; the
//            file changes; the turn is a checkpoint on the timeline; "Undo this turn"
//            brings the file back
//   turn 2   slow: a reload while it runs reattaches to it, and it finishes in the pane
//   turn 3   the agent's process is killed after its edit: the pane rolls the turn back
//            (the file is the last checkpoint's again) and says so
//   turn 4   the provider rate-limits (429, Retry-After an hour): the pane says so
//   turn 5   the provider is down (503): the pane says so
//   turn 6   rate-limited for a second (the pane says it waits), then an answer that
//            spends the user's tokens per day, changing no file: nothing to undo
//   turn 7   the gateway refuses: out of budget, and the pane says so
//   reload   the conversation is shown again, turn 1 marked undone, turn 3 rolled back
//   turn 8   the provider and model chosen in the pane (a bad model name refused first)
//            are what the turn asks; the choice is shown again after a reload
// Env: BASE_URL, USERNAME, PASSWORD, SANDBOX (the live sandbox), SHOTS (screenshots).
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
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
const step = (s) => console.log(`desktop-agent.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });
const long = { timeout: 90000 };
// killScript kills the sandbox's running `paddock-agent code` turn (the one asked to rewrite
// the page), as a crash or an OOM kill would: SIGKILL, nothing said.
const killScript = `n=0; for p in /proc/[0-9]*; do
  if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^/.paddock/paddock-agent code -- rewrite the page'; then kill -9 \${p#/proc/} && n=$((n+1)); fi
done; test $n = 1`;

async function shot(page, name) {
  const file = path.join(shots, `${name}.png`);
  await page.screenshot({ path: file });
  step(`screenshot ${file}`);
}

const file = (page, name) => page.evaluate(async ({ sb, name }) => {
  const r = await fetch(`/api/v1/sandboxes/${sb}/files/content?path=${name}`);
  return r.text();
}, { sb: sandbox, name });

async function ask(page, text) {
  await page.locator('#agent-send:not([disabled])').waitFor(long);
  await page.locator('#agent-input').fill(text);
  await page.locator('#agent-send').click();
}

let page;
try {
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept());
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  step('on the desktop');

  await page.getByRole('tab', { name: 'Agent' }).click();
  await page.locator('#agent-send:not([disabled])').waitFor(long);
  assert.match(await file(page, 'index.html'), /color: red/);

  // Turn 1: the edit, shown while the model still thinks about its answer.
  await ask(page, 'make the header blue');
  await page.locator('#turn-1 .tool.ok[data-tool=edit_file]').waitFor(long);
  await page.locator('#undo-turn-1').waitFor(long);
  const arrivals = await page.evaluate(() => window.paddockDesktop.agent.arrivals.filter((a) => a.turn === 1));
  const edited = arrivals.find((a) => a.type === 'tool_result' && a.tool === 'edit_file');
  const done = arrivals.find((a) => a.type === 'done');
  assert.ok(edited && done && done.at - edited.at >= 1000,
    `the edit's result must show before the answer, which the model gives 2 s later: ${JSON.stringify(arrivals)}`);
  await page.locator('#turn-1 .say').filter({ hasText: 'The header is blue now.' }).waitFor();
  assert.match(await file(page, 'index.html'), /color: blue/);
  await shot(page, 'agent');

  const hist = await page.evaluate(async (sb) => (await fetch(`/api/v1/sandboxes/${sb}/history`)).json(), sandbox);
  const cp = hist.checkpoints.find((c) => c.message === 'agent turn 1: make the header blue');
  assert.ok(cp && hist.current === cp.id, `the turn is the current checkpoint: ${JSON.stringify(hist)}`);

  await page.locator('#undo-turn-1').click();
  await page.locator('#status').filter({ hasText: 'Turn 1 undone' }).waitFor(long);
  assert.match(await file(page, 'index.html'), /color: red/);
  await page.locator('#turn-1.undone').waitFor();
  step('turn 1 undone');

  // Turn 2 is slow: a reload while it runs reattaches to it, and it finishes in the pane,
  // shown once.
  await ask(page, 'take your time');
  await page.locator('#turn-2 .tool.ok[data-tool=run_command]').waitFor(long);
  await page.reload();
  await page.getByRole('tab', { name: 'Agent' }).click();
  await page.locator('#turn-2 .say').filter({ hasText: 'Finished slowly.' }).waitFor(long);
  await page.locator('#turn-2.done').waitFor(long);
  assert.equal(await page.evaluate(() => window.paddockDesktop.agent.reattached), true, 'the pane did not reattach to the turn under way');
  assert.equal(await page.locator('[id="turn-2"]').count(), 1);
  assert.equal(await page.locator('#turn-2 .tool[data-tool=run_command]').count(), 1);
  step('reattached to turn 2 after a reload');

  // Turn 3: the agent's process is killed mid-turn, its edit made: the pane rolls the
  // turn back at once, so the file is the last checkpoint's again, and says so.
  await ask(page, 'rewrite the page');
  await page.locator('#turn-3 .tool.ok[data-tool=write_file]').waitFor(long);
  assert.equal(await file(page, 'index.html'), 'half-done\n');
  const killed = await page.evaluate(async ({ sb, script }) => {
    const r = await fetch(`/api/v1/sandboxes/${sb}/exec`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ argv: ['sh', '-c', script] }) });
    return r.json();
  }, { sb: sandbox, script: killScript });
  assert.equal(killed.exit_code, 0, `killing the agent: ${JSON.stringify(killed)}`);
  await page.locator('#agent-banner[data-code=recovered]').filter({ hasText: /stopped before turn 3 ended: its changes were rolled back.*conversation is kept/ }).waitFor(long);
  await page.locator('#turn-3 .note.recovered').filter({ hasText: /rolled back/ }).waitFor(long);
  assert.match(await file(page, 'index.html'), /color: red/);
  step(`killed mid-turn: ${await page.locator('#agent-banner').textContent()}`);
  await shot(page, 'agent-killed');

  // Turns 4-7: the provider rate-limited, down; the budget spent.
  const banner = async (code, re) => {
    await page.locator(`#agent-banner[data-code=${code}]`).filter({ hasText: re }).waitFor(long);
    step(`banner ${code}: ${await page.locator('#agent-banner').textContent()}`);
  };
  await ask(page, 'add a footer');
  await banner('rate_limited', /Rate limited/);
  await shot(page, 'agent-rate-limited');
  await ask(page, 'try again');
  await banner('provider_unavailable', /provider is down/);
  // Rate limited for a second: the pane says it waits, then the answer clears the banner.
  await ask(page, 'say hello');
  await page.locator('#turn-6 .note.wait').filter({ hasText: /Waiting 1 s/ }).waitFor(long);
  await page.locator('#turn-6 .say').filter({ hasText: 'Hello.' }).waitFor(long);
  // A turn that changed no file has nothing to undo (its checkpoint is an earlier one).
  await page.locator('#turn-6.unchanged .mark').filter({ hasText: 'changed no file' }).waitFor(long);
  assert.equal(await page.locator('#undo-turn-6').isVisible(), false);
  await page.locator('#agent-banner').waitFor({ state: 'hidden' });
  await ask(page, 'and again');
  await banner('out_of_budget', /Out of budget.*tokens per day/);
  await shot(page, 'agent-out-of-budget');

  // The conversation survives a reload.
  await page.reload();
  await page.getByRole('tab', { name: 'Agent' }).click();
  await page.locator('#turn-7').waitFor(long);
  await page.locator('#turn-1.undone .you').filter({ hasText: 'make the header blue' }).waitFor();
  await page.locator('#turn-1 .mark').filter({ hasText: 'undone' }).waitFor();
  await page.locator('#turn-1 .tool.ok[data-tool=edit_file]').waitFor();
  await page.locator('#turn-6 .say').filter({ hasText: 'Hello.' }).waitFor();
  await page.locator('#turn-3 .note.recovered').waitFor();
  await page.locator('#turn-4 .note.error[data-kind=rate_limited]').waitFor();
  await shot(page, 'agent-reloaded');

  // Turn 8 asks the provider and model chosen in the pane: "other", the gateway's second
  // OpenAI-style provider (the Go test checks what it was asked).
  const sel = page.locator('#agent-provider');
  await sel.locator('option[value=other]').waitFor({ state: 'attached', ...long });
  assert.equal(await sel.inputValue(), '');
  assert.deepEqual(await sel.locator('option').allTextContents(), ['Server default (scripted)', 'scripted (openai)', 'other (openai)']);
  assert.equal(await page.locator('#agent-model').getAttribute('placeholder'), 'Server default (scripted-model)');
  await sel.selectOption('other');
  await page.locator('#agent-model').fill('two words');
  await page.locator('#agent-choice-save').click();
  await page.locator('#status[data-kind=error]').filter({ hasText: 'model "two words"' }).waitFor(long);
  await page.locator('#agent-model').fill('picked-in-pane');
  await page.locator('#agent-choice-save').click();
  await page.locator('#status').filter({ hasText: 'The agent asks other, model picked-in-pane' }).waitFor(long);
  await ask(page, 'who answers?');
  await page.locator('#turn-8 .say').filter({ hasText: 'Other here.' }).waitFor(long);
  await page.reload();
  await page.getByRole('tab', { name: 'Agent' }).click();
  await page.waitForFunction(() => document.querySelector('#agent-provider').value === 'other', null, long);
  assert.equal(await page.locator('#agent-model').inputValue(), 'picked-in-pane');
  await shot(page, 'agent-choice');
  step('turn 8 on the provider and model chosen in the pane');
  assert.deepEqual(errors, []);
  step('ok');
} catch (e) {
  if (page) {
    await shot(page, 'agent-failure').catch(() => {});
    step(`the pane: ${await page.locator('#pane-agent').innerText().catch((x) => x)}`);
    step(`status: ${await page.locator('#status').innerText().catch((x) => x)}`);
  }
  throw e;
} finally {
  await close();
}
