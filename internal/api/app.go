package api

import "time"

// AppStatus is GET /api/v1/sandboxes/{id}/app: what the sandbox's supervised app (its
// template's command) is doing, as its agent sees it. The agent restarts an app that exits,
// with exponential backoff, and never goes down with it.
type AppStatus struct {
	// State is "starting", "running" or "backoff" (exited, waiting to start again).
	State string `json:"state"`
	// Restarts counts the starts after the first.
	Restarts int `json:"restarts"`
	// Since is when the app entered State.
	Since time.Time `json:"since"`
	// NextStart is when an app in backoff starts again.
	NextStart *time.Time `json:"next_start,omitempty"`
	// LastExit is how the previous run ended; absent before the first exit.
	LastExit *AppExit `json:"last_exit,omitempty"`
	// Output is the end (at most 4 KiB) of the current run's combined stdout and stderr,
	// with invalid UTF-8 replaced; absent in "backoff".
	Output string `json:"output,omitempty"`
	// OutputTruncated says the current run wrote more than Output holds.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// LastOutput is the end (at most 4 KiB) of the previous run's combined stdout and
	// stderr, with invalid UTF-8 replaced.
	LastOutput string `json:"last_output,omitempty"`
	// LastOutputTruncated says the previous run wrote more than LastOutput holds.
	LastOutputTruncated bool `json:"last_output_truncated,omitempty"`
	// URL is the sandbox's own apps host, where the app is served.
	URL string `json:"url,omitempty"`
}

// AppExit is how one run of the app ended.
type AppExit struct {
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
}
