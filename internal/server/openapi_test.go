package server_test

import (
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

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
		"RoleRequest": api.RoleRequest{}, "Limits": api.Limits{}, "Template": api.Template{}, "Sandbox": api.Sandbox{},
		"SandboxList": api.SandboxList{}, "CreateSandboxRequest": api.CreateSandboxRequest{}, "Roles": api.Roles{},
		"ExecRequest": api.ExecRequest{}, "ExecResult": api.ExecResult{}, "FileInfo": api.FileInfo{},
		"FileList": api.FileList{}, "FileMkdirRequest": api.FileMkdirRequest{}, "FileMoveRequest": api.FileMoveRequest{},
		"Event": api.Event{}, "EventList": api.EventList{}, "Health": api.Health{},
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
