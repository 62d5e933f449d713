#!/usr/bin/env bash
# Runs every go test -fuzz target in the module for FUZZTIME (default 10s) each.
set -euo pipefail
fuzztime=${FUZZTIME:-10s}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz: $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/paddock-fuzz.log 2>&1 || {
			cat /tmp/paddock-fuzz.log
			exit 1
		}
	done
done
