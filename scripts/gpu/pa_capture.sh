#!/usr/bin/env bash
# perf_analyzer beside tritonkit on the GPU device (Ubuntu 24.04, glibc 2.39: the perf_analyzer wheel in
# .whl/ runs as is; scripts/gpu/setup.sh installs it with the other wheels). For each part named (default
# bert), builds it as the GPU bench does (native runner, FP16), serves it with `tritonkit serve`, and on
# that one server:
#   1. captures perf_analyzer's own files at each level (c1 and c64, gRPC; raw, as run by hand):
#      pa-<part>-c<N>.csv (-f --verbose-csv), .json (--profile-export-file, only with EXPORT=1: it holds
#      every request's inputs and outputs), .log (-v stdout and stderr);
#   2. `tritonkit profile --generator perf_analyzer` (profile-pa-<part>.json/.csv/.txt): perf_analyzer's
#      output read into tritonkit's report;
#   3. `tritonkit profile` with its cross-check (profile-tk-<part>.json/.csv/.txt): tritonkit's generator,
#      perf_analyzer's figure beside each level.
# Usage: PARTS="bert resnet16" LEVELS="1 64" scripts/gpu/pa_capture.sh  (writes to $OUT; exit 1 if a step failed)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
WORK=${WORK:-/tmp/tritonkit-pa-capture}
rm -rf "$WORK" && mkdir -p "$WORK"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
PA=$(python3 -c 'import sys; from tritonkit.measure.perf_analyzer import locate; b = locate(); print(getattr(b, "path", "")); print(b if isinstance(b, str) else b.version, file=sys.stderr)' 2>>"$OUT/pa-capture.log")
tail -1 "$OUT/pa-capture.log"
[ -n "$PA" ] || { echo "perf_analyzer not found (see pa-capture.log)"; exit 1; }
LEVELS=${LEVELS:-1 64}
csv_levels=$(echo "$LEVELS" | tr ' ' ',')
rc=0
for part in ${PARTS:-bert}; do
  python3 -c "
import sys; from pathlib import Path
from tritonkit_bench.gpu import log
from tritonkit_bench.gpu_models import PARTS, build_part
build_part(Path(sys.argv[1]), sys.argv[2], log, runner='native'); print(PARTS[sys.argv[2]].model)
" "$WORK/repo-$part" "$part" > "$WORK/$part.model" 2>>"$OUT/pa-capture.log" || { rc=1; continue; }
  model=$(tail -1 "$WORK/$part.model")
  python3 -m tritonkit serve --repo "$WORK/repo-$part" --http-port 18000 --grpc-port 18001 --metrics-port 18002 \
    > "$WORK/serve.txt" 2>&1 &
  serve=$!
  for _ in $(seq 1 300); do
    curl -sf localhost:18000/v2/health/ready >/dev/null 2>&1 && break
    kill -0 "$serve" 2>/dev/null || break
    sleep 1
  done
  if ! curl -sf localhost:18000/v2/health/ready >/dev/null 2>&1; then
    echo "== $part: the server did not become ready" | tee -a "$OUT/pa-capture.log"; cat "$WORK/serve.txt" >> "$OUT/pa-capture.log"
    kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null; rc=1; continue
  fi
  # tritonkit's own requests as perf_analyzer's input data: its random INT64 data is past any vocabulary
  # (a BERT's token ids: a device-side assert in the native backend, every later request failed)
  python3 -c "import sys; from pathlib import Path; from tritonkit.measure.loadgen import Target
from tritonkit.measure.perf_analyzer import write_input_data
write_input_data(Target('localhost:18001', sys.argv[1], 'grpc'), Path(sys.argv[2]))" "$model" "$WORK/$part-data.json" \
    2>>"$OUT/pa-capture.log" || rc=1
  for c in $LEVELS; do
    export_args=(--input-data "$WORK/$part-data.json")
    [ "${EXPORT:-0}" = 1 ] && export_args+=(--profile-export-file "$OUT/pa-$part-c$c.json")
    "$PA" -m "$model" -u localhost:18001 -i grpc --concurrency-range "$c:$c" --measurement-interval 1000 \
      --stability-percentage 10 --max-trials 10 --percentile 99 -v -f "$OUT/pa-$part-c$c.csv" --verbose-csv \
      "${export_args[@]}" > "$OUT/pa-$part-c$c.log" 2>&1 || rc=1
    echo "== $part c$c perf_analyzer: $(tail -1 "$OUT/pa-$part-c$c.csv" 2>/dev/null)" | tee -a "$OUT/pa-capture.log"
  done
  common=(--model "$model" --url localhost:18001 --http-url localhost:18000 --protocol grpc
    --concurrency "$csv_levels" --window-s 1 --max-windows 10)
  python3 -m tritonkit profile "${common[@]}" --generator perf_analyzer \
    --csv "$OUT/profile-pa-$part.csv" --json "$OUT/profile-pa-$part.json" > "$OUT/profile-pa-$part.txt" 2>&1 || rc=1
  python3 -m tritonkit profile "${common[@]}" \
    --csv "$OUT/profile-tk-$part.csv" --json "$OUT/profile-tk-$part.json" > "$OUT/profile-tk-$part.txt" 2>&1 || rc=1
  { echo "== $part profile --generator perf_analyzer"; cat "$OUT/profile-pa-$part.txt"
    echo "== $part profile (tritonkit, perf_analyzer beside it)"; cat "$OUT/profile-tk-$part.txt"; } | tee -a "$OUT/pa-capture.log"
  kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null
done
exit "$rc"
