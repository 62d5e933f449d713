// The timeline pane: the workspace's checkpoints, the files each changed, and undo, redo,
// restore and checkpoint. It works while the app is down: the agent serves it.
import { call, q, h } from './api.js';
import { say, fail } from './status.js';

export class TimelinePane {
  constructor({ afterRestore }) {
    this.afterRestore = afterRestore;
    this.selected = null;
    this.list = h('ol', { class: 'checkpoints', id: 'checkpoints', 'aria-label': 'Checkpoints, newest first' });
    this.diff = h('section', { class: 'diff', id: 'diff', 'aria-label': 'Files the checkpoint changed' }, h('p', { class: 'muted' }, 'Select a checkpoint to see what it changed.'));
    const b = (label, id, f, title) => h('button', { id, onclick: f, title }, label);
    this.restoreBtn = b('Restore selected', 'restore', () => this.restore(), 'Make the workspace what it was at the selected checkpoint');
    this.restoreBtn.disabled = true;
    this.el = h('div', { class: 'pane timeline', id: 'pane-timeline', role: 'tabpanel', 'aria-labelledby': 'tab-timeline', hidden: true },
      h('div', { class: 'toolbar', role: 'toolbar', 'aria-label': 'History actions' },
        b('Undo', 'undo', () => this.run('undo'), 'Go back one checkpoint'),
        b('Redo', 'redo', () => this.run('redo'), 'Go forward again after an undo'),
        this.restoreBtn,
        b('Checkpoint now', 'checkpoint', () => this.checkpoint(), 'Record the workspace as it is now'),
        b('Refresh', 'timeline-refresh', () => this.refresh())),
      h('div', { class: 'timeline-body' }, this.list, this.diff));
  }

  async refresh() {
    try {
      const hist = await call('GET', '/history');
      this.current = hist.current;
      // Newest first, whatever order the API lists them in (ties keep its order).
      const items = [...hist.checkpoints].sort((a, b) => new Date(b.time) - new Date(a.time)).map((cp) => {
        const cur = cp.id === hist.current;
        const when = new Date(cp.time);
        return h('li', {},
          h('button', {
            class: 'cp' + (cur ? ' current' : '') + (this.selected === cp.id ? ' selected' : ''),
            'data-id': cp.id, 'aria-current': cur ? 'step' : undefined, 'aria-pressed': String(this.selected === cp.id),
            onclick: () => this.select(cp),
          },
          h('time', { datetime: cp.time, title: when.toLocaleString() }, when.toLocaleTimeString()),
          h('span', { class: 'cause' }, cp.cause),
          h('span', { class: 'msg' }, cp.message || (cp.restores ? `restores ${cp.restores.slice(0, 8)}` : '')),
          h('span', { class: 'changed' }, `${cp.changed} file${cp.changed === 1 ? '' : 's'}`),
          cur ? h('span', { class: 'badge' }, 'current') : null));
      });
      this.list.replaceChildren(...(items.length ? items : [h('li', { class: 'muted' }, 'No checkpoints yet: the history starts at the first change.')]));
    } catch (e) {
      fail(e);
    }
  }

  async select(cp) {
    this.selected = cp.id;
    this.restoreBtn.disabled = false;
    await this.refresh();
    if (!cp.parent) {
      this.diff.replaceChildren(h('h2', {}, `${cp.cause}${cp.message ? ': ' + cp.message : ''}`),
        h('p', { class: 'muted' }, new Date(cp.time).toLocaleString(), ' — the first checkpoint: the workspace as it was then.'));
      return;
    }
    try {
      const d = await call('GET', `/history/diff?from=${q(cp.parent)}&to=${q(cp.id)}&lines=true`);
      const group = (title, cls, names) => names.length
        ? h('div', { class: cls }, h('h3', {}, `${title} (${names.length})`), h('ul', {}, names.map((n) => h('li', {}, n))))
        : null;
      const none = !d.added.length && !d.changed.length && !d.removed.length;
      this.diff.replaceChildren(...[
        h('h2', {}, `${cp.cause}${cp.message ? ': ' + cp.message : ''}`),
        h('p', { class: 'muted' }, new Date(cp.time).toLocaleString()),
        none ? h('p', {}, 'No file changed.') : null,
        group('Added', 'added', d.added), group('Changed', 'changed', d.changed), group('Removed', 'removed', d.removed),
        (d.files || []).length ? h('h3', {}, 'Line changes') : null,
        ...(d.files || []).map(fileDiff),
      ].filter(Boolean));
    } catch (e) {
      fail(e);
    }
  }

  async run(op, body) {
    const started = new Date();
    try {
      say(`${op}…`);
      const res = await call('POST', `/history/${op}`, body ? { body } : {});
      say(`${op[0].toUpperCase() + op.slice(1)} done: the workspace is at ${res.current?.slice(0, 12) || res.checkpoint.id.slice(0, 12)}` +
        (res.app_restarted ? '; the app restarts' : res.app_note ? `; ${res.app_note}` : ''));
      await Promise.all([this.refresh(), this.afterRestore(res, started)]);
    } catch (e) {
      fail(e);
    }
  }

  restore() {
    if (this.selected) return this.run('restore', { checkpoint: this.selected });
  }

  async checkpoint() {
    const message = prompt('Checkpoint message (optional)') ?? null;
    if (message === null) return;
    try {
      const res = await call('POST', '/history/checkpoints', { body: { message } });
      say(res.created ? `Checkpoint ${res.checkpoint.id.slice(0, 12)} recorded` : 'Nothing changed since the last checkpoint');
      await this.refresh();
    } catch (e) {
      fail(e);
    }
  }
}

// fileDiff shows one file's unified diff, its lines marked as added, removed or hunk
// headers; a binary file, or one without a diff, says so.
function fileDiff(f) {
  let body;
  if (f.binary) body = h('p', { class: 'muted' }, 'Binary file: no line diff.');
  else if (f.note) body = h('p', { class: 'muted' }, `No line diff: ${f.note}.`);
  else {
    const lines = (f.unified || '').replace(/\n$/, '').split('\n').slice(2); // the ---/+++ headers: the summary says the path
    body = h('pre', { class: 'udiff', 'aria-label': `Line diff of ${f.path}` }, lines.map((l) => h('span', {
      class: l.startsWith('@@') ? 'hunk' : l[0] === '+' ? 'add' : l[0] === '-' ? 'del' : 'ctx',
    }, l + '\n')));
  }
  return h('details', { class: 'file-diff', open: true, 'data-path': f.path },
    h('summary', {}, h('span', { class: 'path' }, f.path), ` (${f.status})`),
    body,
    f.truncated ? h('p', { class: 'muted truncated' }, 'The diff is cut here (over 64 KiB); open the file, or restore the checkpoint, to see all of it.') : null);
}
