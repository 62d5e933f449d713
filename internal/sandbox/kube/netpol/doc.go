// Package netpol holds, under the kube build tag, the tests of the NetworkPolicy paddock
// ships (deploy/kubernetes/networkpolicy.yaml) on the test cluster with an enforcer
// running: what docs/kubernetes.md says a sandbox pod can and cannot reach. It has no code.
package netpol
