// The desktop's API: the control plane's, on this desktop's own origin, for this sandbox.

export const sandboxID = location.hostname.split('.')[0].replace(/^desktop-/, '');
export const base = `/api/v1/sandboxes/${sandboxID}`;

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// call sends one request, to this sandbox's path (or to path itself when it begins
// /api/); body is JSON unless it is a string, Blob or buffer. raw returns the Response
// (for headers and bytes). A failure throws an APIError with the server's own message.
export async function call(method, path, { body, headers = {}, raw = false } = {}) {
  const opts = { method, headers: { ...headers }, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    if (typeof body === 'string' || body instanceof Blob || body instanceof ArrayBuffer || ArrayBuffer.isView(body)) {
      opts.body = body;
    } else {
      opts.body = JSON.stringify(body);
      opts.headers['Content-Type'] = 'application/json';
    }
  }
  let res;
  try {
    res = await fetch(path.startsWith('/api/') ? path : base + path, opts);
  } catch (e) {
    throw new APIError(0, 'network', 'paddock does not answer (the control plane may be restarting); try again in a moment');
  }
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`, code = '';
    try {
      const j = await res.json();
      msg = j.error.message;
      code = j.error.code;
    } catch { /* not the API's error shape */ }
    if (res.status === 401) {
      msg += ' — use "Sign in again" at the top (your unsaved edits stay until you do)';
      window.dispatchEvent(new CustomEvent('paddock:signedout'));
    }
    throw new APIError(res.status, code, msg);
  }
  if (raw) return res;
  return res.status === 204 ? null : res.json();
}

export const q = (p) => encodeURIComponent(p);

// h makes an element: h('button', {class: 'x', onclick: f}, 'text', child...).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function fmtSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}
