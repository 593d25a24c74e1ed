#!/usr/bin/env bash
# Makes, on a machine with network access, the wheels scripts/gpu/fleet.sh needs beyond scripts/gpu/pack.sh's:
# Locust and its dependencies (the fleet plan's separate mixed load test runs `tritonkit loadtest`), in
# DEST/fleet (default .whl/fleet, ignored; about 8 MB). Run scripts/gpu/pack.sh first.
# Usage: scripts/gpu/pack_fleet.sh [DEST]
set -euo pipefail
DEST=${1:-.whl}/fleet
PY=${PYTHON:-python3}
mkdir -p "$DEST"
# cp312 manylinux wheels, no dependencies: each one is named (the versions the project's venv runs)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST" \
  locust==2.47.0 configargparse==1.9.0 flask==3.1.3 flask-cors==6.0.5 flask-login==0.6.3 werkzeug==3.1.9 \
  itsdangerous==2.2.0 blinker==1.9.0 click==8.5.1 jinja2==3.1.6 markupsafe==3.0.4 msgpack==1.2.4 pyzmq==27.3.0 \
  psutil==7.2.2 python-engineio==4.15.1 python-socketio==5.18.1 bidict==0.24.1 simple-websocket==1.1.0 \
  wsproto==1.3.2 h11==0.16.0 websocket-client==1.9.2 requests==2.34.2 urllib3==2.8.0 certifi==2026.10.19.post1 \
  charset-normalizer==3.5.3 idna==3.20 h2==4.4.1 hpack==4.2.0 hyperframe==6.1.0
ls -la "$DEST"
