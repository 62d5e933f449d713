#!/usr/bin/env bash
# Installs what paddock and its tests need on a Debian machine, at pinned versions.
# Idempotent: each step checks what is there first. Run as root (it installs system packages).
#
# What it installs, and why:
#   - Debian packages: libseccomp-dev (runc's seccomp support), pkg-config.
#   - runc ${RUNC_VERSION}, built from its Go module with seccomp support. Debian's runc 1.1.5
#     predates the November 2025 escape fixes (CVE-2025-31133, -52565, -52881), so paddock never
#     uses it: the runner refuses any runc older than 1.2.8 / 1.3.3.
# Everything paddock installs lives under ${PADDOCK_PREFIX} (default /usr/local/lib/paddock).
set -euo pipefail

RUNC_VERSION=${RUNC_VERSION:-1.5.2}
PADDOCK_PREFIX=${PADDOCK_PREFIX:-/usr/local/lib/paddock}
export PATH=/usr/local/go/bin:$PATH

log() { printf 'setup: %s\n' "$*" >&2; }

need_pkgs=()
for p in libseccomp-dev pkg-config gcc; do
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
