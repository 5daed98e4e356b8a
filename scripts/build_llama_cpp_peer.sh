#!/usr/bin/env bash
# Build llama.cpp's own speculative example, benchmark tool and server ("the peer") from the SAME
# llama.cpp sources that the installed llama-cpp-python was built from, so `localspec bench`
# compares decoding strategies and not two different llama.cpp versions.
#
#   scripts/build_llama_cpp_peer.sh [--force]
#
# Result: ${LOCALSPEC_HOME:-~/.cache/localspec}/peer/<llama-cpp-python version>/bin/
#         llama-speculative-simple, llama-bench, llama-server, BUILD_INFO
#
# Environment:
#   PYTHON                  interpreter whose llama-cpp-python is measured (default: python3)
#   LOCALSPEC_HOME          cache root (default: ~/.cache/localspec)
#   LOCALSPEC_BUILD_JOBS    parallel compile jobs (default: 2, the reference machine's cores)
#   LOCALSPEC_PEER_KEEP_BUILD=1  keep the temporary source/build tree (printed at the end)
#
# Idempotent: exits 0 at once when all three binaries are already in the cache, and builds
# only the missing ones otherwise (an older cache with the first two gains llama-server
# without recompiling them); --force rebuilds all. CPU only, Release, no curl/openssl/tests,
# and llama-server without its web UI (no npm, no asset download: the bench needs only the
# HTTP API). Only the named targets are built, a few minutes each on 2 cores instead of the
# ~20 a full llama.cpp build needs.
set -euo pipefail

die() {
    echo "build_llama_cpp_peer: ERROR: $*" >&2
    exit 1
}

FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument '$arg' (only --force and --help are accepted)" ;;
    esac
done

PYTHON="${PYTHON:-python3}"
JOBS="${LOCALSPEC_BUILD_JOBS:-2}"
HOME_DIR="${LOCALSPEC_HOME:-$HOME/.cache/localspec}"

command -v "$PYTHON" >/dev/null || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
command -v cmake >/dev/null || die "cmake not found: install it (e.g. 'apt-get install cmake' or 'pip install cmake')"
command -v c++ >/dev/null || command -v g++ >/dev/null || command -v clang++ >/dev/null \
    || die "no C++ compiler found: install one (e.g. 'apt-get install build-essential')"

VERSION="$("$PYTHON" -m pip show llama-cpp-python 2>/dev/null | awk '/^Version:/ {print $2}')" || true
[ -n "$VERSION" ] || die "llama-cpp-python is not installed for $PYTHON; install localspec first ('pip install -e .')"

DEST="$HOME_DIR/peer/$VERSION/bin"
# built without ggml's AMX kernels (they segfault on some AMX machines: the file says why);
# binaries built before with them are rebuilt
source "$(dirname "${BASH_SOURCE[0]}")/llama_cpp_no_amx.sh"
if [ "${#NO_AMX_CMAKE[@]}" -gt 0 ] && [ -f "$DEST/BUILD_INFO" ] && ! grep -q -- -mno-amx-int8 "$DEST/BUILD_INFO"; then
    echo "build_llama_cpp_peer: $DEST was built with AMX kernels: rebuilding without them"
    FORCE=1
fi
ALL_TARGETS=(llama-speculative-simple llama-bench llama-server)
TARGETS=()
for t in "${ALL_TARGETS[@]}"; do
    if [ "$FORCE" = 1 ] || [ ! -x "$DEST/$t" ]; then TARGETS+=("$t"); fi
done

if [ "${#TARGETS[@]}" = 0 ]; then
    echo "build_llama_cpp_peer: already built for llama-cpp-python $VERSION in $DEST (use --force to rebuild)"
    exit 0
fi
echo "build_llama_cpp_peer: building ${TARGETS[*]} (the others are already in $DEST)"

