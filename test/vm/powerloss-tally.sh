#!/usr/bin/env bash
# test/vm/powerloss-tally.sh OUT: the figures of a `make test-powerloss` run (its OUT
# directory: seed, events.jsonl, boot-N/test.log), as docs/POWERLOSS.md reports them.
# It reads what the boots wrote, so it also tallies a run that is still going or was
# stopped: only the boots that checked (an event "verified") count.
set -euo pipefail
out=${1:?usage: powerloss-tally.sh OUT}
ev=$out/events.jsonl
[ -f "$ev" ] || { echo "powerloss-tally: no $ev" >&2; exit 2; }

count() { grep -c -- "$1" "$ev" || true; }
logs() { cat "$out"/boot-*/test.log 2>/dev/null || true; }

checked=$(count '"ev":"verified"')
boots=$(find "$out" -maxdepth 1 -name 'boot-*' -type d | wc -l)
echo "run: $(tr '\n' ' ' <"$out/seed")"
echo "boots: $boots started, $checked checked what the cut before them left (boot 1 checks an empty disk)"
ready=$(logs | grep -cE 'verify: (daemon|containerd) ready' || true)
# Go's durations (1m9.2s, 55.9s, 980ms) in seconds, then the least and the most.
secs=$(logs | grep -oE 'verify: (daemon|containerd) ready [0-9.ms]+' | awk '{d = $NF; s = 0
	if (d ~ /ms$/) { sub(/ms$/, "", d); s = d / 1000 } else { if (d ~ /m/) { split(d, a, "m"); s = a[1] * 60; d = a[2] } sub(/s$/, "", d); s += d }
	print s}' | sort -n)
echo "starts: $ready ready, $(echo "$secs" | sed -n '1p') to $(echo "$secs" | sed -n '$p') s after the daemon's start"
echo "e2fsck -p exit statuses: $(cat "$out"/boot-*/vm/fsck.status 2>/dev/null | sort | uniq -c | awk '{printf "%s x%s ", $2, $1}')"
for class in failed-start leak lost-image pod-not-back half-present manifest-lost; do
	# A leak stays until something removes it: each later boot finds it again.
	distinct=$(grep -- "\"ev\":\"finding\",\"name\":\"$class\"" "$ev" | sed 's/^{"boot":[0-9]*,//' | sort -u | wc -l || true)
	echo "findings $class: $(count "\"ev\":\"finding\",\"name\":\"$class\""), distinct $distinct"
done
echo "pulls answered: $(count '"ev":"pulled"'), images removed: $(count '"ev":"image-removed"')"
echo "data layers read back whole: $(logs | grep -c 'reads back whole' || true)"
echo "static pods running again: $(logs | grep -c 'verify: static pod .* running again' || true)" \
	"(manifests added $(count '"ev":"manifest-added"'), removed $(count '"ev":"manifest-removed"'))"
echo "runp -T timeouts: $(count '"ev":"runp-timeout"'), retried: $(count '"ev":"retried"')," \
	"ready with the cached ID: $(logs | grep -c 'ready (cached before: true)' || true)," \
	"ready anew: $(logs | grep -c 'ready (cached before: false)' || true)"
echo "create -T timeouts: $(count '"ev":"create-timeout"'), their pods removed: $(logs | grep -c 'of the timed-out container .* removed' || true)"
echo "findings:"
grep -- '"ev":"finding"' "$ev" | cut -c1-300 || echo "  none"
