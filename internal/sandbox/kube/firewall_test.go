package kube_test

import (
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/sandbox/kube"
)

// pod_firewall adds one init container, with NET_ADMIN alone, rejecting the sandbox
// user's packets off the loopback; without it the pod has none.
func TestPodFirewallInitContainer(t *testing.T) {
	c := testConfig()
	sb, err := kube.NewSandbox(c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1234, GID: 1234})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sb.Spec.PodTemplate.Spec.InitContainers); n != 0 {
		t.Fatalf("%d init containers without pod_firewall", n)
	}
	c.PodFirewall = true
	sb, err = kube.NewSandbox(c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1234, GID: 1234})
	if err != nil {
		t.Fatal(err)
	}
	inits := sb.Spec.PodTemplate.Spec.InitContainers
	if len(inits) != 1 {
		t.Fatalf("init containers %+v, want the firewall", inits)
	}
	fw := inits[0]
	script := strings.Join(fw.Command, " ")
	if fw.Image != c.Image || !strings.Contains(script, "! -o lo -m owner --uid-owner 1234 -j REJECT") || !strings.Contains(script, "ip6tables") {
		t.Errorf("firewall container: %s: %q", fw.Image, script)
	}
	sc := fw.SecurityContext
	if caps := sc.Capabilities; len(caps.Add) != 1 || caps.Add[0] != "NET_ADMIN" || len(caps.Drop) != 1 || caps.Drop[0] != "ALL" || *sc.AllowPrivilegeEscalation || *sc.Privileged {
		t.Errorf("firewall security context: %+v", sc)
	}
}

func TestCertLifetimeValidated(t *testing.T) {
	c := testConfig()
	if c.CertLifetime != 24*time.Hour {
		t.Errorf("default cert_lifetime %s", c.CertLifetime)
	}
	c.CertLifetime = 30 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "runner.cert_lifetime") {
		t.Errorf("a 30s lifetime: %v", err)
	}
	c.CertLifetime = time.Minute
	if err := c.Validate(); err != nil {
		t.Errorf("a 1m lifetime: %v", err)
	}
}
