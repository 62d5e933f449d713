//go:build microvm

package runner_test

import "github.com/paddockhq/paddock/internal/wire"

// The microVM tier runs the whole conformance suite too. Each sandbox boots a guest (about
// 2.5 s to first exec under TCG on these machines), so this run is behind the microvm build
// tag: `go test -tags microvm ./internal/runner`. make test sets the tag; a plain
// `go test ./...` leaves the tier out and says nothing of it.
func init() {
	tiers = append(tiers, tierCase{name: "microvm", tier: wire.TierMicroVM, inContainer: true})
}
