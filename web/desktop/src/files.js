// The files pane: a tree of /workspace and an editor that saves with If-Match, showing a
// conflict (yours against the disk's) instead of overwriting a change made meanwhile.
import { EditorView, basicSetup } from 'codemirror';
import { EditorState, Compartment } from '@codemirror/state';
import { keymap } from '@codemirror/view';
import { MergeView } from '@codemirror/merge';
import { javascript } from '@codemirror/lang-javascript';
import { python } from '@codemirror/lang-python';
import { html } from '@codemirror/lang-html';
import { css } from '@codemirror/lang-css';
import { json } from '@codemirror/lang-json';
import { markdown } from '@codemirror/lang-markdown';
import { go } from '@codemirror/lang-go';
import { call, q, h, fmtSize, base } from './api.js';
import { say, fail } from './status.js';

// Files over READ_ONLY_OVER open read-only (the editor slows on them, and a save would
// send them whole); files over NOT_SHOWN_OVER are not loaded at all.
const READ_ONLY_OVER = 2 << 20;
const NOT_SHOWN_OVER = 16 << 20;

function languageOf(path) {
  const ext = path.split('.').pop().toLowerCase();
  switch (ext) {
    case 'js': case 'mjs': case 'cjs': return javascript();
    case 'jsx': return javascript({ jsx: true });
    case 'ts': return javascript({ typescript: true });
    case 'tsx': return javascript({ typescript: true, jsx: true });
    case 'py': return python();
    case 'html': case 'htm': return html();
    case 'css': return css();
    case 'json': return json();
    case 'md': case 'markdown': return markdown();
    case 'go': return go();
  }
  return [];
}

// isBinary: a NUL byte in the first 8000 bytes (git's rule), or bytes that are not UTF-8.
function decodeText(buf) {
  if (buf.subarray(0, 8000).includes(0)) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    return null;
  }
}

const dirOf = (p) => (p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '.');
const join = (dir, name) => (dir === '.' || dir === '' ? name : `${dir}/${name}`);

