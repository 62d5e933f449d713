// Package web is the control plane's own browser surface: the sign-in, registration,
// recovery and start pages (/login, /register, /recovery, /start) and the /auth/* endpoints behind
// them, which also answer JSON for the CLI and scripts. It turns HTTP into calls on
// [auth.Service] and tells the rest of the server who a request comes from
// ([Web.Identify]) and whether a state-changing request may proceed ([Web.CheckCSRF]).
// These paths are a compatibility contract (ADR-0004): they stay stable while
// everything else a signed-in browser sees belongs to its sandbox, on apps hosts of
// its own (package origins).
//
// The console (/console) is the one page here that runs script: the user's
// sandboxes, roles, secrets, tokens, account and events, from assets/console.js
// calling /api/v1 with the session cookie and the CSRF token the page carries. It
// adds /auth/password and /auth/recovery-codes, which take a browser session, its
// CSRF token and the current password.
//
// # Threat model
//
// The attacker is anyone on the network, any web page the user visits, and the
// user's own sandbox app, served by the proxy on an apps host: another site, whose
// pages get none of the control plane's cookies. We defend against:
//
//   - Login CSRF (a foreign page signing the victim into the attacker's account):
//     every POST, signed in or not, must pass [auth.Service.CheckOrigin]
//     (Sec-Fetch-Site / Origin); cross-site form posts that a browser does not
//     label are caught by SameSite=Lax and by refusing every content type but a
//     urlencoded form and JSON.
//   - CSRF on signed-in actions (logout, role switch, the console's calls): cookie-authenticated
//     requests must carry the session's CSRF token as well; bearer-token requests
//     carry no ambient credential and are exempt.
//   - Clickjacking and content injection on the pages: CSP default-src 'self' with
//     frame-ancestors 'none', X-Frame-Options DENY, no inline script or style, and
//     html/template escaping of everything echoed (the username typed is kept,
//     the password never is). The console's script builds every element from
//     text nodes, never from HTML strings, so nothing the API returns is markup.
//   - A stolen session turned into a lasting account takeover: changing the password
//     and making new recovery codes both need the current password, counted against
//     the sign-in limits.
//   - Resource exhaustion through bodies: every body is capped at [MaxBody] before
//     it is parsed, and form fields are counted, named and single.
//   - The sandbox app reading or planting control-plane cookies: it is on another
//     host (the control plane's is an IP address by default), and the proxy strips
//     every name in [ReservedCookies] in both directions as well.
//   - Privilege escalation at registration: /auth/register only ever creates plain
//     users; the server makes the first admin itself.
//   - Registration floods: /auth/register registers under the configured mode (open,
//     invite, closed) and the per-address limit of [auth.Service.SignUp], and a new
//     account's sandboxes are made only when it asks (/start, POST /auth/start).
//
// Secrets (passwords, recovery codes, tokens) are never logged and are written to
// a response only once: recovery codes on the page or JSON that answers the
// registration, a token in the answer to POST /auth/token. Every page is
// Cache-Control: no-store so neither lingers in a cache.
package web
