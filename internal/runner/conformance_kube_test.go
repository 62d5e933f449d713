//go:build kube

package runner_test

import (
	"os"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// The conformance suite on a real single-node cluster (internal/testenv/kube): every
// sandbox is an agent-sandbox Sandbox whose pod runs under paddock's runc, reached over
// the pod network with mutual TLS. `go test -tags kube ./internal/runner`; the cluster is
// started once for the package and stopped by TestMain.
func init() {
	tiers = append(tiers, tierCase{name: "kubernetes", tier: wire.TierContainer, runtime: "runc", inContainer: true})
	clusterSetup["kubernetes"] = func(t *testing.T, cfg *runner.Config) { *cfg = kubetest.Config(t, *cfg) }
	clusterLeft["kubernetes"] = kubetest.Leftovers
}

func TestMain(m *testing.M) { os.Exit(testkube.Main(m)) }

const testNS = kubetest.Namespace