export class FilesPane {
  constructor() {
    this.open = null; // {path, etag, saved (text), readOnly}
    this.selected = null; // {path, isDir}
    this.expanded = new Set(['.']);
    this.lang = new Compartment();
    this.ro = new Compartment();
    this.tree = h('ul', { class: 'tree', role: 'tree', 'aria-label': 'Files in /workspace' });
    this.notice = h('div', { class: 'notice', id: 'editor-notice', hidden: true });
    this.title = h('span', { class: 'file-title', id: 'file-title' }, 'No file open');
    this.saveBtn = h('button', { id: 'save', onclick: () => this.save(), disabled: true, title: 'Save (Ctrl+S)' }, 'Save');
    this.conflict = h('section', { class: 'conflict', id: 'conflict', hidden: true, 'aria-label': 'Save conflict' });
    this.editorHost = h('div', { class: 'editor', id: 'editor' });
    this.view = new EditorView({
      parent: this.editorHost,
      state: this.newState('', []),
    });
    this.upload = h('input', { type: 'file', multiple: true, hidden: true, onchange: () => this.uploadFiles() });
    const tb = (label, f, id) => h('button', { onclick: f, id }, label);
    this.el = h('div', { class: 'pane files', id: 'pane-files', role: 'tabpanel', 'aria-labelledby': 'tab-files' },
      h('nav', { class: 'sidebar', 'aria-label': 'Workspace files' },
        h('div', { class: 'toolbar', role: 'toolbar', 'aria-label': 'File actions' },
          tb('New file', () => this.create(false), 'new-file'),
          tb('New folder', () => this.create(true), 'new-folder'),
          tb('Rename', () => this.rename(), 'rename'),
          tb('Delete', () => this.remove(), 'delete'),
          tb('Upload', () => this.upload.click(), 'upload'),
          tb('Download', () => this.download(), 'download'),
          tb('Refresh', () => this.refresh(), 'refresh'),
          this.upload),
        this.tree),
      h('section', { class: 'editor-col', 'aria-label': 'Editor' },
        h('div', { class: 'editor-head' }, this.title, this.saveBtn),
        this.notice, this.conflict, this.editorHost));
    this.el.addEventListener('keydown', (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === 's') {
        e.preventDefault();
        this.save();
      }
    });
  }

  newState(doc, lang, readOnly = false) {
    return EditorState.create({
      doc,
      extensions: [
        basicSetup,
        keymap.of([{ key: 'Mod-s', run: () => { this.save(); return true; } }]),
        this.lang.of(lang),
        this.ro.of([EditorState.readOnly.of(readOnly), EditorView.editable.of(!readOnly)]),
        EditorView.updateListener.of((u) => { if (u.docChanged) this.updateDirty(); }),
        EditorView.contentAttributes.of({ 'aria-label': 'File content' }),
      ],
    });
  }

  get dirty() {
    return !!this.open && !this.open.readOnly && this.view.state.doc.toString() !== this.open.saved;
  }

  updateDirty() {
    if (!this.open) return;
    this.title.textContent = this.open.path + (this.dirty ? ' •' : '');
    this.saveBtn.disabled = !this.dirty;
  }

  showNotice(msg) {
    this.notice.textContent = msg;
    this.notice.hidden = !msg;
  }

  async refresh() {
    try {
      const items = await this.listTree('.', 0);
      this.tree.replaceChildren(...items);
    } catch (e) {
      fail(e);
    }
  }

  async listTree(dir, depth) {
    const list = await call('GET', `/files/list?path=${q(dir)}`);
    list.entries.sort((a, b) => (b.is_dir - a.is_dir) || a.name.localeCompare(b.name));
    const out = [];
    for (const e of list.entries) {
      const sel = this.selected && this.selected.path === e.path;
      const label = h('button', {
        class: 'entry' + (sel ? ' selected' : '') + (this.open && this.open.path === e.path ? ' open' : ''),
        role: 'treeitem', 'aria-selected': sel ? 'true' : 'false', 'data-path': e.path,
        'aria-expanded': e.is_dir ? String(this.expanded.has(e.path)) : undefined,
        style: `padding-left:${0.5 + depth}em`,
        title: e.is_dir ? e.path + '/' : `${e.path} (${fmtSize(e.size)})`,
        onclick: () => this.activate(e),
      }, (e.is_dir ? (this.expanded.has(e.path) ? '▾ ' : '▸ ') : '  ') + e.name + (e.is_dir ? '/' : ''));
      out.push(h('li', { role: 'none' }, label));
      if (e.is_dir && this.expanded.has(e.path)) out.push(...await this.listTree(e.path, depth + 1));
    }
    return out;
  }

  async activate(e) {
    this.selected = { path: e.path, isDir: e.is_dir };
    if (e.is_dir) {
      if (this.expanded.has(e.path)) this.expanded.delete(e.path);
      else this.expanded.add(e.path);
      await this.refresh();
      return;
    }
    await this.openFile(e.path, e.size);
  }

  async openFile(path, size = 0) {
    if (this.dirty && this.open.path !== path && !confirm(`Discard your unsaved changes to ${this.open.path}?`)) return;
    this.hideConflict();
    if (size > NOT_SHOWN_OVER) {
      this.setDoc({ path, etag: null, saved: '', readOnly: true }, '');
      this.showNotice(`${path} is ${fmtSize(size)}: too large to open here. Download it, or use the terminal.`);
      return;
    }
    try {
      const res = await call('GET', `/files/content?path=${q(path)}`, { raw: true });
      const buf = new Uint8Array(await res.arrayBuffer());
      const text = decodeText(buf);
      if (text === null) {
        this.setDoc({ path, etag: null, saved: '', readOnly: true }, '');
        this.showNotice(`${path} is a binary file (${fmtSize(buf.length)}): not shown. Download it to look inside.`);
      } else {
        const readOnly = buf.length > READ_ONLY_OVER;
        this.setDoc({ path, etag: res.headers.get('ETag'), saved: text, readOnly }, text);
        this.showNotice(readOnly ? `Read-only: ${path} is ${fmtSize(buf.length)}, over the editor's ${fmtSize(READ_ONLY_OVER)}. Edit it in the terminal.` : '');
      }
      say(`Opened ${path}`);
      await this.refresh();
    } catch (e) {
      fail(e);
    }
  }

  setDoc(open, text) {
    this.open = open;
    this.view.setState(this.newState(text, languageOf(open.path), open.readOnly));
    this.updateDirty();
  }

  // save writes the editor's text if the file is still what was opened (If-Match).
  async save(force = false, etag = this.open && this.open.etag) {
    if (!this.open || this.open.readOnly) return;
    const text = this.view.state.doc.toString();
    const headers = {};
    if (etag && !force) headers['If-Match'] = etag;
    else if (force && etag) headers['If-Match'] = etag;
    try {
      const res = await call('PUT', `/files/content?path=${q(this.open.path)}`, { body: text, headers, raw: true });
      this.open.etag = res.headers.get('ETag');
      this.open.saved = text;
      this.hideConflict();
      this.updateDirty();
      say(`Saved ${this.open.path}`);
    } catch (e) {
      if (e.status === 412) await this.showConflict(text, e.message);
      else fail(e);
    }
  }

  async showConflict(mine, why) {
    let disk = '', diskEtag = null, gone = false;
    try {
      const res = await call('GET', `/files/content?path=${q(this.open.path)}`, { raw: true });
      const buf = new Uint8Array(await res.arrayBuffer());
      disk = decodeText(buf) ?? `(binary, ${fmtSize(buf.length)})`;
      diskEtag = res.headers.get('ETag');
    } catch (e) {
      if (e.status !== 404) return fail(e);
      gone = true;
    }
    say(`Not saved: ${why}`, 'error');
    const path = this.open.path;
    this.conflict.replaceChildren(
      h('h2', {}, `${path} changed on disk since you opened it`),
      h('p', {}, gone ? 'It was deleted. Your version is on the left.' : 'Your version is on the left, the one on disk on the right. Nothing was overwritten.'),
      h('div', { class: 'conflict-actions' },
        h('button', { id: 'conflict-mine', onclick: () => this.save(true, diskEtag) }, gone ? 'Save mine (create it again)' : 'Save mine over the disk\'s'),
        gone ? null : h('button', { id: 'conflict-disk', onclick: () => this.takeDisk(disk, diskEtag) }, 'Take the disk\'s version'),
        h('button', { id: 'conflict-cancel', onclick: () => this.hideConflict() }, 'Keep editing')),
    );
    const mergeHost = h('div', { class: 'merge', id: 'merge' });
    this.conflict.append(mergeHost);
    this.merge?.destroy();
    this.merge = new MergeView({
      a: { doc: mine, extensions: [EditorState.readOnly.of(true), EditorView.editable.of(false)] },
      b: { doc: disk, extensions: [EditorState.readOnly.of(true), EditorView.editable.of(false)] },
      parent: mergeHost,
    });
    this.conflict.hidden = false;
    this.conflict.querySelector('button').focus();
  }

  takeDisk(text, etag) {
    this.setDoc({ path: this.open.path, etag, saved: text, readOnly: false }, text);
    this.hideConflict();
    say(`Took the disk's version of ${this.open.path}`);
  }

  hideConflict() {
    this.merge?.destroy();
    this.merge = null;
    this.conflict.hidden = true;
    this.conflict.replaceChildren();
  }

  // reload re-reads the open file after the workspace changed under it (an undo): a clean
  // editor follows the disk; a dirty one keeps its text and its old tag, so its save conflicts.
  async reload() {
    await this.refresh();
    if (!this.open || this.dirty) return;
    const path = this.open.path;
    try {
      const res = await call('GET', `/files/content?path=${q(path)}`, { raw: true });
      const buf = new Uint8Array(await res.arrayBuffer());
      const text = decodeText(buf);
      if (text !== null && text !== this.open.saved) this.setDoc({ path, etag: res.headers.get('ETag'), saved: text, readOnly: buf.length > READ_ONLY_OVER }, text);
      else if (text !== null) this.open.etag = res.headers.get('ETag');
    } catch (e) {
      if (e.status === 404) this.showNotice(`${path} no longer exists on disk.`);
    }
  }

  targetDir() {
    if (!this.selected) return '.';
    return this.selected.isDir ? this.selected.path : dirOf(this.selected.path);
  }

  async create(dir) {
    const at = this.targetDir();
    const name = prompt(`New ${dir ? 'folder' : 'file'} in /workspace/${at === '.' ? '' : at + '/'}`);
    if (!name) return;
    const path = join(at, name.replace(/^\/+/, ''));
    try {
      if (dir) await call('POST', '/files/mkdir', { body: { path, parents: true } });
      else await call('PUT', `/files/content?path=${q(path)}`, { body: '' });
      if (at !== '.') this.expanded.add(at);
      this.selected = { path, isDir: dir };
      say(`Created ${path}`);
      if (dir) await this.refresh();
      else await this.openFile(path, 0);
    } catch (e) {
      fail(e);
    }
  }

  async rename() {
    if (!this.selected) return say('Select a file or folder first', 'error');
    const from = this.selected.path;
    const to = prompt(`Rename or move ${from} to (a path in /workspace)`, from);
    if (!to || to === from) return;
    try {
      await call('POST', '/files/move', { body: { from, to } });
      if (this.open && this.open.path === from) { this.open.path = to; this.updateDirty(); }
      this.selected.path = to;
      say(`Moved ${from} to ${to}`);
      await this.refresh();
    } catch (e) {
      fail(e);
    }
  }

  async remove() {
    if (!this.selected) return say('Select a file or folder first', 'error');
    const { path, isDir } = this.selected;
    if (!confirm(`Delete ${path}${isDir ? ' and everything in it' : ''}? The timeline can bring it back.`)) return;
    try {
      await call('DELETE', `/files/content?path=${q(path)}${isDir ? '&recursive=true' : ''}`);
      if (this.open && this.open.path === path) { this.open = null; this.view.setState(this.newState('', [])); this.title.textContent = 'No file open'; this.saveBtn.disabled = true; }
      this.selected = null;
      say(`Deleted ${path}`);
      await this.refresh();
    } catch (e) {
      fail(e);
    }
  }

  async uploadFiles() {
    const at = this.targetDir();
    for (const f of this.upload.files) {
      const path = join(at, f.name);
      try {
        say(`Uploading ${path} (${fmtSize(f.size)})…`);
        await call('PUT', `/files/content?path=${q(path)}`, { body: f });
        say(`Uploaded ${path}`);
      } catch (e) {
        fail(e);
      }
    }
    this.upload.value = '';
    if (at !== '.') this.expanded.add(at);
    await this.refresh();
  }

  download() {
    if (!this.selected || this.selected.isDir) return say('Select a file to download', 'error');
    const a = h('a', { href: `${base}/files/content?path=${q(this.selected.path)}`, download: this.selected.path.split('/').pop() });
    document.body.append(a);
    a.click();
    a.remove();
  }
}
