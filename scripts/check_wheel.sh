#!/usr/bin/env bash
# Installs a built wheel into a fresh virtual environment with no compiler on
# PATH, then runs `detconv demo` and the test suite against the installed copy
# (from outside the source tree, so the checkout's detconv/ cannot shadow it).
#
#   scripts/check_wheel.sh dist/detconv-*.whl [pytest args...]
set -euo pipefail
wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); shift
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
py=$(command -v python3)

# PATH without compilers: every tool of the usual bin directories except them.
mkdir -p "$work/bin"
for d in /usr/local/bin /usr/bin /bin; do
  for f in "$d"/*; do
    b=$(basename "$f")
    case $b in
      gcc*|g++*|cc|c++|c89*|c99*|cpp*|*-linux-gnu-*|nvcc*|clang*|cmake*|ccache|ld|ld.*|as|icx|icpx) continue ;;
    esac
    [ -e "$work/bin/$b" ] || ln -s "$f" "$work/bin/$b"
  done
done
"$py" -m venv "$work/venv"
export PATH="$work/venv/bin:$work/bin"
for c in cc gcc g++ c++ nvcc cmake; do
  if command -v "$c" >/dev/null; then echo "compiler still on PATH: $c" >&2; exit 1; fi
done
echo "+ no compiler on PATH (cc, gcc, g++, c++, nvcc, cmake all absent)"
set -x
pip install --quiet --upgrade pip
time pip install --quiet "$wheel[test]"
cd "$work"
detconv --version
time detconv demo
time pytest -q -p no:cacheprovider --rootdir "$repo" "$repo/tests" "$@"
