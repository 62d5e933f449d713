#!/usr/bin/env bash
# Installs what paddock and its tests need on a Debian machine, at pinned versions.
# Idempotent: each step checks what is there first. Run as root (it installs system packages).
#
# What it installs, and why:
#   - Debian packages: libseccomp-dev (runc's seccomp support), pkg-config, patch (the
#     gVisor fixes below), strace (the containment suite tries to trace the agent with it),
#     chromium (the browser tests of the control plane's pages drive it headless; see
#     internal/browsertest), e2fsprogs and mount (mkfs.ext4 and mount make each sandbox's
#     disk image: the disk limit; see internal/runner/disk.go).
#   - runc ${RUNC_VERSION}, built from its Go module with seccomp support. Debian's runc 1.1.5
#     predates the November 2025 escape fixes (CVE-2025-31133, -52565, -52881), so paddock never
#     uses it: the runner refuses any runc older than 1.2.8 / 1.3.3.
#   - runsc (gVisor) ${RUNSC_VERSION}, built from gvisor.dev/gvisor's Go module (its `go` branch; gVisor
#     publishes no semver tags there, so the pin is a pseudo-version) in a module of its own:
#     gvisor cannot share a build with paddock's runtime-spec v1.3.0, with the patches in
#     scripts/patches/gvisor applied to the module's source (each says which upstream issue it
#     fixes; drop one when the pin moves past its fix). It reports the pin and the patch level
#     as its version (`runsc --version`), which is how a second run knows to skip it.
#   - qemu-system-x86 ${QEMU_DEB_VERSION} from Debian (the microvm tier's VMM: `-M microvm`, TCG
#     here, KVM where it works), without recommends.
#   - the microvm tier's guest kernel: Debian's linux-image-${GUEST_KERNEL_ABI}
#     ${GUEST_KERNEL_DEB_VERSION}, fetched with `apt-get download` and unpacked with `dpkg-deb -x`
#     under ${PADDOCK_PREFIX}/guest. It is never installed as a host kernel. Not the -cloud-amd64
#     flavour: that one is built without 9p (CONFIG_NET_9P is not set), and the guest reaches
#     /usr and the workspace over virtio-9p. paddock builds the guest's initramfs itself.
#   - the bench's peers (make bench measures them beside paddock, in the same run; see
#     docs/benchmarks.md), from Debian at pinned versions, their services never started:
#     podman ${PODMAN_DEB_VERSION} and bubblewrap ${BUBBLEWRAP_DEB_VERSION} (table 1), nginx
#     ${NGINX_DEB_VERSION} and haproxy ${HAPROXY_DEB_VERSION} (tables 5 and 6; wrk ${WRK_DEB_VERSION}
#     loads table 5 from a process of its own), squid ${SQUID_DEB_VERSION}
#     and tinyproxy ${TINYPROXY_DEB_VERSION} (table 13). The bench writes their configuration
#     and starts and stops them itself, on loopback. Also xfsprogs ${XFSPROGS_DEB_VERSION}: mkfs.xfs
#     makes the file system with reflinks on which table 17 and internal/runner's tests fork
#     a disk image.
#   - Debian's postgresql-${POSTGRESQL_MAJOR} ${POSTGRESQL_DEB_VERSION}, its service never started:
#     the store's tests on PostgreSQL start their own server (internal/store/pgtest). It brings
#     postgresql-client-${POSTGRESQL_MAJOR}, whose pg_dump and pg_restore paddock admin backup and
#     restore run.
#   - SeaweedFS's weed ${SEAWEEDFS_VERSION}, built from its Go module: the S3 server on loopback
#     that internal/wsbackup's tests start (a long build: its module pulls in many SDKs).
#   - the rust provider's toolchain from Debian: cargo ${CARGO_DEB_VERSION}, rustc and
#     rust-clippy ${RUSTC_DEB_VERSION}, and the packaged crates its tests build offline from
#     /usr/share/cargo/registry (librust-itoa-dev ${RUST_ITOA_DEB_VERSION}). Sandboxes see
#     them through the host's /usr, mounted read-only; crates.io is never reached.
#   - the test cluster of internal/testenv/kube (a real single-node Kubernetes on loopback;
#     docs/kubernetes.md, "The test cluster"): Kubernetes v1.36.3 (kube-apiserver,
#     kube-controller-manager, kube-scheduler, kubelet, kubectl), containerd v2.3.7 (with its
#     runc shim and ctr), the CNI plugins v1.10.0 (bridge, loopback, host-local), the
#     agent-sandbox v0.5.5 controller and its CRDs, a static pause binary, and KWOK v0.8.0
#     (simulated nodes, for scale tests; a module of its own, tools/k8s/kwok), all built from
#     the Go modules that tools/k8s/go.mod pins, under ${PADDOCK_PREFIX}/k8s (tools/k8s/install.sh;
#     16 to 20 minutes on 2 cores the first time, nothing when its stamp matches); and Debian's
#     etcd-server ${ETCD_DEB_VERSION}, its service never started. kube-router's firewall, the
#     NetworkPolicy enforcer the policy tests ask for (a module of its own, tools/k8s/kuberouter),
#     needs Debian's iptables ${IPTABLES_DEB_VERSION} and ipset ${IPSET_DEB_VERSION}.
#   - golangci-lint ${GOLANGCI_LINT_VERSION} and govulncheck ${GOVULNCHECK_VERSION}, built from
#     their Go modules (make lint, make vuln), and the Go vulnerability database govulncheck
#     reads, built offline from golang.org/x/vulndb ${VULNDB_VERSION} (its OSV files, indexed
#     by its own cmd/indexdb) under ${PADDOCK_PREFIX}/vulndb: vuln.go.dev may be unreachable,
#     and a pinned snapshot gives every machine the same findings. Move the pin to see newer
#     reports.
#   - tests/browser/node_modules: playwright-core at the exact version package-lock.json pins,
#     by `npm ci`, rerun when the lockfile changes. Needs Node.js 20 or newer (Debian 12's
#     nodejs is 18: use NodeSource's or another build). The same for tools/openapi (the
#     OpenAPI linters, Redocly's CLI and swagger-cli) and sdk/typescript (the TypeScript
#     SDK's build and type generator: typescript, openapi-typescript), and tests/mcp (the
#     TypeScript MCP SDK's client, which the MCP server's tests drive).
#   - ${PADDOCK_PREFIX}/agents: third-party agent CLIs from tests/agents' lockfile (the Linux
#     x64 builds of OpenCode and of OpenAI's Codex CLI), which TestOpenCodeInSandbox and
#     TestCodexInSandbox run inside a sandbox (it sees the host's /usr).
# Everything paddock installs lives under ${PADDOCK_PREFIX} (default /usr/local/lib/paddock),
# except the node_modules of tests/browser, tests/mcp, tools/openapi and sdk/typescript, which live in
# the checkout (and are ignored by git).
set -euo pipefail

