package kube_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

const deployDir = "../../../deploy/kubernetes"

// docs splits a YAML file into its documents, in the strict form each decodes from.
func docs(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(b, []byte("\n---\n"))
}

// TestShippedNetworkPolicy: the NetworkPolicy shipped opens the agent's port on paddock's
// pods only, and denies everything else both ways.
func TestShippedNetworkPolicy(t *testing.T) {
	var deny, allow networkingv1.NetworkPolicy
	ds := docs(t, "networkpolicy.yaml")
	if len(ds) != 2 {
		t.Fatalf("%d documents, want 2", len(ds))
	}
	for i, p := range []*networkingv1.NetworkPolicy{&deny, &allow} {
		if err := yaml.UnmarshalStrict(ds[i], p); err != nil {
			t.Fatal(err)
		}
		if p.Namespace != kube.DefaultNamespace {
			t.Errorf("%s is in namespace %q", p.Name, p.Namespace)
		}
	}
	if len(deny.Spec.PodSelector.MatchLabels) != 0 || !slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) ||
		!slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 {
		t.Errorf("the first policy does not deny all both ways: %+v", deny.Spec)
	}
	if allow.Spec.PodSelector.MatchLabels[kube.LabelManagedBy] != kube.ManagedBy {
		t.Errorf("the agent's port is opened on pods %v, not paddock's", allow.Spec.PodSelector.MatchLabels)
	}
	if len(allow.Spec.Egress) != 0 || len(allow.Spec.Ingress) != 1 {
		t.Fatalf("the second policy: %+v", allow.Spec)
	}
	ports := allow.Spec.Ingress[0].Ports
	if len(ports) != 1 || ports[0].Port.IntValue() != wire.PodAgentPort {
		t.Errorf("ports %+v, want the agent's %d alone", ports, wire.PodAgentPort)
	}
}

// TestShippedRBAC: the control plane's Role is namespaced to the sandboxes and grants no
// wildcard, no pod creation and no access to anything but what the backend uses; its
// ClusterRoles create token reviews and read nodes, and nothing more.
func TestShippedRBAC(t *testing.T) {
	var role rbacv1.Role
	found := false
	for _, d := range docs(t, "rbac.yaml") {
		if strings.Contains(string(d), "\nkind: ClusterRole\n") {
			// Cluster-wide, only the token review a warm claim makes, and reading a node
			// that holds a sandbox's pod.
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict(d, &cr); err != nil {
				t.Fatal(err)
			}
			want := map[string][]rbacv1.PolicyRule{
				"paddock-token-review": {{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}},
				"paddock-nodes":        {{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
			}
			if !reflect.DeepEqual(cr.Rules, want[cr.Name]) {
				t.Errorf("ClusterRole %s: %+v, want only tokenreviews create, or nodes get", cr.Name, cr.Rules)
			}
		}
		if strings.Contains(string(d), "\nkind: Role\n") {
			if err := yaml.UnmarshalStrict(d, &role); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found || role.Namespace != kube.DefaultNamespace {
		t.Fatalf("no Role in namespace %s", kube.DefaultNamespace)
	}
	allowed := map[string][]string{
		"agents.x-k8s.io/sandboxes": {"get", "list", "watch", "create", "update", "patch", "delete"},
		"/secrets":                  {"get", "list", "create", "update", "patch", "delete"},
		"/pods":                     {"get", "list", "watch", "delete"},
		"/persistentvolumeclaims":   {"list"},
		"extensions.agents.x-k8s.io/sandboxtemplates": {"get", "create", "update", "delete"},
		"extensions.agents.x-k8s.io/sandboxwarmpools": {"get", "list", "create", "update", "delete"},
		"extensions.agents.x-k8s.io/sandboxclaims":    {"get", "list", "create", "patch", "delete"},
	}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				ok := allowed[g+"/"+res]
				for _, v := range r.Verbs {
					if !slices.Contains(ok, v) {
						t.Errorf("%s/%s: verb %s is more than the backend needs", g, res, v)
					}
				}
			}
		}
	}
}
