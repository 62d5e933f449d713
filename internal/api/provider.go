package api

import "time"

// Provider steps, as named in POST /api/v1/sandboxes/{id}/app/{step}.
const (
	StepNew      = "new"
	StepBuild    = "build"
	StepValidate = "validate"
	StepPackage  = "package"
	StepPreview  = "preview"
	StepClean    = "clean"
)

// ProviderRequest is the body of POST /api/v1/sandboxes/{id}/app/{step}: a runtime
// provider's step, run inside the sandbox.
type ProviderRequest struct {
	// Runtime is the provider to use: "static", "node" or "go". Required for "new";
	// otherwise empty means the one that recognises the project.
	Runtime string `json:"runtime,omitempty"`
	// Dir is the project's directory, relative to the workspace; empty means the
	// workspace itself.
	Dir string `json:"dir,omitempty"`
	// Name is the new project's name ("new" only).
	Name string `json:"name,omitempty"`
	// TimeoutSeconds bounds each command of the step, in seconds: 0 means
	// DefaultStepTimeout, and at most MaxStepTimeout. A command past it is killed and the
	// step fails with limit "timeout".
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Bounds of ProviderRequest.TimeoutSeconds.
const (
	DefaultStepTimeout = 10 * time.Minute
	MaxStepTimeout     = time.Hour
)

// Provider event types, the "event:" field of the step's text/event-stream.
const (
	EventProgress = "progress"
	EventLog      = "log"
	EventResult   = "result"
)

// ProviderEvent is one event of a provider step's stream: progress of a command, a line
// it printed, or the step's result (always last).
type ProviderEvent struct {
	// Type is "progress", "log" or "result".
	Type string `json:"type"`
	// Step is the step being run: "scaffold", "resolve", "build", "validate", "package"
	// or "preview".
	Step string `json:"step,omitempty"`
	// Command is the label of the command a progress or log event is about.
	Command string `json:"command,omitempty"`
	// Index and Total place the command among the step's commands (1-based).
	Index int `json:"index,omitempty"`
	Total int `json:"total,omitempty"`
	// State of a progress event: "running", "ok" or "failed".
	State string `json:"state,omitempty"`
	// Stream of a log event: "stdout", "stderr" or "paddock" (the provider's own note).
	Stream string `json:"stream,omitempty"`
	// Line is one line of a log event, without its newline.
	Line string `json:"line,omitempty"`
	// Error says why the command or the step failed.
	Error string `json:"error,omitempty"`
	// Limit names the limit that ended the failed command, if one did (one of the Limit*
	// names: timeout, memory, pids, file_size, disk).
	Limit string `json:"limit,omitempty"`
	// Runtime and Dir name the project a result is about.
	Runtime string `json:"runtime,omitempty"`
	Dir     string `json:"dir,omitempty"`
	// Preview is the dev server a "preview" result found.
	Preview *ProviderPreview `json:"preview,omitempty"`
	// URL is where a preview is served.
	URL string `json:"url,omitempty"`
	// Artifact is the archive a "package" result made, relative to the workspace.
	Artifact string `json:"artifact,omitempty"`
	// ArtifactID is the stored artifact a "package" result made (GET /api/v1/artifacts/{id}).
	ArtifactID string `json:"artifact_id,omitempty"`
}

// ProviderPreview is how a provider serves a project while it is developed.
type ProviderPreview struct {
	// Command runs the dev server, in Dir.
	Command []string `json:"command"`
	Dir     string   `json:"dir,omitempty"`
	// Env is added to the sandbox's environment for it.
	Env []string `json:"env,omitempty"`
	// Port is where it listens.
	Port int `json:"port"`
	// Ready is the HTTP path that answers 2xx once the server is up.
	Ready string `json:"ready"`
	// HotReload says the server reloads changed files itself: a workspace change (an
	// undo) need not restart it.
	HotReload bool `json:"hot_reload"`
}

// Artifact is a packaged build the control plane stores: its ID is the archive's SHA-256.
type Artifact struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id"`
	Runtime   string `json:"runtime"`
	// Dir is the project's directory in the sandbox's workspace.
	Dir  string `json:"dir"`
	Size int64  `json:"size"`
	// SBOM is the SHA-256 of the artifact's CycloneDX SBOM.
	SBOM      string    `json:"sbom"`
	CreatedAt time.Time `json:"created_at"`
	// Replica is the replica whose data directory holds the bytes (with replicas).
	Replica string `json:"replica,omitempty"`
	// Copies are where the bytes are kept: ArtifactCopyLocal, and ArtifactCopyBucket once
	// their copy is in the backup store.
	Copies []string `json:"copies"`
	// Bucket is the state of the copy in the backup store (pending, retrying, stored,
	// failed); empty without a store. BucketError is its last upload's error.
	Bucket      string `json:"bucket,omitempty"`
	BucketError string `json:"bucket_error,omitempty"`
	// Manifest is in an artifact read alone, not in a list.
	Manifest *ArtifactManifest `json:"manifest,omitempty"`
}

// Where an artifact's bytes are kept.
const (
	ArtifactCopyLocal  = "local"  // the data directory of the replica that packaged it
	ArtifactCopyBucket = "bucket" // the backup store, sealed
)

// ArtifactList is GET /api/v1/artifacts: the user's artifacts, newest first.
type ArtifactList struct {
	Artifacts []Artifact `json:"artifacts"`
}

// ArtifactManifest says what an artifact is made of and from.
type ArtifactManifest struct {
	Runtime string `json:"runtime"`
	Dir     string `json:"dir"`
	// Toolchain is each tool's version as the sandbox reported it ("node": "v18.19.0").
	Toolchain map[string]string `json:"toolchain,omitempty"`
	// Checkpoint is the workspace checkpoint the build started from.
	Checkpoint string `json:"checkpoint,omitempty"`
	SHA256     string `json:"sha256"`
	Size       int64  `json:"size"`
	// Lockfile is the file the SBOM was made from ("" when the project has none).
	Lockfile string         `json:"lockfile,omitempty"`
	Files    []ArtifactFile `json:"files"`
}

// ArtifactFile is one regular file of an artifact's archive.
type ArtifactFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}
