package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

type openAPI struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// api/openapi.yaml documents exactly the API's routes: none missing, none invented.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	e := servertest.Start(t)
	served := map[server.Route]bool{}
	for _, r := range e.Server.Routes() {
		served[r] = true
	}
	documented := map[server.Route]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented[server.Route{Method: strings.ToUpper(method), Pattern: path}] = true
		}
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("route %s %s is not in api/openapi.yaml", r.Method, r.Pattern)
		}
	}
	for r := range documented {
		if strings.HasPrefix(r.Pattern, "/api/") && !served[r] {
			t.Errorf("api/openapi.yaml documents %s %s, which the server does not serve", r.Method, r.Pattern)
		}
		if strings.HasPrefix(r.Pattern, "/api/") {
			continue
		}
		// The other documented routes (auth, health, metrics) answer: not 404 or 405.
		req, _ := http.NewRequest(r.Method, e.URL+r.Pattern, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("documented %s %s answers %d", r.Method, r.Pattern, resp.StatusCode)
		}
	}
}

// The documented schemas have exactly the JSON fields of the Go types that encode them.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	types := map[string]any{
		"User": api.User{}, "Credentials": api.Credentials{}, "Registration": api.Registration{},
		"RegisterRequest": api.RegisterRequest{}, "CreateInviteRequest": api.CreateInviteRequest{}, "Invite": api.Invite{}, "InviteList": api.InviteList{},
		"RecoverRequest": api.RecoverRequest{}, "Session": api.Session{}, "TokenRequest": api.TokenRequest{},
		"CreateTokenRequest": api.CreateTokenRequest{}, "Token": api.Token{}, "TokenList": api.TokenList{},
		"RoleRequest": api.RoleRequest{}, "PromoteRequest": api.PromoteRequest{}, "Limits": api.Limits{}, "Template": api.Template{}, "Sandbox": api.Sandbox{},
		"SandboxList": api.SandboxList{}, "CreateSandboxRequest": api.CreateSandboxRequest{}, "Roles": api.Roles{},
		"ExecRequest": api.ExecRequest{}, "ExecResult": api.ExecResult{}, "FileInfo": api.FileInfo{},
		"FileList": api.FileList{}, "FileMkdirRequest": api.FileMkdirRequest{}, "FileMoveRequest": api.FileMoveRequest{},
		"ArchiveResult": api.ArchiveResult{},
		"Event":         api.Event{}, "EventList": api.EventList{}, "MCPToolCall": api.MCPToolCall{}, "Health": api.Health{},
		"Error": api.Error{}, "PutSecretRequest": api.PutSecretRequest{}, "Secret": api.Secret{}, "SecretList": api.SecretList{},
		"Checkpoint": api.Checkpoint{}, "History": api.History{}, "CheckpointRequest": api.CheckpointRequest{},
		"CheckpointResult": api.CheckpointResult{}, "RestoreRequest": api.RestoreRequest{}, "RestoreResult": api.RestoreResult{},
		"HistoryDiff": api.HistoryDiff{}, "Transaction": api.Transaction{}, "BeginRequest": api.BeginRequest{},
		"CommitResult": api.CommitResult{}, "RollbackResult": api.RollbackResult{},
		"SandboxPolicy":     api.SandboxPolicy{},
		"CapabilityRequest": api.CapabilityRequest{}, "Capability": api.Capability{}, "CapabilityList": api.CapabilityList{},
		"ChangePasswordRequest": api.ChangePasswordRequest{}, "RenewRecoveryCodesRequest": api.RenewRecoveryCodesRequest{},
		"RecoveryCodes": api.RecoveryCodes{}, "AccountInfo": api.AccountInfo{}, "UserList": api.UserList{},
		"ProviderRequest": api.ProviderRequest{}, "ProviderEvent": api.ProviderEvent{},
		"Artifact": api.Artifact{}, "ArtifactList": api.ArtifactList{}, "ArtifactManifest": api.ArtifactManifest{},
	}
	for name, v := range types {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing", name)
			continue
		}
		var documented, actual []string
		for p := range schema.Properties {
			documented = append(documented, p)
		}
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				actual = append(actual, tag)
			}
		}
		slices.Sort(documented)
		slices.Sort(actual)
		if !slices.Equal(documented, actual) {
			t.Errorf("schema %s: documented %v, the Go type has %v", name, documented, actual)
		}
	}
}

// Every operation has an operationId, unique in the file: generated clients name their
// methods by it.
func TestOpenAPIOperationIDs(t *testing.T) {
	doc := loadOpenAPI(t)
	seen := map[string]string{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			m, _ := op.(map[string]any)
			id, _ := m["operationId"].(string)
			where := strings.ToUpper(method) + " " + path
			if id == "" {
				t.Errorf("%s has no operationId", where)
				continue
			}
			if other, dup := seen[id]; dup {
				t.Errorf("operationId %s names both %s and %s", id, other, where)
			}
			seen[id] = where
		}
	}
}

// api/openapi.yaml passes two published linters: Redocly's CLI (its recommended rules,
// tools/openapi/redocly.yaml; no error and no warning) and swagger-cli's validation.
// Both are installed from tools/openapi/package-lock.json by make setup.
func TestOpenAPILint(t *testing.T) {
	dir, err := filepath.Abs("../../tools/openapi")
	if err != nil {
		t.Fatal(err)
	}
	bin := func(name string) string {
		p := filepath.Join(dir, "node_modules", ".bin", name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is not installed: run make setup (npm ci in tools/openapi)", p)
		}
		return p
	}
	redocly, swagger := bin("redocly"), bin("swagger-cli")
	spec := filepath.Join(dir, "..", "..", "api", "openapi.yaml")
	out := runLinter(t, dir, redocly, "lint", "--config", "redocly.yaml", "--format=json", spec)
	var report struct {
		Totals   struct{ Errors, Warnings int } `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("redocly lint: %v; output:\n%s", err, out)
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("redocly %s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if report.Totals.Errors+report.Totals.Warnings != len(report.Problems) {
		t.Errorf("redocly lint: %d errors and %d warnings", report.Totals.Errors, report.Totals.Warnings)
	}
	runLinter(t, dir, swagger, "validate", spec)
}

// runLinter runs a linter in dir and returns its standard output; a failed run, which
// for redocly means errors were found, is reported with what it printed.
func runLinter(t *testing.T, dir, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	// No telemetry and no update check: the linters run offline.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("%s %s: %v\n%s%s", filepath.Base(bin), args[0], err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}
