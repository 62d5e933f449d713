#!/usr/bin/env bash
# Installs what paddock and its tests need on a Debian machine, at pinned versions.
# Idempotent: each step checks what is there first. Run as root (it installs system packages).
#
# What it installs, and why:
#   - Debian packages: libseccomp-dev (runc's seccomp support), pkg-config, strace (the
#     containment suite tries to trace the agent with it).
#   - runc ${RUNC_VERSION}, built from its Go module with seccomp support. Debian's runc 1.1.5
#     predates the November 2025 escape fixes (CVE-2025-31133, -52565, -52881), so paddock never
#     uses it: the runner refuses any runc older than 1.2.8 / 1.3.3.
#   - runsc (gVisor) ${RUNSC_VERSION}, built from gvisor.dev/gvisor's Go module (its `go` branch; gVisor
#     publishes no semver tags there, so the pin is a pseudo-version) in a module of its own:
#     gvisor cannot share a build with paddock's runtime-spec v1.3.0. It reports the pin as its
#     version (`runsc --version`), which is how a second run knows to skip it.
# Everything paddock installs lives under ${PADDOCK_PREFIX} (default /usr/local/lib/paddock).
set -euo pipefail

RUNC_VERSION=${RUNC_VERSION:-1.5.2}
RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
PADDOCK_PREFIX=${PADDOCK_PREFIX:-/usr/local/lib/paddock}
export PATH=/usr/local/go/bin:$PATH

log() { printf 'setup: %s\n' "$*" >&2; }

need_pkgs=()
for p in libseccomp-dev pkg-config gcc strace; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
	if [ "$(id -u)" != 0 ]; then
		log "missing Debian packages: ${need_pkgs[*]}; run this script as root"
		exit 1
	fi
	log "installing Debian packages: ${need_pkgs[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

runc_bin="$PADDOCK_PREFIX/bin/runc"
if ! "$runc_bin" --version 2>/dev/null | grep -q "^runc version $RUNC_VERSION\$"; then
	log "building runc $RUNC_VERSION from the Go module proxy (cgo, libseccomp)"
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	(
		cd "$work"
		go mod init paddock.local/runc-build >/dev/null 2>&1
		go mod edit -require="github.com/opencontainers/runc@v$RUNC_VERSION"
		printf 'package main\n\nimport _ "github.com/opencontainers/runc"\n' >tools.go
		GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
		GOFLAGS=-mod=mod go mod download github.com/opencontainers/runc
		CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -tags "seccomp urfave_cli_no_docs" \
			-ldflags "-X main.version=$RUNC_VERSION -X main.gitCommit=v$RUNC_VERSION" \
			-o runc github.com/opencontainers/runc
	)
	install -D -m 0755 "$work/runc" "$runc_bin"
fi
log "runc: $("$runc_bin" --version | head -1) at $runc_bin"

runsc_bin="$PADDOCK_PREFIX/bin/runsc"
if ! "$runsc_bin" --version 2>/dev/null | grep -q "^runsc version $RUNSC_VERSION\$"; then
	log "building runsc (gVisor) $RUNSC_VERSION from the Go module proxy: this takes a few minutes (1.5 to 4 on 2 cores)"
	work_runsc=$(mktemp -d)
	trap 'rm -rf "${work:-}" "$work_runsc"' EXIT
	(
		cd "$work_runsc"
		go mod init paddock.local/runsc-build >/dev/null 2>&1
		go mod edit -require="gvisor.dev/gvisor@$RUNSC_VERSION"
		GOFLAGS=-mod=mod go mod download gvisor.dev/gvisor
		# Static, like gVisor's own release builds: runsc re-executes itself inside the
		# sandbox's namespaces, where no host libraries are to be relied on.
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
			-ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
			-o runsc gvisor.dev/gvisor/runsc
	)
	install -D -m 0755 "$work_runsc/runsc" "$runsc_bin"
fi
log "runsc: $("$runsc_bin" --version | head -1) at $runsc_bin"