START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/localspec-peer.XXXXXX")"
cleanup() {
    if [ "${LOCALSPEC_PEER_KEEP_BUILD:-0}" = 1 ]; then
        echo "build_llama_cpp_peer: build tree kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

echo "==> [1/4] downloading the llama-cpp-python $VERSION sdist (the sources the installed wheel came from)"
"$PYTHON" -m pip download --no-binary :all: --no-deps \
    "llama-cpp-python==$VERSION" -d "$WORK/sdist" \
    || die "could not download the llama-cpp-python==$VERSION sdist (offline? put the .tar.gz in a --find-links dir via PIP_FIND_LINKS)"

SDIST="$(find "$WORK/sdist" -maxdepth 1 -name '*.tar.gz' | head -n 1)"
[ -n "$SDIST" ] || die "pip did not produce a llama-cpp-python sdist in $WORK/sdist (got: $(ls "$WORK/sdist"))"

echo "==> [2/4] unpacking $(basename "$SDIST")"
mkdir -p "$WORK/src"
tar -xzf "$SDIST" -C "$WORK/src" || die "could not unpack $SDIST"
LLAMA_SRC="$(find "$WORK/src" -mindepth 3 -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n 1)"
[ -n "$LLAMA_SRC" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ] \
    || die "the sdist has no vendor/llama.cpp/CMakeLists.txt; this llama-cpp-python version is not supported"

# Defaults that matter for a fair comparison are left as llama-cpp-python's build leaves them
# (GGML_NATIVE=ON on a non-cross build, so both use -march=native kernels). Static libraries
# make the binaries self-contained, so the build tree can be deleted afterwards.
# LLAMA_BUILD_SERVER=ON only declares the server targets (nothing is compiled that is not
# named below); the web UI is left out: LLAMA_BUILD_UI=OFF (no npm) and
# LLAMA_USE_PREBUILT_UI=OFF (no download from Hugging Face), so llama-server embeds an
# empty asset table and serves only its API, which is all the bench uses. These sources
# ship no prebuilt tools/ui/dist, the only offline source of the UI.
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_CURL=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_EXAMPLES=ON
    -DLLAMA_BUILD_TOOLS=ON
    -DGGML_CUDA=OFF
    -DGGML_METAL=OFF
    -DGGML_VULKAN=OFF
    -DGGML_HIP=OFF
    -DGGML_SYCL=OFF
    -DGGML_OPENCL=OFF
    -DGGML_RPC=OFF
    "${NO_AMX_CMAKE[@]}"
)
GENERATOR=()
if command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi

echo "==> [3/4] configuring llama.cpp (CPU only, Release)"
cmake -S "$LLAMA_SRC" -B "$WORK/build" "${GENERATOR[@]}" "${CMAKE_FLAGS[@]}" \
    || die "cmake configure failed (see the output above)"

echo "==> [4/4] compiling ${TARGETS[*]} with $JOBS jobs (a few minutes each on 2 cores)"
cmake --build "$WORK/build" --config Release --target "${TARGETS[@]}" -j "$JOBS" \
    || die "compilation failed (see the output above)"

mkdir -p "$DEST"
for t in "${TARGETS[@]}"; do
    BIN="$(find "$WORK/build" -type f -name "$t" -perm -u+x | head -n 1)"
    [ -n "$BIN" ] || die "the build finished but $t was not produced"
    # copy then rename: a half-copied binary never looks "already built"
    cp "$BIN" "$DEST/$t.tmp" && mv -f "$DEST/$t.tmp" "$DEST/$t"
done

ELAPSED=$(( $(date +%s) - START ))
# One block per build, appended: when only llama-server was added, the block of the build
# that made the other two stays, so each binary's flags remain on record.
{
    [ "$FORCE" = 0 ] && [ -f "$DEST/BUILD_INFO" ] && cat "$DEST/BUILD_INFO" && echo
    echo "targets=${TARGETS[*]}"
    echo "llama_cpp_python_version=$VERSION"
    echo "llama_cpp_source=vendor/llama.cpp of $(basename "$SDIST")"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "build_seconds=$ELAPSED"
    echo "jobs=$JOBS"
    echo "compiler=$(c++ --version 2>/dev/null | head -n 1 || echo unknown)"
    echo "cmake_flags=${CMAKE_FLAGS[*]}"
} > "$DEST/BUILD_INFO.tmp"
mv -f "$DEST/BUILD_INFO.tmp" "$DEST/BUILD_INFO"

echo "build_llama_cpp_peer: done in ${ELAPSED}s -> $DEST"
ls -l "$DEST"
