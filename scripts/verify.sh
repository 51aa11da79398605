#!/usr/bin/env bash
# make verify: formatting, module tidiness, vet, staticcheck, the workflows' lint, and the rule that product
# packages take their time from an injected clock (time.Now and time.Sleep
# only in cmd/, internal/, test/, examples/ (users' code) and tests). Prints every problem, exits 1 on any.
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; fail=1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod go.sum "$tmp"/
if ! go mod tidy >/dev/null 2>&1 || ! cmp -s go.mod "$tmp/go.mod" || ! cmp -s go.sum "$tmp/go.sum"; then
	echo "go mod tidy changes go.mod or go.sum: run it and commit the result"
	cp "$tmp/go.mod" "$tmp/go.sum" .
	fail=1
fi
if ! go vet ./...; then
	fail=1
fi
# staticcheck, pinned here; the go command fetches it once into the module
# cache (no change to go.mod: it is not linked into anything).
if ! go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...; then
	fail=1
fi
# actionlint, pinned the same way: the workflows of .github/workflows (their
# syntax, expressions, permissions, and each action's inputs where it knows
# the action), offline; the pins of their actions are held by build/release's
# tests.
if ! go run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12; then
	fail=1
fi
clock=$(git grep -n -E 'time\.(Now|Sleep)\(' -- '*.go' ':!cmd/' ':!internal/' ':!test/' ':!examples/' ':!*_test.go')
if [ -n "$clock" ]; then
	echo "product packages must use the injected clock (k8s.io/utils/clock), not:"; echo "$clock"; fail=1
fi
[ "$fail" = 0 ] && echo "verify: ok"
exit "$fail"
