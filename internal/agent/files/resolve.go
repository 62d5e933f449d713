package files

// Resolve returns the path, relative to the workspace ("." for the workspace itself), that
// every operation of the Service acts on for a caller's path p, or the error it would
// answer. The control plane decides its file policy on this path, so that what it decides
// and what the agent touches are the same lexical path.
func Resolve(p string) (string, error) { return resolve(p) }