RUNC_VERSION=${RUNC_VERSION:-1.5.2}
RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
QEMU_DEB_VERSION=${QEMU_DEB_VERSION:-1:7.2+dfsg-7+deb12u18+b3}
GUEST_KERNEL_ABI=${GUEST_KERNEL_ABI:-6.1.0-56-amd64}
GUEST_KERNEL_DEB_VERSION=${GUEST_KERNEL_DEB_VERSION:-6.1.192-2}
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
GOVULNCHECK_VERSION=${GOVULNCHECK_VERSION:-v1.9.0}
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
PODMAN_DEB_VERSION=${PODMAN_DEB_VERSION:-4.3.1+ds1-8+deb12u1+b3}
BUBBLEWRAP_DEB_VERSION=${BUBBLEWRAP_DEB_VERSION:-0.8.0-2+deb12u1}
NGINX_DEB_VERSION=${NGINX_DEB_VERSION:-1.22.1-9+deb12u11}
HAPROXY_DEB_VERSION=${HAPROXY_DEB_VERSION:-2.6.12-1+deb12u4}
SQUID_DEB_VERSION=${SQUID_DEB_VERSION:-5.7-2+deb12u6}
TINYPROXY_DEB_VERSION=${TINYPROXY_DEB_VERSION:-1.11.1-2.1+deb12u1}
WRK_DEB_VERSION=${WRK_DEB_VERSION:-4.1.0-3+b2}
XFSPROGS_DEB_VERSION=${XFSPROGS_DEB_VERSION:-6.1.0-1}
POSTGRESQL_MAJOR=${POSTGRESQL_MAJOR:-15}
POSTGRESQL_DEB_VERSION=${POSTGRESQL_DEB_VERSION:-15.20-0+deb12u1}
CARGO_DEB_VERSION=${CARGO_DEB_VERSION:-0.66.0+ds1-1}
RUSTC_DEB_VERSION=${RUSTC_DEB_VERSION:-1.63.0+dfsg1-2}
RUST_ITOA_DEB_VERSION=${RUST_ITOA_DEB_VERSION:-1.0.1-2}
ETCD_DEB_VERSION=${ETCD_DEB_VERSION:-3.4.23-4+b4}
IPTABLES_DEB_VERSION=${IPTABLES_DEB_VERSION:-1.8.9-2}
IPSET_DEB_VERSION=${IPSET_DEB_VERSION:-7.17-1}
PADDOCK_PREFIX=${PADDOCK_PREFIX:-/usr/local/lib/paddock}
export PATH=/usr/local/go/bin:$PATH

