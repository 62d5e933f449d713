package coder

// SetChromiumBinaries replaces the browser binaries looked for first, returning the old.
func SetChromiumBinaries(bins []string) []string {
	old := chromiumBinaries
	chromiumBinaries = bins
	return old
}
