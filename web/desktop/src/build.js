// The build pane: runs a runtime provider's step (build, validate, package, preview) in
// this sandbox and shows its commands and log live, as the step's event stream sends them.
import { base, h } from './api.js';
import { say } from './status.js';

// readEvents calls f with each server-sent event of a response body, as it arrives.
export async function readEvents(body, f) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data) f(JSON.parse(data));
    }
  }
}

export class BuildPane {
  constructor({ afterStep } = {}) {
    this.afterStep = afterStep;
    this.step = h('select', { id: 'build-step', 'aria-label': 'Step' },
      ['build', 'validate', 'package', 'preview'].map((s) => h('option', { value: s }, s)));
    this.dir = h('input', { id: 'build-dir', 'aria-label': 'Project directory', placeholder: 'project directory (the workspace when empty)' });
    this.run = h('button', { id: 'build-run', onclick: () => this.start() }, 'Run');
    this.steps = h('ol', { class: 'build-steps', id: 'build-steps', 'aria-label': 'The step\'s commands' });
    this.log = h('pre', { class: 'build-log', id: 'build-log', 'aria-label': 'The step\'s log', 'aria-live': 'off' });
    this.result = h('p', { class: 'build-result', id: 'build-result', role: 'status' });
    this.el = h('div', { class: 'pane build', id: 'pane-build', role: 'tabpanel', 'aria-labelledby': 'tab-build', hidden: true },
      h('div', { class: 'toolbar', role: 'toolbar', 'aria-label': 'Build actions' }, this.step, this.dir, this.run),
      this.result, this.steps, this.log);
    this.rows = new Map();
  }

  async start() {
    const step = this.step.value;
    this.run.disabled = true;
    this.steps.replaceChildren();
    this.log.textContent = '';
    this.rows.clear();
    this.result.textContent = `${step}: running…`;
    this.result.dataset.state = 'running';
    try {
      const res = await fetch(`${base}/app/${step}`, {
        method: 'POST', credentials: 'same-origin', cache: 'no-store',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ dir: this.dir.value.trim() || undefined }),
      });
      if (!res.ok) {
        let msg = `${res.status} ${res.statusText}`;
        try { msg = (await res.json()).error.message; } catch { /* not the API's error shape */ }
        this.finish(step, msg);
        return;
      }
      let last = null;
      await readEvents(res.body, (ev) => { this.show(ev); if (ev.type === 'result') last = ev; });
      this.finish(step, last ? last.error || '' : 'the step ended without a result (the connection was cut)', last);
    } catch (e) {
      this.finish(step, `paddock does not answer: ${e.message}`);
    } finally {
      this.run.disabled = false;
    }
  }

  // show adds one event: a command's row (its state as it changes) or a line of its log.
  show(ev) {
    if (ev.type === 'progress') {
      const key = `${ev.step}/${ev.index}/${ev.command}`;
      let row = this.rows.get(key);
      if (!row) {
        row = h('li', {});
        this.rows.set(key, row);
        this.steps.append(row);
      }
      row.dataset.state = ev.state;
      row.textContent = `${ev.step} [${ev.index}/${ev.total}] ${ev.command} — ${ev.state}${ev.error ? ': ' + ev.error : ''}`;
    } else if (ev.type === 'log') {
      const atEnd = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 4;
      this.log.append(`${ev.line}\n`);
      if (atEnd) this.log.scrollTop = this.log.scrollHeight;
    }
  }

  finish(step, error, res) {
    this.result.dataset.state = error ? 'failed' : 'ok';
    let text = error ? `${step} failed: ${error}` : `${step}: done`;
    if (!error && res?.artifact_id) text += ` (artifact ${res.artifact_id.slice(0, 12)})`;
    this.result.textContent = text;
    say(text, error ? 'error' : 'info');
    this.afterStep?.(res);
  }
}
