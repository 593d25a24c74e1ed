#!/usr/bin/env bash
# The fleet plan on a GPU host without network (docs/fleet.md, "On a GPU host"), from what scripts/gpu/pack.sh
# and scripts/gpu/pack_fleet.sh made in .whl/: builds two GPU models (the MiniLM and ResNet-50
# architectures, seeded, FP16 torch programs on KIND_GPU instances), tunes each with a small grid, plans the
# fleet on this GPU type with each model's GPU memory per instance measured (nvidia-smi by stub process),
# measures the groups served together, and checks the plan by a separate Locust mixed load test at the
# planned rates. Work lives in $WORK (default /tmp/tritonkit-fleet, kept while the machine is): a second run
# skips the models and tunes already made, so the job can span two runs of 10 minutes:
#   scripts/gpu/fleet.sh --only-tune        build and tune (about 5 minutes)
#   scripts/gpu/fleet.sh [--price H100=USD] plan, measure together, load-test (about 5 minutes)
# Each run copies fleet.yaml, tune/ and plan/ to $OUT/fleet (default /tmp/gpu-out) and logs to $OUT/fleet.log.
# Where kubectl, kubernetes-validate or matplotlib are missing here, finish where the results are copied:
#   python -m tritonkit_bench.fleet --finish <copied>/fleet/plan   (checks the overlays, draws the pictures)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
WORK=${WORK:-/tmp/tritonkit-fleet}
if ! python3 -c 'import locust' 2>/dev/null; then
  if ls "$WHL"/fleet/*.whl >/dev/null 2>&1; then
    # shellcheck disable=SC2046
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" $(ls "$WHL"/fleet/*.whl) 2>&1 | tail -2
  else
    echo "no Locust here and no $WHL/fleet/*.whl: run scripts/gpu/pack_fleet.sh where there is network" >&2
    exit 1
  fi
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
PYTHONUNBUFFERED=1 python3 -m tritonkit_bench.fleet --gpu --out "$WORK" --window-s 0.25 \
  --verify-seconds 30 --max-seconds 10 "$@" 2>&1 | tee "$OUT/fleet.log"
code=${PIPESTATUS[0]}
# the built models stay here (size); Locust's HTML pages too
mkdir -p "$OUT/fleet"
for part in fleet.yaml tune plan; do
  [ -e "$WORK/$part" ] && cp -r "$WORK/$part" "$OUT/fleet/"
done
find "$OUT/fleet" -name locust.html -delete
exit "$code"
