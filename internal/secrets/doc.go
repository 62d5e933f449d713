// Package secrets is the users' secrets store of the control plane (ADR-0003): values a
// user puts (PUT /me/secrets/{name}) for the broker to lease to their sandboxes later,
// encrypted at rest in the control plane's database, under keys kept outside it.
//
// # Threat model
//
// The database file is assumed to leak (a backup, a copied data dir): it holds each value
// only as AES-256-GCM ciphertext, and nothing that decrypts it. The keys are in the key
// file (default <data_dir>/secrets.key, 0600; Open refuses one that others may read) or in
// PADDOCK_SECRETS_KEY, and should be backed up apart from the database. Whoever has both
// reads every secret; so does the control-plane process, which is trusted.
//
// Someone who can write the database but has no key can destroy values, not read or forge
// them, and cannot move them undetected: each ciphertext is bound, as associated data,
// to its owner's user ID, its name and its version (which grows on every put), so a
// ciphertext copied to another user or name, or an older version pasted over a newer
// one, fails to decrypt, with [errdefs.ErrDataLoss] naming the secret. Not defended: a
// whole row (version included) rolled back to an earlier copy, or a deleted secret's old
// row put back — detecting those needs state outside the database, which is not kept.
//
// A value never reaches a log, an error or an API answer by accident: [Value] prints,
// logs and marshals as "[redacted]", errors name secrets but never carry values, and the
// audit log records put and delete with the name and version only.
//
// # Keys
//
// The keyring is a small text file, so that an operator can read and back it up:
//
//	paddock-keyring 1
//	primary 2
//	key 1 <standard base64 of 32 bytes>
//	key 2 <standard base64 of 32 bytes>
//
// The primary encrypts new values; the others decrypt what is still under them. Keyring
// keys encrypt the values directly, not through per-value data keys (envelope
// encryption): a value is at most 64 KiB and a user has at most 100, so a rotation that
// re-encrypts every value costs little more than re-wrapping as many data keys would,
// and one format with one AEAD step is less to get wrong. Envelope encryption earns its
// place when the key-encryption key moves to a KMS, which is not built.
//
// PADDOCK_SECRETS_KEY, when set, replaces the file: one base64 key (version 1) or a whole
// keyring in the file's format. Both at once is an error, as is a key file with a
// first start's new key while the database already holds secrets.
//
// # Checking the key
//
// The database keeps, for every key version it has seen, a known text encrypted under
// that version (table secret_keys). Open decrypts each one with the keyring's key of the
// same version: a mismatch means a wrong key file, and Open fails naming it and what to do
// rather than read garbage or write values that the right key could not read. A version
// that secrets use and the keyring lacks fails the same way.
//
// # Rotation
//
// [Secrets.RotateKey] (`paddock secrets rotate-key`) writes the key file with a new
// version made primary, then re-encrypts every secret under it in one transaction. The
// file goes first so that no committed row is ever under a key that is not on disk;
// a process that still runs with the old keyring re-reads the file when it meets the
// new version. Rows that stay under an older version (written by such a process in
// between, or left by a rotation that failed after writing the file) are re-encrypted
// under the primary when next read, and by the next rotation.
//
// Old versions stay in the key file: paddock never drops one itself, because a backup of
// the database taken before the rotation still needs it. Once no database you might
// restore uses a version, delete its "key" line by hand; Open refuses a keyring that
// lacks a version in use, so a mistake is reported, not silent.
//
// # Limits
//
// Names are 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit; a
// value is 1 byte to 64 KiB; a user has at most 100 secrets ([errdefs.ErrLimitExceeded]).
package secrets
