#!/usr/bin/env bash
# Runs each Go fuzz target for a few seconds (FUZZTIME, 5s by default);
# .ci/run calls it after `go test ./...`, which has already run every
# target's seed corpus. `go test -fuzz` takes one target per package and
# invocation, hence one line per target. A failure writes the input that
# failed under the package's testdata/fuzz/<Target>/ (commit it with the
# fix: it then runs with the seeds) and fails the script.
#
# Inputs are not minimized (-fuzzminimizetime 0): in a few seconds that
# would take the time from fuzzing. To minimize a failure, rerun the target
# by hand without that flag. FUZZ_PARALLEL sets the number of fuzzing
# processes (default: one per CPU).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${FUZZTIME:-5s}"
parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZ_PARALLEL")
fi

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
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name in $pkg for $fuzztime"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 0 "${parallel[@]}" "$pkg"
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start)) s"