log() { printf 'setup: %s\n' "$*" >&2; }

need_pkgs=()
for p in libseccomp-dev pkg-config gcc strace chromium patch e2fsprogs mount; do
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

# go_install NAME MODULE VERSION PACKAGE CGO TAGS LDFLAGS [PATCHDIR] builds PACKAGE at
# MODULE@VERSION from the Go module proxy, in a throwaway module of its own (its dependencies
# never meet paddock's), and installs it as $PADDOCK_PREFIX/bin/NAME. With PATCHDIR, the
# module's source is copied and each PATCHDIR/*.patch applied to it (patch -p1) first.
go_install() {
	local name=$1 module=$2 version=$3 pkg=$4 cgo=$5 tags=$6 ldflags=$7 patches=${8:-} work
	work=$(mktemp -d)
	# Every step ends the build on failure by itself: set -e does not reach inside a
	# subshell whose status `if !` tests, and a patch that did not apply must not give a
	# binary built without it.
	if ! (
		cd "$work" || exit 1
		go mod init "paddock.local/$name-build" >/dev/null 2>&1 || exit 1
		go mod edit -require="$module@$version" || exit 1
		GOFLAGS=-mod=mod go mod download "$module" || exit 1
		if [ -n "$patches" ]; then
			src=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$module") && [ -d "$src" ] || exit 1
			cp -R "$src" src && chmod -R u+w src || exit 1
			for f in "$patches"/*.patch; do
				log "applying $(basename "$f") to $module"
				patch -p1 -s --forward -d src <"$f" || exit 1
			done
			go mod edit -replace="$module=./src" || exit 1
		fi
		CGO_ENABLED=$cgo GOFLAGS=-mod=mod go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$name" "$pkg"
	); then
		rm -rf "$work"
		log "building $name failed"
		exit 1
	fi
	install -D -m 0755 "$work/$name" "$PADDOCK_PREFIX/bin/$name"
	rm -rf "$work"
}

runc_bin="$PADDOCK_PREFIX/bin/runc"
# Each check reads the whole output first: under pipefail, `prog | grep -q` fails when grep
# stops reading before prog has written everything (prog dies of SIGPIPE), and a tool
# that is there would be rebuilt.
if ! grep -q "^runc version $RUNC_VERSION\$" <<<"$("$runc_bin" --version 2>/dev/null || true)"; then
	log "building runc $RUNC_VERSION from the Go module proxy (cgo, libseccomp)"
	go_install runc github.com/opencontainers/runc "v$RUNC_VERSION" github.com/opencontainers/runc \
		1 "seccomp urfave_cli_no_docs" "-X main.version=$RUNC_VERSION -X main.gitCommit=v$RUNC_VERSION"
fi
log "runc: $("$runc_bin" --version | head -1) at $runc_bin"

# The patch level goes up whenever scripts/patches/gvisor changes, so that a runsc built
# without a patch is rebuilt.
RUNSC_PATCHLEVEL=paddock.2
runsc_bin="$PADDOCK_PREFIX/bin/runsc"
if ! grep -q "^runsc version $RUNSC_VERSION+$RUNSC_PATCHLEVEL\$" <<<"$("$runsc_bin" --version 2>/dev/null || true)"; then
	log "building runsc (gVisor) $RUNSC_VERSION from the Go module proxy: this takes a few minutes (1.5 to 4 on 2 cores)"
	# Static (no cgo), like gVisor's own release builds: runsc re-executes itself inside the
	# sandbox's namespaces, where no host libraries are to be relied on.
	go_install runsc gvisor.dev/gvisor "$RUNSC_VERSION" gvisor.dev/gvisor/runsc \
		0 "" "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION+$RUNSC_PATCHLEVEL" \
		"$(cd "$(dirname "$0")" && pwd)/patches/gvisor"
fi
log "runsc: $("$runsc_bin" --version | head -1) at $runsc_bin"

# Debian's mirrors serve only the current build of a package, so a Debian pin is what paddock
# was tested with, not a promise: when the pinned build is gone, the current one is used, and
# the log says so (update the pins above). Go modules, by contrast, are pinned exactly.
apt_install_pinned() { # package version
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1=$2" >/dev/null 2>&1; then
		log "WARNING: Debian no longer serves $1 $2; installing its current build instead"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null
	fi
}

if ! command -v qemu-system-x86_64 >/dev/null; then
	if [ "$(id -u)" != 0 ]; then
		log "qemu-system-x86 is missing; run this script as root"
		exit 1
	fi
	log "installing qemu-system-x86 $QEMU_DEB_VERSION (the microvm tier)"
	apt-get update -qq
	apt_install_pinned qemu-system-x86 "$QEMU_DEB_VERSION"
fi
installed_qemu=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || echo unknown)
[ "$installed_qemu" = "$QEMU_DEB_VERSION" ] || log "note: qemu-system-x86 is $installed_qemu, tested with $QEMU_DEB_VERSION"
log "qemu: $(qemu-system-x86_64 --version | head -1)"

# The rust provider's toolchain and crates.
rust_pkgs=()
for pv in "cargo=$CARGO_DEB_VERSION" "rustc=$RUSTC_DEB_VERSION" "rust-clippy=$RUSTC_DEB_VERSION" "librust-itoa-dev=$RUST_ITOA_DEB_VERSION"; do
	dpkg-query -W -f='${Status}' "${pv%%=*}" 2>/dev/null | grep -q 'install ok installed' || rust_pkgs+=("$pv")
done
if ((${#rust_pkgs[@]})); then
	if [ "$(id -u)" != 0 ]; then
		log "missing the rust provider's packages: ${rust_pkgs[*]%%=*}; run this script as root"
		exit 1
	fi
	log "installing the rust provider's packages: ${rust_pkgs[*]}"
	apt-get update -qq
	for pv in "${rust_pkgs[@]}"; do
		apt_install_pinned "${pv%%=*}" "${pv#*=}"
	done
fi

# The bench's peers. Their packages would start system services (nginx on port 80, squid on
# 3128, ...): a policy-rc.d that refuses every start is in place while they install, unless
# one already is (container images ship one).
peer_pkgs=()
for pv in "podman=$PODMAN_DEB_VERSION" "bubblewrap=$BUBBLEWRAP_DEB_VERSION" "nginx=$NGINX_DEB_VERSION" \
	"haproxy=$HAPROXY_DEB_VERSION" "squid=$SQUID_DEB_VERSION" "tinyproxy=$TINYPROXY_DEB_VERSION" "wrk=$WRK_DEB_VERSION" \
	"xfsprogs=$XFSPROGS_DEB_VERSION"; do
	dpkg-query -W -f='${Status}' "${pv%%=*}" 2>/dev/null | grep -q 'install ok installed' || peer_pkgs+=("$pv")
done
if ((${#peer_pkgs[@]})); then
	if [ "$(id -u)" != 0 ]; then
		log "missing the bench's peers: ${peer_pkgs[*]%%=*}; run this script as root"
		exit 1
	fi
	log "installing the bench's peers: ${peer_pkgs[*]}"
	apt-get update -qq
	own_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && own_policy=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	for pv in "${peer_pkgs[@]}"; do
		apt_install_pinned "${pv%%=*}" "${pv#*=}"
	done
	[ -z "$own_policy" ] || { rm -f /usr/sbin/policy-rc.d; trap - EXIT; }
fi
for pv in "podman=$PODMAN_DEB_VERSION" "bubblewrap=$BUBBLEWRAP_DEB_VERSION" "nginx=$NGINX_DEB_VERSION" \
	"haproxy=$HAPROXY_DEB_VERSION" "squid=$SQUID_DEB_VERSION" "tinyproxy=$TINYPROXY_DEB_VERSION" "wrk=$WRK_DEB_VERSION" \
	"xfsprogs=$XFSPROGS_DEB_VERSION"; do
	got=$(dpkg-query -W -f='${Version}' "${pv%%=*}" 2>/dev/null || echo unknown)
	[ "$got" = "${pv#*=}" ] || log "note: ${pv%%=*} is $got, tested with ${pv#*=}"
done

# PostgreSQL's server binaries, for the store's tests on PostgreSQL (internal/store/pgtest
# starts its own server in a temporary directory): Debian's postgresql-$POSTGRESQL_MAJOR,
# its service never started (the same policy-rc.d as the peers').
if [ ! -x "/usr/lib/postgresql/$POSTGRESQL_MAJOR/bin/initdb" ]; then
	if [ "$(id -u)" != 0 ]; then
		log "missing postgresql-$POSTGRESQL_MAJOR (the store's tests on PostgreSQL); run this script as root"
		exit 1
	fi
	log "installing postgresql-$POSTGRESQL_MAJOR $POSTGRESQL_DEB_VERSION (the store's tests on PostgreSQL)"
	apt-get update -qq
	own_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && own_policy=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt_install_pinned "postgresql-$POSTGRESQL_MAJOR" "$POSTGRESQL_DEB_VERSION"
	[ -z "$own_policy" ] || { rm -f /usr/sbin/policy-rc.d; trap - EXIT; }
fi
got=$(dpkg-query -W -f='${Version}' "postgresql-$POSTGRESQL_MAJOR" 2>/dev/null || echo unknown)
[ "$got" = "$POSTGRESQL_DEB_VERSION" ] || log "note: postgresql-$POSTGRESQL_MAJOR is $got, tested with $POSTGRESQL_DEB_VERSION"

# The test cluster's etcd: Debian's etcd-server, its service never started (the same
# policy-rc.d as the peers'); internal/testenv/kube starts its own on loopback.
if [ ! -x /usr/bin/etcd ]; then
	if [ "$(id -u)" != 0 ]; then
		log "missing etcd-server (the test cluster); run this script as root"
		exit 1
	fi
	log "installing etcd-server $ETCD_DEB_VERSION (the test cluster)"
	apt-get update -qq
	own_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && own_policy=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt_install_pinned etcd-server "$ETCD_DEB_VERSION"
	[ -z "$own_policy" ] || { rm -f /usr/sbin/policy-rc.d; trap - EXIT; }
fi
got=$(dpkg-query -W -f='${Version}' etcd-server 2>/dev/null || echo unknown)
[ "$got" = "$ETCD_DEB_VERSION" ] || log "note: etcd-server is $got, tested with $ETCD_DEB_VERSION"

# The test cluster's NetworkPolicy enforcer (kube-router's firewall) drives iptables and ipset.
for pv in "iptables=$IPTABLES_DEB_VERSION" "ipset=$IPSET_DEB_VERSION"; do
	if ! dpkg-query -W -f='${Status}' "${pv%%=*}" 2>/dev/null | grep -q 'install ok installed'; then
		if [ "$(id -u)" != 0 ]; then
			log "missing ${pv%%=*} (the test cluster's NetworkPolicy enforcer); run this script as root"
			exit 1
		fi
		log "installing ${pv%%=*} ${pv#*=} (the test cluster's NetworkPolicy enforcer)"
		apt-get update -qq
		apt_install_pinned "${pv%%=*}" "${pv#*=}"
	fi
done

# /dev/kvm as Debian's udev rule makes it (root:kvm, 0660), where no udev ran (a container
# or a minimal VM leaves it root's, 0600): the microvm tier's QEMU runs unprivileged and
# reaches KVM through the device's group alone. Whether KVM then works is decided at run
# time by a trial guest (microvm.DetectAccel), not by the device's presence.
if [ -c /dev/kvm ] && [ "$(id -u)" = 0 ]; then
	getent group kvm >/dev/null || groupadd --system kvm
	if [ "$(stat -c %G:%a /dev/kvm)" != "kvm:660" ]; then
		chgrp kvm /dev/kvm && chmod 0660 /dev/kvm && log "/dev/kvm: root:kvm 0660, as Debian's udev rule makes it"
	fi
fi

guest_dir="$PADDOCK_PREFIX/guest"
existing_kernel=$(ls "$guest_dir"/boot/vmlinuz-* 2>/dev/null | tail -1 || true)
if [ -n "$existing_kernel" ]; then
	GUEST_KERNEL_ABI=${existing_kernel##*/vmlinuz-}
else
	log "fetching the microvm guest kernel linux-image-$GUEST_KERNEL_ABI $GUEST_KERNEL_DEB_VERSION (unpacked, not installed)"
	work_kernel=$(mktemp -d)
	trap 'rm -rf "$work_kernel"' EXIT
	if ! (cd "$work_kernel" && apt-get download -qq "linux-image-$GUEST_KERNEL_ABI=$GUEST_KERNEL_DEB_VERSION" 2>/dev/null); then
		apt-get update -qq
		current=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
		if [ -z "$current" ]; then
			log "cannot find a Debian guest kernel (linux-image-$GUEST_KERNEL_ABI, or linux-image-amd64's)"
			exit 1
		fi
		log "WARNING: Debian no longer serves linux-image-$GUEST_KERNEL_ABI $GUEST_KERNEL_DEB_VERSION; using its current $current instead"
		GUEST_KERNEL_ABI=${current#linux-image-}
		(cd "$work_kernel" && apt-get download -qq "$current")
	fi
	rm -rf "$guest_dir.new"
	mkdir -p "$guest_dir.new"
	dpkg-deb -x "$work_kernel"/linux-image-*.deb "$guest_dir.new"
	rm -rf "$guest_dir"
	mv "$guest_dir.new" "$guest_dir"
fi
guest_kernel="$guest_dir/boot/vmlinuz-$GUEST_KERNEL_ABI"
# The same kernel uncompressed (an ELF vmlinux, booted through its PVH entry point): under
# TCG the bzImage's own xz decompression takes about 7 of a guest's 10 s to first output.
guest_vmlinux="$guest_dir/boot/vmlinux-$GUEST_KERNEL_ABI"
if [ ! -s "$guest_vmlinux" ]; then
	log "decompressing the guest kernel to $guest_vmlinux"
	xz_at=$(LC_ALL=C grep -obUa "$(printf '\3757zXZ')" "$guest_kernel" | head -1 | cut -d: -f1 || true)
	# xz stops with an error at the bzImage's trailing bytes, after writing the whole kernel.
	# (grep | head may end grep with SIGPIPE, which pipefail would make fatal: hence || true.)
	tail -c +$((xz_at + 1)) "$guest_kernel" | xz -dcq >"$guest_vmlinux.new" 2>/dev/null || true
	if [ "$(head -c 4 "$guest_vmlinux.new" | od -An -c | tr -d ' ')" != '177ELF' ]; then
		log "could not decompress $guest_kernel; the microvm tier boots the compressed kernel (slower)"
		rm -f "$guest_vmlinux.new"
	else
		mv "$guest_vmlinux.new" "$guest_vmlinux"
	fi
fi
log "guest kernel: $guest_kernel"

# go_tool NAME MODULE VERSION PACKAGE installs a developer tool (pure Go) unless the binary
# there already says it was built from MODULE@VERSION.
go_tool() {
	local bin="$PADDOCK_PREFIX/bin/$1"
	if ! grep -qE "^[[:space:]]+(mod|dep)[[:space:]]+$2[[:space:]]+$3([[:space:]]|\$)" <<<"$(go version -m "$bin" 2>/dev/null || true)"; then
		log "building $1 $3 from the Go module proxy"
		go_install "$1" "$2" "$3" "$4" 0 "" ""
	fi
}
go_tool golangci-lint github.com/golangci/golangci-lint/v2 "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
go_tool govulncheck golang.org/x/vuln "$GOVULNCHECK_VERSION" golang.org/x/vuln/cmd/govulncheck
go_tool weed github.com/seaweedfs/seaweedfs "$SEAWEEDFS_VERSION" github.com/seaweedfs/seaweedfs/weed

# The test cluster's binaries (tools/k8s): rebuilt only when tools/k8s changed since the
# build under the prefix (install.sh compares a digest of its sources with its stamp).
"$(cd "$(dirname "$0")/.." && pwd)/tools/k8s/install.sh" "$PADDOCK_PREFIX/k8s"
log "test cluster: $("$PADDOCK_PREFIX/k8s/bin/kubelet" --version) under $PADDOCK_PREFIX/k8s"
log "test cluster's NetworkPolicy enforcer: kube-router $("$PADDOCK_PREFIX/k8s/kuberouter/kube-router" --version 2>&1 | grep -o 'v[0-9][0-9.]*' | head -1)"

vulndb="$PADDOCK_PREFIX/vulndb/$VULNDB_VERSION"
if [ ! -s "$vulndb/index/db.json" ]; then
	log "indexing the Go vulnerability database golang.org/x/vulndb $VULNDB_VERSION"
	work_db=$(mktemp -d)
	if ! (
		cd "$work_db" || exit 1
		go mod init paddock.local/vulndb >/dev/null 2>&1 || exit 1
		go mod edit -require="golang.org/x/vulndb@$VULNDB_VERSION" || exit 1
		GOFLAGS=-mod=mod go mod download golang.org/x/vulndb || exit 1
		src=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' golang.org/x/vulndb) && [ -d "$src/data/osv" ] || exit 1
		mkdir -p "$PADDOCK_PREFIX/vulndb" && rm -rf "$vulndb.new"
		GOFLAGS=-mod=mod go run golang.org/x/vulndb/cmd/indexdb -vulns "$src/data/osv" -out "$vulndb.new" || exit 1
	); then
		rm -rf "$work_db" "$vulndb.new"
		log "indexing the vulnerability database failed"
		exit 1
	fi
	rm -rf "$work_db" "$vulndb"
	mv "$vulndb.new" "$vulndb"
fi
ln -sfn "$vulndb" "$PADDOCK_PREFIX/vulndb/current"

# The browser tests' Node dependencies, from the lockfile exactly. node_modules is stale when
# the lockfile it was installed from (its digest is kept in a stamp file) is not the current one.
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "installing Debian's nodejs and npm"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
	log "Node.js 20 or newer is needed for the browser tests (found: $(node --version 2>/dev/null || echo none)); install it and rerun"
	exit 1
fi
# npm_ci DIR WHAT installs DIR's Node packages from its lockfile, unless the stamp says
# node_modules came from this lockfile already.
npm_ci() {
	local dir=$1 what=$2 lock_sum stamp
	lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	stamp="$dir/node_modules/.paddock-lock-sha256"
	if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
		log "installing the Node packages of $what (npm ci in ${dir#"$root"/})"
		(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
		echo "$lock_sum" >"$stamp"
	fi
}
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_ci "$browser_dir" "the browser tests"
npm_ci "$root/tools/openapi" "the OpenAPI linters"
npm_ci "$root/sdk/typescript" "the TypeScript SDK"
npm_ci "$root/tests/mcp" "the MCP client tests"
# Third-party agent CLIs the tests run inside sandboxes (TestOpenCodeInSandbox,
# TestCodexInSandbox): under the prefix, in the host's /usr, which container sandboxes
# see read-only.
mkdir -p "$PADDOCK_PREFIX/agents"
for f in package.json package-lock.json; do
	cmp -s "$root/tests/agents/$f" "$PADDOCK_PREFIX/agents/$f" || cp "$root/tests/agents/$f" "$PADDOCK_PREFIX/agents/$f"
done
npm_ci "$PADDOCK_PREFIX/agents" "the agent CLIs (OpenCode, Codex)"
log "browser tests: $(chromium --version 2>/dev/null | head -1), playwright-core $(node -p "require('$browser_dir/node_modules/playwright-core/package.json').version")"
