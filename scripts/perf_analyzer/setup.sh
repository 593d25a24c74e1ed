#!/usr/bin/env bash
# Makes NVIDIA's perf_analyzer 2.60.0 (the PyPI wheel's C++ binary) runnable on this machine, confined to
# one folder, for the tests that run it against the embedded tritonserver (`make perf-analyzer`, a
# prerequisite of `make test`). Best effort: on any failure it says why, writes the reason to
# $DEST/UNAVAILABLE and exits 0 (the tests then skip with that reason).
#
# The wheel is manylinux_2_38 (glibc >= 2.38, GLIBCXX_3.4.32); Debian 12 has glibc 2.36 and GCC 12's
# libstdc++. Where the binary does not run as is, Debian trixie's libc6, libstdc++6 and libgcc-s1 are
# downloaded with apt (private source list, lists and cache: the system's apt state is not touched),
# unpacked with `dpkg -x` into $DEST/root, and the binary is started through that folder's dynamic loader
# (`ld-linux-x86-64.so.2 --library-path ...`; the system's libssl/libcrypto/libz come after them). Nothing
# else on the machine uses those libraries: the loader's path does not pass on to other processes.
#
# Result: $DEST/bin/perf_analyzer, a wrapper that runs it (point TRITONKIT_PERF_ANALYZER at it).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${DEST:-$ROOT/.cache/perf_analyzer}
VERSION=2.60.0
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

fail() {
  mkdir -p "$DEST"
  echo "$*" > "$DEST/UNAVAILABLE"
  echo "perf_analyzer: not set up: $*" >&2
  exit 0
}

if [ -x "$DEST/bin/perf_analyzer" ] && "$DEST/bin/perf_analyzer" --version 2>/dev/null | grep -q "Perf Analyzer"; then
  echo "perf_analyzer: ready ($DEST/bin/perf_analyzer)"
  exit 0
fi
rm -rf "$DEST/bin" "$DEST/UNAVAILABLE"
mkdir -p "$DEST/wheel" "$DEST/bin"

wheel=$(ls "$ROOT"/.whl/perf_analyzer-$VERSION-*.whl "$DEST"/wheel/perf_analyzer-$VERSION-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_38_x86_64 -d "$DEST/wheel" "perf-analyzer==$VERSION" >/dev/null 2>&1 \
    || fail "could not download perf-analyzer==$VERSION from PyPI"
  wheel=$(ls "$DEST"/wheel/perf_analyzer-$VERSION-*.whl 2>/dev/null | head -1)
fi
[ -n "$wheel" ] || fail "no perf_analyzer-$VERSION wheel"
"$PYTHON" - "$wheel" "$DEST/pa" <<'EOF' || fail "could not unpack $wheel"
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    data = whl.read("perf_analyzer/bin/perf_analyzer")
os.makedirs(sys.argv[2], exist_ok=True)
path = os.path.join(sys.argv[2], "perf_analyzer")
with open(path + ".tmp", "wb") as out:
    out.write(data)
os.chmod(path + ".tmp", 0o755)
os.replace(path + ".tmp", path)
EOF
BINARY="$DEST/pa/perf_analyzer"

wrapper() {  # $1: the command line that starts the binary
  cat > "$DEST/bin/perf_analyzer.tmp" <<EOF
#!/bin/sh
# made by scripts/perf_analyzer/setup.sh: perf_analyzer $VERSION, run confined to $DEST
exec $1 "\$@"
EOF
  chmod 755 "$DEST/bin/perf_analyzer.tmp" && mv "$DEST/bin/perf_analyzer.tmp" "$DEST/bin/perf_analyzer"
}

if "$BINARY" --version 2>/dev/null | grep -q "Perf Analyzer"; then
  wrapper "\"$BINARY\""  # this C library is new enough
  echo "perf_analyzer: ready ($DEST/bin/perf_analyzer, the system's C library)"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 \
  || fail "the binary needs glibc >= 2.38 and this machine has no apt-get/dpkg to fetch Debian trixie's"
APT="$DEST/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$DEST/debs"
echo "deb http://deb.debian.org/debian trixie main" > "$APT/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o APT::Sandbox::User=root)
if [ -z "$(ls "$DEST"/debs/libc6_*.deb 2>/dev/null)" ]; then
  apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 || fail "apt-get update of Debian trixie's lists failed"
  (cd "$DEST/debs" && apt-get "${apt_opts[@]}" download libc6 libstdc++6 libgcc-s1 >/dev/null 2>&1) \
    || fail "apt-get download of trixie's libc6 libstdc++6 libgcc-s1 failed"
fi
rm -rf "$DEST/root"
for deb in "$DEST"/debs/*.deb; do
  dpkg -x "$deb" "$DEST/root" || fail "dpkg -x $deb failed"
done
LIB="$DEST/root/usr/lib/x86_64-linux-gnu"
[ -x "$LIB/ld-linux-x86-64.so.2" ] || fail "trixie's libc6 has no $LIB/ld-linux-x86-64.so.2"
wrapper "\"$LIB/ld-linux-x86-64.so.2\" --library-path \"$LIB:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu\" \"$BINARY\""
if ! out=$("$DEST/bin/perf_analyzer" --version 2>&1) || ! echo "$out" | grep -q "Perf Analyzer"; then
  rm -f "$DEST/bin/perf_analyzer"
  fail "the binary does not start through trixie's loader: $(echo "$out" | head -1)"
fi
echo "perf_analyzer: ready ($DEST/bin/perf_analyzer, through Debian trixie's C library: $out)"
