#!/usr/bin/env bash
# Runs every go test -fuzz target in the module for FUZZTIME (default 10s) each.
#
# A target whose run fails with only "context deadline exceeded" and no failing input is
# run once more: that is Go's fuzzing coordinator missing its own deadline on a loaded
# machine (a worker slow to answer when the time is up), not a finding. A real finding
# writes "Failing input written to testdata/fuzz/..." and is never retried.
set -euo pipefail
fuzztime=${FUZZTIME:-10s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		for attempt in 1 2; do
			echo "fuzz: $pkg $target ($fuzztime)"
			if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
				break
			fi
			if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
				echo "fuzz: $target: the fuzzing coordinator missed its deadline (no failing input); running it again"
				continue
			fi
			cat "$log"
			exit 1
		done
	done
done
