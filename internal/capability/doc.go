// Package capability is paddock's capability tokens: signed grants in the shape of the
// Dyad seed — a subject, a resource, the actions allowed on it and constraints — that the
// control plane mints, a holder may narrow but never widen, and a verifier checks before
// a file, exec or network request goes ahead.
//
//	subject:     sandbox:sb-abc
//	resource:    file:/workspace/src
//	actions:     [write]
//	constraints: {max_size: 100MB, allowed_extensions: [.ts, .tsx, .css], expiry: 2026-09-01T12:00:00Z}
//
// A [Minter] mints tokens ([Claims] in, a [Token] out); anyone holding a token may
// append a [Caveat] with [Attenuate], without a key; a [Verifier] decides a [Request]
// under a token, and says precisely why when it refuses (an [*Error] with a [Reason]).
//
// # Threat model
//
// A token's holder is not trusted: an AI agent in a sandbox, or whoever controls it, may
// read, copy, cut, reorder, edit and invent tokens. Defended:
//
//   - Forgery and tampering. A token is a chain of HMAC-SHA256 signatures (below) under
//     a root key that never leaves the control plane. A token not minted under a key the
//     verifier holds, or changed since — any field, any caveat edited, removed or moved —
//     is refused with [ReasonBadSignature]; signatures are compared in constant time.
//   - Widening. A holder can only append caveats, and a request must satisfy the minted
//     claims and every caveat, each on its own: a caveat that names a broader path, more
//     actions, a bigger size or a later expiry does not loosen the earlier, narrower
//     one, which still decides. Nothing a holder can append removes a constraint.
//   - Theft across sandboxes. A token is for one subject, and the verifier's caller takes
//     the request's subject from the channel the request arrived on, never from the token
//     or the request body: a token leaked out of one sandbox is refused for any other.
//   - Keys in sandboxes. HMAC keys verify and mint alike, so the agent inside a sandbox
//     cannot hold a root key. It holds keys derived for its own subject and the [Agent]
//     audience only ([Keyring.ForAgent]); a sandbox that takes its agent over can mint
//     tokens its own agent accepts (it already controls that agent) and nothing the
//     control plane, which takes only [ControlPlane] tokens, or another sandbox accepts.
//   - Confusion. The wire format is canonical: one token has one encoding, a decoder
//     re-encodes what it read and refuses any difference, and the signature covers
//     exactly the bytes decoded. A token over 4 KiB or with over 32 caveats, an unknown
//     version, field, action or caveat kind is refused as malformed, never half-read.
//
// Not defended: a token is a bearer credential within its subject — any process of the
// subject's sandbox that obtains it may use it until it expires or is revoked; hand
// processes attenuated tokens, short-lived. A token is only as good as the caller's
// resolution of the resource: the verifier compares strings, so the caller passes the
// path it will really open (symlinks resolved, as the agent's jail does) and the
// program it will really run. Revocation is as fresh as the [RevocationList] the
// verifier asks; when asking fails the token is refused.
//
// # Resources
//
// A resource is a scheme and a value; a token's resource (and a caveat's) is a grant,
// a request's is one concrete thing. Grants are kept in canonical form.
//
//   - file:/absolute/path — a path and everything under it, compared segment by segment:
//     file:/workspace/src covers file:/workspace/src and file:/workspace/src/a.ts, not
//     file:/workspace/srcx; file:/ covers every path. Paths are cleaned ("//", "." and a
//     trailing slash go); a relative path, a ".." segment or a NUL byte is refused.
//   - exec:name — a program by its base name (letters, digits, '.', '_', '+', '-'), or
//     exec:* for any program. A request names the program it runs, without a path.
//   - net:host — a host name, exactly (lower-cased, without a trailing dot; xn-- form for
//     internationalised names), or net:*.example.com for every name under example.com
//     (not example.com itself); or an IP address, exactly (net:10.0.0.1, net:[::1]).
//     Ports are not part of it: the egress proxy and the policy decide those.
//
// # Actions and constraints
//
// Actions are a closed set: read, write (create or change a file), delete (file:),
// exec (exec:) and connect (net:). Minted claims may grant only actions that suit the
// resource's kind. Constraints: max_size (checked against [Request].Size), allowed
// extensions (file: only: the file name must end in one of them, case-sensitively, as
// in the policy engine; ".d.ts" works — and a directory's name too, so such a token does
// not list directories), not_before and expiry, which minted claims must have. Times are kept to the second: not_before rounds up, expiry down.
//
// # Wire format
//
//	token   = "pdk1." base64url-without-padding(body)
//	body    = record(claims) *record(caveat) signature
//	record  = uint16 length, then that many bytes of payload
//	claims  = 0x01 (format version), audience (1 control plane, 2 agent),
//	          uint32 key ID, 16-byte token ID, uint16-length subject, scope
//	caveat  = 0x01 (first-party restriction), scope
//	scope   = presence byte (bit 0 resource, 1 actions, 2 max_size, 3 extensions,
//	          4 not_before, 5 expiry), then the fields present, in that order:
//	          uint16-length resource; actions bits (read 0, write 1, delete 2, exec 3,
//	          connect 4); uint64 max_size; uint8 count of (uint8-length extension),
//	          sorted and distinct; int64 not_before and int64 expiry in Unix seconds
//	signature = 32 bytes
//
// Integers are big-endian; a field present holds a non-zero value.
//
// # Signatures
//
// Macaroon-style: sig₀ = HMAC-SHA256(K, claims), sigᵢ = HMAC-SHA256(sigᵢ₋₁, caveatᵢ),
// and the token carries the last one. K is derived from the root key the key ID names,
// per audience and subject: K = HMAC-SHA256(root, "paddock capability key v1" 0x00
// audience subject). To append a caveat a holder computes the next link from the
// signature it has; to remove the last caveat it would need the signature before it,
// which HMAC does not give back, and to change anything earlier, a key.
//
// Root keys are versioned ([Keyring]): the primary signs, older keys verify what was
// minted under them until they are dropped, so keys rotate with [Keyring.WithKey] and
// no token changes. Keys print and log as "[redacted]".
//
// # Revocation
//
// By token ID, which caveats keep: revoking a token revokes everything attenuated from
// it. The verifier asks a [RevocationList] after the signature checks out;
// [MemoryRevocationList] is the in-memory one.
package capability
