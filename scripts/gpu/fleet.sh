#!/usr/bin/env bash
# The fleet plan on a GPU host without network (docs/fleet.md, "On a GPU"), from what scripts/gpu/pack.sh
# and scripts/gpu/pack_fleet.sh made: builds two GPU models (the MiniLM and ResNet-50 architectures, seeded,
# FP16 torch programs on KIND_GPU instances), tunes each with a small grid, plans the fleet on this GPU
# type with each model's GPU memory per instance measured (nvidia-smi by stub process), measures the
# groups served together, and checks the plan by a separate Locust mixed load test at the planned rates.
# Writes $OUT/fleet (default /tmp/gpu-out/fleet: fleet.yaml, tune/, plan/) and $OUT/fleet.log; the built
# models stay behind. Where kubectl or matplotlib are missing here, finish on the way back:
#   python -m tritonkit_bench.fleet --finish <copied>/fleet/plan   (checks the overlays, draws the pictures)
# Usage: scripts/gpu/fleet.sh [python -m tritonkit_bench.fleet args, e.g. --price H100=<your $/h>]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
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
PYTHONUNBUFFERED=1 python3 -m tritonkit_bench.fleet --gpu --out "$OUT/fleet" --window-s 0.25 \
  --verify-seconds 30 --max-seconds 10 "$@" 2>&1 | tee "$OUT/fleet.log"
code=${PIPESTATUS[0]}
rm -rf "$OUT/fleet/repo" "$OUT/fleet/plan/verify"/*/locust.html  # models and Locust's page stay behind (size)
exit "$code"
