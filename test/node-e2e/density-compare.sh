#!/usr/bin/env bash
# density-compare.sh [OUT] — the kubelet's density suites (test/e2e_node v1.37.2: Density,
# Resource-usage) against crijournal and against containerd 2.x, one runtime after the other
# on this machine, and their figures side by side (issue 52). As root, after `make build
# node-e2e-build bench-deps`.
#
# Each runtime runs `FOCUS=density run.sh` twice (the same specs, images, registry, kubelet
# and suite; the runtime alone differs: runtimes.sh): the asserting specs, results in
# OUT/<runtime>/asserting/, then the [Benchmark] ones, in OUT/<runtime>/benchmark/ (the
# suite runs its specs in random order, and the asserting "10 pods with 0s interval" writes
# its figures to the same file as its [Benchmark] twin); then
# density-report.py writes OUT/results.md: the conditions of the run and, per spec and
# runtime, startup latency p50/p90/p99, the batch's lag, throughput, and the runtime's and
# the kubelet's CPU and RSS as the suite measured them through its cAdvisor pod.
#
#   ONLY      the specs (a regex within the density suites; default: every "create a batch
#             of pods" spec, 10/35/90 pods at once and 100/300 ms apart, the asserting one
#             included; '' for all of Density and Resource-usage, hours). The "higher API
#             QPS" specs are left out whatever ONLY says (run.sh's DENSITY_EXCLUDED: they
#             restart the kubelet as a systemd unit, which this harness does not have).
#   RUNTIMES  default "crijournal containerd"
#   NOTE      a line on the conditions, copied into results.md (e.g. "2 QEMU VMs busy")
#   DOCS=1    also put results.md into docs/BENCHMARKS.md, between its density-compare
#             markers
# OUT defaults to _output/density/<time>.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/_output/density/$(date +%Y%m%dT%H%M%S)}
ONLY=${ONLY-'create a batch of pods latency'}
RUNTIMES=${RUNTIMES:-crijournal containerd}
# the specs run.sh cannot run (its DENSITY_EXCLUDED: the "higher API QPS" ones restart a
# systemd-managed kubelet), left out of both passes
excluded=$(sed -n "s/^DENSITY_EXCLUDED='\(.*\)'$/\1/p" "$HERE/run.sh")
[ -n "$excluded" ] || { echo "density-compare: no DENSITY_EXCLUDED in run.sh" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

load() { cut -d' ' -f1-3 /proc/loadavg; }
{
	echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup | sed 's/cgroup2fs/v2/; s/tmpfs/v1/'); crijournal $("$ROOT/bin/crijournal" --version | sed -n 's/^git revision \([0-9a-f]\{7\}\)[0-9a-f]*/\1/p') (bin/crijournal's revision); specs: ${ONLY:-all}."
	[ -z "${NOTE:-}" ] || echo "$NOTE"
} >"$OUT/conditions.txt"

rc=0
args=()
for rt in $RUNTIMES; do
	for pass in asserting benchmark; do
		if [ $pass = asserting ]; then only=$ONLY skip="\\[Benchmark\\]|$excluded"; else only="($ONLY).*\[Benchmark\]" skip=$excluded; fi
		# a pass none of whose specs ONLY names is not run (the suite's dry run counts them)
		n=$("$ROOT/bin/e2e_node.test" --ginkgo.dry-run --ginkgo.no-color \
			--ginkgo.focus="\[sig-node\] (Density|Resource-usage).*($only)" --ginkgo.skip="$skip" 2>/dev/null |
			sed -n 's/^Will run \([0-9]*\) of.*/\1/p')
		[ "${n:-0}" -gt 0 ] || continue
		echo "density-compare: $rt, $n $pass specs (load $(load))" | tee -a "$OUT/conditions.txt"
		if ! RUNTIME=$rt FOCUS=density ONLY="$only" SKIP="$skip" RESULTS="$OUT/$rt/$pass" \
			"$HERE/run.sh" >"$OUT/$rt-$pass.log" 2>&1; then
			echo "density-compare: $rt, $pass specs: run.sh failed (specs failed, or the run did): $OUT/$rt-$pass.log" >&2
			rc=1
		fi
		args+=("$rt=$OUT/$rt/$pass")
	done
done
echo "density-compare: done (load $(load))" | tee -a "$OUT/conditions.txt"

{
	sed 's/$/  /' "$OUT/conditions.txt"
	echo
	python3 "$HERE/density-report.py" "${args[@]}"
} >"$OUT/results.md"
cat "$OUT/results.md"

if [ "${DOCS:-0}" = 1 ]; then
	doc=$ROOT/docs/BENCHMARKS.md
	begin='<!-- density-compare: begin -->'
	end='<!-- density-compare: end -->'
	if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
		echo "density-compare: $doc has no density-compare markers" >&2
		exit 1
	fi
	python3 - "$doc" "$OUT/results.md" "$begin" "$end" <<'PY'
import sys
doc, res, begin, end = sys.argv[1:]
s = open(doc).read()
i, j = s.index(begin) + len(begin), s.index(end)
open(doc, "w").write(s[:i] + "\n" + open(res).read().rstrip("\n") + "\n" + s[j:])
PY
	echo "density-compare: $doc updated"
fi
echo "density-compare: results in $OUT/results.md"
exit $rc
