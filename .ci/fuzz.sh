#!/usr/bin/env bash
# Runs each Go fuzz target for a few seconds (FUZZTIME, 5s by default);
# .ci/run calls it after `go test ./...`, which has already run every
# target's seed corpus. A failure writes the input that failed under the
# package's testdata/fuzz/<Target>/ (commit it with the fix: it then runs
# with the seeds) and fails the script.
#
# Each package's test binary is built once (go test -c), for all the
# packages in one go, and runs each of its targets in turn, instead of one
# `go test -fuzz` per target, which links a binary per target.
#
# Coverage instrumentation: `go test -fuzz` instruments every package the
# test binary holds, standard library and SQLite included. That recompiles
# them all (most of this step's time went there) and makes every execution
# clear and scan millions of counters: the httpapi targets, whose binary
# holds the whole server and SQLite, ran about 100 inputs a second, and
# even one that does nothing ran 2,000 (against 30,000 in a small
# package). So the binaries are instrumented as -fuzz does (-d=libfuzzer,
# the compiler flag it adds), but only in the packages that parse what the
# targets feed them: this module's, YAML and encoding/json. The rest comes
# from the build cache `go test ./...` filled.
#
# Inputs are not minimized (-test.fuzzminimizetime 0): in a few seconds that
# would take the time from fuzzing. To minimize a failure, rerun the target
# by hand without that flag. FUZZ_PARALLEL sets the number of fuzzing
# processes (default: one per CPU).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-5s}"
# How the run is stopped. Go before 1.27 has a race in its fuzzing
# coordinator (go.dev/issue/75804): with -fuzztime as a duration, the end
# of that time can fail the run with a bare "context deadline exceeded"
# and no failing input (CI failed so at stop 47, twice in a row on one
# target). A coordinator stopped by SIGINT takes another path, which
# treats that same race as the interrupt it is, and the run passes. So a
# duration is kept by timeout(1), which sends SIGINT to the coordinator
# alone (--foreground: the workers stop when it closes their pipes) and
# exits with its status; a coordinator that has not exited 30 s later is
# killed, which fails the script. timeout's child does not inherit an
# ignored SIGINT (a background job's), which Go would leave ignored.
# A count of inputs (FUZZTIME=10000x) has no deadline and goes to
# -test.fuzztime as it is.
limit=() count=()
case "$fuzztime" in
*x) count=(-test.fuzztime "$fuzztime") ;;
*) limit=(timeout --foreground --preserve-status --kill-after 30s --signal INT "$fuzztime") ;;
esac
parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	parallel=(-test.parallel "$FUZZ_PARALLEL")
fi
instrument=(github.com/gpucloud/gpucloud/... gopkg.in/yaml.v3 encoding/json)

# package target
targets=(
	"./httpapi FuzzDecodeBody"
	"./httpapi FuzzAPIBody"
	"./httpapi FuzzAgentProtocol"
	"./agentapi FuzzWire"
	"./catalog FuzzLoad"
	"./sim FuzzParseNodes"
	"./sim FuzzParsePods"
	"./autoscale FuzzParseCSV"
	"./internal/imageref FuzzNormalize"
	"./agent/dns FuzzHandle"
	"./internal/stream FuzzDecode"
	"./internal/filexfer FuzzFrameReader"
)

# Every fuzz target of the repository is in the list, so that a new one is
# not left out unnoticed (and its seconds are counted).
listed=$(printf '%s\n' "${targets[@]}" | sort)
found=$(grep -rE --include='*_test.go' -e '^func Fuzz[A-Za-z0-9_]*\(' . |
	sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort)
if [ "$listed" != "$found" ]; then
	echo "fuzz.sh: its target list differs from the fuzz targets in the repository:" >&2
	diff <(echo "$listed") <(echo "$found") >&2 || true
	exit 1
fi

start=$SECONDS
module=$(go list -m)
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
pkgs=$(printf '%s\n' "${targets[@]}" | cut -d' ' -f1 | sort -u)
gcflags=()
for p in "${instrument[@]}"; do
	gcflags+=("-gcflags=$p=-d=libfuzzer")
done
# One binary per package, named after its last element (unique here).
# shellcheck disable=SC2086 # one package per word
go test -c -o "$bindir/" "${gcflags[@]}" $pkgs
echo "fuzz: test binaries built in $((SECONDS - start)) s"
cache="$(go env GOCACHE)/fuzz"
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name in $pkg for $fuzztime"
	# In the package's directory, as go test runs it: the corpus and any
	# failing input are under its testdata/fuzz; what the fuzzer learns
	# is kept where go test -fuzz keeps it.
	(cd "$pkg" && "${limit[@]}" "$bindir/$(basename "$pkg").test" -test.run='^$' -test.fuzz="^${name}\$" \
		"${count[@]}" -test.fuzzminimizetime=0 -test.paniconexit0 \
		-test.fuzzcachedir="$cache/$module/${pkg#./}" "${parallel[@]}")
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start)) s"
