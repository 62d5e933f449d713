// Package auth is the control plane's authentication: password accounts with
// Argon2id hashes, single-use recovery codes, server-side sessions in cookies with
// CSRF protection, API tokens for the CLI and SDKs, and login rate limiting, all on
// top of package store. It holds the primitives; the HTTP pages and endpoints that
// use them live with the server.
//
// # Threat model
//
// The attacker is anyone who can reach the control plane over the network, and any
// web page a logged-in user visits. We defend against:
//
//   - Online password guessing: failed logins on one account from one client address
//     back off after 5 (each further attempt waits twice as long as the one before, up
//     to 15 minutes), so guessing slows while the owner at another address still signs
//     in; failed logins per address are limited whatever the account (20 per 15
//     minutes; IPv6 by /64). Counts live in the database so a restart does not reset
//     them. An attempt is counted before its password is checked (and un-counted if it
//     succeeds), so parallel requests get no extra guesses; a limited attempt is
//     refused before any password is checked. Recovery-code attempts share these
//     limits. New passwords on a list of common and breached passwords, or made of
//     repeats or sequences, are refused.
//   - Registration floods: the public page registers by the configured mode (open,
//     invite codes, closed) and at most 10 attempts per address an hour.
//   - A stolen API token: tokens expire (30 days by default), hold only the scopes
//     they were given, cannot mint broader or longer-lived tokens, and all die with a
//     password change or an account recovery.
//   - Account enumeration: an unknown username and a wrong password give the same
//     error, and an unknown username still costs one Argon2id verification, so
//     neither the answer nor its timing says whether the account exists.
//     Registration necessarily says that a name is taken.
//   - A leaked database (backup, copied data dir): it holds only Argon2id password
//     hashes and SHA-256 digests of session IDs, API tokens and recovery codes, all
//     of which are 120+ bit random values, so nothing in it can be replayed. CSRF
//     tokens are derived from the session ID and are not stored at all.
//   - Cross-site request forgery: session cookies are SameSite=Lax, and every
//     state-changing request authenticated by a cookie must carry the session's CSRF
//     token and, from a browser, a same-origin Origin / Sec-Fetch-Site.
//   - Session theft through the page: cookies are HttpOnly; over TLS they are
//     __Host- prefixed and Secure, so a sibling subdomain or a plain-http response
//     cannot set or overwrite them.
//   - Secrets in logs: every secret-bearing type (Password, SessionID, Token,
//     RecoveryCode) prints and logs as "[redacted]"; audit events carry IDs, never
//     secrets.
//
// Not defended here: a compromised host or control-plane process (it sees
// passwords as they arrive); an attacker who can read the user's cookie jar or the
// CLI's token file; guessing at one account from very many addresses (each gets its
// own backoff; the password list makes the guesses that work rare); traffic
// interception on plain http, which is only intended for loopback; a client address spoofed through an untrusted X-Forwarded-For (the edge decides
// which proxy to believe, see [ClientFromRequest]). Passkeys are not implemented yet.
package auth
