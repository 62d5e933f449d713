import { h } from './api.js';

// The status line: one live region for what the last action did.
export const statusEl = h('div', { class: 'status', role: 'status', 'aria-live': 'polite', id: 'status' });

export function say(msg, kind = 'info') {
  statusEl.textContent = msg;
  statusEl.dataset.kind = kind;
}

export function fail(e) {
  say(e.message || String(e), 'error');
}
