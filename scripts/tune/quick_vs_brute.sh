#!/usr/bin/env bash
# Quick search against brute force on one real model, same grid, same machine, one after the other.
#
#   scripts/tune/quick_vs_brute.sh [MODEL_DIR] [OUT_DIR]
#
# MODEL_DIR: a built model folder (default model_repository/minilm_int8, as `make demo` builds it). Each
# search gets its own copy of it (nothing is written back: --write none). OUT_DIR (default
# reports/quick-vs-brute) gets brute/ and quick/ (each tune's report: trials.jsonl, tune.json, report.md),
# their logs, and summary.md: both winners (each crowned by its tune's finals), quick's winner as brute
# force measured it, configs and load levels each search measured (finals included), and the two winners
# re-measured side by side (head_to_head.py). Brute
# force first; the grid is the default one without the preferred-size and queue-policy axes (instances 1,2,3 x delays off,0,500,2000 us x max batch 1..64: 84 configs), so
# brute force fits in about 40 minutes on a 2-core machine. Run it on a machine nothing else is using:
# both searches measure throughput. TUNE_ARGS overrides the tune flags below; RESUME=1 goes on from the
# trial logs already in OUT (an interrupted run keeps every finished measurement).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL_DIR=${1:-model_repository/minilm_int8}
OUT=${2:-reports/quick-vs-brute}
MODEL=$(basename "$MODEL_DIR")
TUNE_ARGS=${TUNE_ARGS:---latency-budget-ms 300 --window-s 1 --max-concurrency 32 --instances 1,2,3 --delays-us off,0,500,2000 --no-preferred --no-queue-policy}
if ! ls "$MODEL_DIR"/[0-9]*/ >/dev/null 2>&1; then
    echo "quick_vs_brute: $MODEL_DIR has no built version; expected a built model folder (run make demo)" >&2
    exit 2
fi
BIN=${BIN:-.venv/bin}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tritonkit-qvb-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
for search in brute quick; do
    mkdir -p "$WORK/$search"
    cp -r "$MODEL_DIR" "$WORK/$search/$MODEL"
    resume=()
    if [ -n "${RESUME:-}" ] && [ -f "$OUT/$search/trials.jsonl" ]; then
        resume=(--resume)
    else
        rm -rf "$OUT/$search" "$OUT/$search.log"
    fi
    echo "quick_vs_brute: $search search on $MODEL ($(date -u +%H:%M:%S) UTC)"
    started=$SECONDS
    # shellcheck disable=SC2086  # TUNE_ARGS is a list of flags
    "$BIN/tritonkit" tune --model "$MODEL" --repo "$WORK/$search" --search "$search" \
        --report "$OUT/$search" --write none --no-plots "${resume[@]}" $TUNE_ARGS 2>&1 | tee -a "$OUT/$search.log"
    echo "quick_vs_brute: $search took $((SECONDS - started)) s" | tee -a "$OUT/$search.log"
done
"$BIN/python" - "$OUT" "$TUNE_ARGS" <<'PY'
import json, sys
from pathlib import Path
from tritonkit.machine import description

out, args = Path(sys.argv[1]), sys.argv[2]
runs = {s: json.loads((out / s / "tune.json").read_text()) for s in ("brute", "quick")}
brute_by_key = {t["key"]: t for t in runs["brute"]["trials"]}
lines = [f"Machine: {description()}. Flags: `{args}`.", "",
         "| search | configs | load levels (with finals) | winner: search req/s, finals median | winner (c = concurrency) |",
         "|---|---:|---:|---:|---|"]
for name, run in runs.items():
    w = run["winner"]
    confirmed = w.get("confirmed_throughput")
    lines.append(f"| {name} | {len(run['trials'])} | {run['measurements']} | {w['throughput']:.1f}, "
                 f"{'–' if confirmed is None else f'{confirmed:.1f}'} | "
                 f"`{w['key']}` (c={w['concurrency']}, p99 {w['p99_ms']:.0f} ms) |")
b, q = runs["brute"], runs["quick"]
as_brute = brute_by_key.get(q["winner"]["key"], {}).get("throughput", 0.0)
lines += ["", f"Quick search's best against brute force's: {q['winner']['throughput'] / b['winner']['throughput']:.3f}; "
          f"quick's winner as brute force measured it: {as_brute:.1f} req/s ({as_brute / b['winner']['throughput']:.3f} of "
          f"brute force's best). Quick measured {len(q['trials'])} of {len(b['trials'])} configs "
          f"({len(q['trials']) / len(b['trials']):.0%}) and {q['measurements']} of {b['measurements']} load levels "
          f"({q['measurements'] / b['measurements']:.0%})."]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
# The two winners measured again side by side (a search's best is the maximum of noisy measurements).
"$BIN/python" scripts/tune/head_to_head.py "$OUT" "$MODEL_DIR" "${ROUNDS:-4}"
