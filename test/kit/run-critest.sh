#!/usr/bin/env bash
# run-critest.sh ENDPOINT OUTDIR [critest flags...]: critest (cri-tools v1.37.0, kit_critest in
# lib.sh: built into bin/critest when missing) serially against a runtime already serving on
# ENDPOINT, whose registry mirrors reach the kit's registry (registry.sh). Writes ginkgo's
# JSON report and critest's output to OUTDIR, then prints
#   passed N  failed N  skipped N  (of N)
# every failed spec with the first line of its failure, and the skip reasons. Exits with
# critest's status.
#   run-critest.sh unix:///run/crijournal/crijournal.sock /tmp/out -nri-socket /var/run/nri/nri.sock
#   run-critest.sh unix:///... /tmp/out --ginkgo.focus='Image Manager'
# CRITEST_TIMEOUT bounds the run (s, default 1500; ginkgo's own bound is 25m unless given).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EP=${1:?usage: run-critest.sh ENDPOINT OUTDIR [critest flags...]}
OUT=${2:?usage: run-critest.sh ENDPOINT OUTDIR [critest flags...]}
shift 2
critest=$(kit_critest) || exit 1
command -v jq >/dev/null || { echo "run-critest.sh: no jq (apt-get install jq)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$OUT" || exit 1

# critest's HostIpc specs make SysV shared memory segments on the host (ipcmk) and never
# remove them: those made during the run are removed after it.
shm() { awk 'NR > 1 {print $2}' /proc/sysvipc/shm | sort; }
shm_before=$(shm)
start=$(date +%s)
timeout "${CRITEST_TIMEOUT:-1500}" "$critest" --runtime-endpoint "$EP" --image-endpoint "$EP" \
	--ginkgo.no-color --ginkgo.json-report="$OUT/report.json" --ginkgo.timeout=25m "$@" \
	>"$OUT/critest.out" 2>&1
rc=$?
echo "critest rc=$rc in $(($(date +%s) - start)) s; log $OUT/critest.out"
for id in $(comm -13 <(echo "$shm_before") <(shm)); do ipcrm -m "$id" 2>/dev/null || true; done
[ -f "$OUT/report.json" ] || { tail -20 "$OUT/critest.out"; exit 1; }

# the It specs, and which states count as failed
defs='def specs: .[0].SpecReports[] | select(.LeafNodeType == "It");
	def failed: .State == "failed" or .State == "panicked" or .State == "timedout" or .State == "interrupted" or .State == "aborted";
	def line: gsub("\\s+"; " ");'
jq -r "$defs"' [specs] |
	"passed \(map(select(.State == "passed")) | length)  failed \(map(select(failed)) | length)  skipped \(map(select(.State == "skipped")) | length)  (of \(length))"' "$OUT/report.json"
echo "--- failed:"
jq -r "$defs"' specs | select(failed) |
	"* \(.ContainerHierarchyTexts | join(" ")) \(.LeafNodeText)\n    \(.Failure.Message | line | .[0:300])"' "$OUT/report.json"
echo "--- skip reasons:"
jq -r "$defs"' specs | select(.State == "skipped") | (.Failure.Message // "filtered out (focus/skip/benchmark)") | line | .[0:140]' "$OUT/report.json" |
	sort | uniq -c | sort -rn
exit $rc
