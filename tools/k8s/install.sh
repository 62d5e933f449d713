#!/usr/bin/env bash
# install.sh PREFIX builds the test cluster's binaries from this module (its go.mod and
# go.sum pin every version) and installs them under PREFIX (paddock's prefix/k8s):
#   bin/   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl,
#          containerd, containerd-shim-runc-v2, ctr, agent-sandbox-controller, pause
#   cni/   bridge, loopback, host-local
#   crds/  agent-sandbox's CustomResourceDefinitions, from its module
#   kwok/  kwok (from the module in ./kwok) and stages.yaml, its fast node and pod stages
#   kuberouter/  kube-router (from the module in ./kuberouter), whose firewall alone enforces
#          NetworkPolicy for the tests that ask for it
#   STAMP, kwok/STAMP, kuberouter/STAMP  digests of what each part is built from: a part whose digest
#          matches is not built again.
# etcd is Debian's etcd-server (scripts/setup.sh installs it).
set -euo pipefail
prefix=${1:?usage: install.sh PREFIX}
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH

KUBERNETES_VERSION=v1.36.3
CONTAINERD_VERSION=v2.3.7
CNI_PLUGINS_VERSION=v1.10.0
KUBE_ROUTER_VERSION=v2.1.0
TAGS="no_btrfs no_devmapper no_zfs"
minor=${KUBERNETES_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
ldflags+=" -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
cmds=(
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubelet
	k8s.io/kubernetes/cmd/kubectl
	github.com/containerd/containerd/v2/cmd/containerd
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
	github.com/containerd/containerd/v2/cmd/ctr
	sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller
	./cmd/pause
)
cni=(
	github.com/containernetworking/plugins/plugins/main/bridge
	github.com/containernetworking/plugins/plugins/main/loopback
	github.com/containernetworking/plugins/plugins/ipam/host-local
)
# Static, without cgo: containerd without the snapshotters that need C libraries
# (btrfs, devmapper, zfs); overlayfs is the one the cluster uses.
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
cd "$here"

stamp=$( (cat go.mod go.sum tools.go cmd/pause/main.go && echo "$TAGS $ldflags ${cmds[*]} ${cni[*]}") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$prefix/STAMP" 2>/dev/null)" != "$stamp" ]; then
	echo "setup: building the test cluster (Kubernetes $KUBERNETES_VERSION, containerd $CONTAINERD_VERSION, CNI plugins $CNI_PLUGINS_VERSION, agent-sandbox) into $prefix: 16 to 20 minutes on 2 cores the first time" >&2
	rm -rf "$prefix.new"
	mkdir -p "$prefix.new/bin" "$prefix.new/cni" "$prefix.new/crds"
	go build -trimpath -tags "$TAGS" -ldflags "$ldflags" -o "$prefix.new/bin/" "${cmds[@]}"
	go build -trimpath -ldflags "$ldflags" -o "$prefix.new/cni/" "${cni[@]}"
	crds=$(go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)/k8s/crds
	install -m 0644 "$crds"/*.yaml "$prefix.new/crds/"
	echo "$stamp" >"$prefix.new/STAMP"
	[ ! -d "$prefix/kwok" ] || mv "$prefix/kwok" "$prefix.new/kwok"
	[ ! -d "$prefix/kuberouter" ] || mv "$prefix/kuberouter" "$prefix.new/kuberouter"
	rm -rf "$prefix"
	mv "$prefix.new" "$prefix"
fi

cd "$here/kwok"
kwok_stamp=$(cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1)
if [ "$(cat "$prefix/kwok/STAMP" 2>/dev/null)" != "$kwok_stamp" ]; then
	echo "setup: building kwok into $prefix/kwok" >&2
	rm -rf "$prefix/kwok.new"
	mkdir -p "$prefix/kwok.new"
	go build -trimpath -ldflags "-s -w" -o "$prefix/kwok.new/kwok" sigs.k8s.io/kwok/cmd/kwok
	stages=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
	for f in "$stages"/node/fast/node-initialize.yaml "$stages"/node/heartbeat/node-heartbeat.yaml "$stages"/pod/fast/pod-*.yaml; do
		echo "---"
		cat "$f"
	done >"$prefix/kwok.new/stages.yaml"
	echo "$kwok_stamp" >"$prefix/kwok.new/STAMP"
	rm -rf "$prefix/kwok"
	mv "$prefix/kwok.new" "$prefix/kwok"
fi

cd "$here/kuberouter"
kr_stamp=$( (cat go.mod go.sum tools.go && echo "$KUBE_ROUTER_VERSION") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$prefix/kuberouter/STAMP" 2>/dev/null)" != "$kr_stamp" ]; then
	echo "setup: building kube-router into $prefix/kuberouter" >&2
	rm -rf "$prefix/kuberouter.new"
	mkdir -p "$prefix/kuberouter.new"
	go build -trimpath -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
		-o "$prefix/kuberouter.new/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
	echo "$kr_stamp" >"$prefix/kuberouter.new/STAMP"
	rm -rf "$prefix/kuberouter"
	mv "$prefix/kuberouter.new" "$prefix/kuberouter"
fi
