package api

// ArchiveResult answers PUT /api/v1/sandboxes/{id}/files/archive: what the tar archive
// made under Path.
type ArchiveResult struct {
	// Path is the directory the archive was extracted into, relative to the workspace.
	Path  string `json:"path"`
	Files int    `json:"files"`
	Dirs  int    `json:"dirs"`
	// Bytes is the size of the files written.
	Bytes int64 `json:"bytes"`
	// Skipped names the entries not made: symlinks, which the file API does not make.
	Skipped []string `json:"skipped"`
}

// ContentTypeTar is the media type of the files archive, both ways.
const ContentTypeTar = "application/x-tar"
