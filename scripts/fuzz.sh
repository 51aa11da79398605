#!/usr/bin/env bash
# make fuzz: searches every fuzz target (func FuzzX in a _test.go file) for
# the time given (default 1m) each, one after another; a failing input is
# written under its package's testdata/fuzz and fails the run. go test
# runs every target's seeds and that corpus on its own, as make test does.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-1m}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0
for entry in $(git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed 's/:func /:/' | sort); do
	pkg=./$(dirname "${entry%%:*}")
	target=${entry##*:}
	echo "fuzz: $pkg $target for $fuzztime"
	run() { go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; }
	if ! run; then
		# Go's fuzzing engine can end a run with "context deadline
		# exceeded" when the time is up while a worker is busy (a loaded
		# machine): no input failed, none was written. Such a run is tried
		# once more; a failing input is written and fails every time.
		if grep -q 'context deadline exceeded' "$log" && [ -z "$(git status --porcelain -- "$pkg/testdata/fuzz")" ] && run; then
			continue
		fi
		grep -v '^fuzz: elapsed' "$log" | tail -20
		fail=1
	fi
done
exit "$fail"
