#!/usr/bin/env bash
# make test's run, after the test world is built: every test on the newest
# Kubernetes, TEST_PARALLEL packages at once; beside it (its start waits for
# the test binaries, so that both do not compile the same packages)
# OLDEST_PACKAGES on OLDEST_KUBERNETES, then the tests of pure functions
# without the race detector and the short fuzz search, whose output is
# printed when the first is done (the first pass's last minutes mostly wait
# on the one real node, and these fill them); the check that nothing of
# this run is left behind. It ends with the failed tests and packages of
# every part, so that the last lines of a failed run name them.
#
# Environment (the Makefile's): GO, TEST_FLAGS, TEST_PARALLEL, PURE_TESTS,
# OLDEST_KUBERNETES, OLDEST_PACKAGES, TEST_FUZZTIME.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${GO:=go}" "${TEST_FLAGS:=-race -count=1 -v -timeout 30m}" "${TEST_PARALLEL:=3}" "${TEST_FUZZTIME:=3s}"
: "${PURE_TESTS:?}" "${OLDEST_KUBERNETES:?}" "${OLDEST_PACKAGES:?}"
export MH_TESTWORLD_RUN=$(date +%s%N)
MH_PROMETHEUS_DIR=$(scripts/install-prometheus.sh) || exit 1
export MH_PROMETHEUS_DIR
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
rc=0

# The second pass's test binaries, compiled (and cached) before either pass runs.
# shellcheck disable=SC2086 # word splitting of the flags and packages is meant
$GO test $TEST_FLAGS -run '^$' $OLDEST_PACKAGES >"$logs/compile" 2>&1 || { cat "$logs/compile"; rc=1; }
# part NAME CMD...: CMD's output goes to $logs/NAME, its exit status to
# $logs/NAME.rc, for report.
part() {
	local name=$1
	shift
	"$@" >"$logs/$name" 2>&1
	echo $? >"$logs/$name.rc"
}
# report NAME TITLE prints the part NAME under TITLE, and fails the run
# if it failed.
report() {
	echo "make test: $2"
	cat "$logs/$1"
	[ "$(cat "$logs/$1.rc")" = 0 ] || rc=1
}
pure() {
	# The model test's fixed seeds (lifecycle/testdata/model-seeds.txt).
	$GO test -count=1 -run "$PURE_TESTS" ./lifecycle -args -model.fixed &&
		$GO test -count=1 -run "$PURE_TESTS" ./fleet
}
(
	# shellcheck disable=SC2086
	part oldest env MH_TESTWORLD_KUBERNETES="$OLDEST_KUBERNETES" $GO test $TEST_FLAGS $OLDEST_PACKAGES
	part pure pure
	part fuzz scripts/fuzz.sh "$TEST_FUZZTIME"
) &
later=$!
# The packages whose tests take longest (minutes of world tests and the
# real node) are named first, so that they start first; go test names
# each package once.
# shellcheck disable=SC2086
$GO test $TEST_FLAGS -p "$TEST_PARALLEL" -skip "$PURE_TESTS" ./manifests ./aggregator ./agent ./cmd/agent ./... 2>&1 | tee "$logs/newest" || rc=1
wait "$later"
report oldest "the tests that depend on the API server's version, on Kubernetes $OLDEST_KUBERNETES"
report pure "the tests of pure functions, without the race detector"
report fuzz "the short fuzz search"

skipped=$(cat "$logs/newest" "$logs/oldest" | grep -c 'real node: skipped:')
if [ "$skipped" -gt 0 ]; then
	echo "make test: $skipped real-node tests skipped on this machine (see 'real node: skipped:' above)"
else
	echo "make test: every real-node test ran"
fi
$GO run ./test/cmd/testworld leaks || rc=1

if [ "$rc" != 0 ]; then
	echo "make test: FAILED. What failed, on Kubernetes ${OLDEST_KUBERNETES} where marked:"
	grep -h -E '^\s*--- FAIL|^FAIL\s' "$logs/newest" "$logs/pure" "$logs/fuzz" | sed 's/^/  /'
	grep -h -E '^\s*--- FAIL|^FAIL\s' "$logs/oldest" | sed "s/^/  ($OLDEST_KUBERNETES) /"
fi
exit "$rc"
