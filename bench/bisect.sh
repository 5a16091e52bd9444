#!/usr/bin/env bash
# Paired saturation runs of several commits, interleaved, each with its own harness and build:
#   bench/bisect.sh [-n ROUNDS] [-s SECONDS] COMMIT...
# For each commit: a detached worktree under $TMPDIR/tollgate-bisect/<commit> sharing this
# checkout's node_modules (dependencies in the range were only ever added), `tsc` of the gateway
# and of bench/. Then ROUNDS rounds, each running every commit once, one after another:
#   node dist/bench/run.js --only saturate --targets proxy,gateway --scenarios messages --seconds S
# and prints, per run, the gateway's CPU per call (the serve process, utime + stime) and req/s, and
# the pass-through's req/s in the same run. Interleaving keeps a machine's drift out of the pairs.
# Used to bisect the regression of issue 30; run it on a quiet machine.
set -euo pipefail
rounds=3
seconds=8
while getopts "n:s:" opt; do
  case "$opt" in
    n) rounds="$OPTARG" ;;
    s) seconds="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "$#" -gt 0 ] || { echo "usage: bench/bisect.sh [-n ROUNDS] [-s SECONDS] COMMIT..." >&2; exit 2; }
root="$(git rev-parse --show-toplevel)"
base="${TMPDIR:-/tmp}/tollgate-bisect"
mkdir -p "$base"
for commit in "$@"; do
  dir="$base/$commit"
  if [ ! -d "$dir" ]; then
    git -C "$root" worktree add --detach -f "$dir" "$commit" >/dev/null
    ln -s "$root/node_modules" "$dir/node_modules"
  fi
  if [ ! -f "$dir/dist/bench/run.js" ]; then
    echo "building $commit" >&2
    (cd "$dir" && npx tsc -p tsconfig.build.json && npx tsc -p tsconfig.bench.json)
  fi
done
ulimit -n "$(ulimit -Hn)"
printf '%-12s %6s %12s %12s %12s\n' commit round "cpu ms/call" "gateway r/s" "proxy r/s"
for round in $(seq 1 "$rounds"); do
  for commit in "$@"; do
    dir="$base/$commit"
    (cd "$dir" && node dist/bench/run.js --only saturate --targets proxy,gateway --scenarios messages \
      --seconds "$seconds" >/dev/null 2>&1) || { echo "$commit: run failed" >&2; continue; }
    # Older harnesses kept every run in bench/results/, newer ones a partial run in partial/.
    latest="$(ls -t "$dir"/bench/results/partial/*.json "$dir"/bench/results/*.json 2>/dev/null |
      grep -v '/latest\.json$' | head -1 || true)"
    node -e '
      const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      const row = (t) => r.saturation.find((x) => x.target === t && x.scenario === "messages");
      const g = row("gateway"), p = row("proxy");
      console.log([process.argv[2].padEnd(12), String(process.argv[3]).padStart(6),
        (g?.cpuPerRequestMs ?? NaN).toFixed(3).padStart(12), (g?.requestsPerSecond ?? NaN).toFixed(0).padStart(12),
        (p?.requestsPerSecond ?? NaN).toFixed(0).padStart(12)].join(" "));
    ' "$latest" "$commit" "$round"
  done
done
