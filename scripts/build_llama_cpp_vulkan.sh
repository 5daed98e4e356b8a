#!/usr/bin/env bash
# Install llama-cpp-python 0.3.36 built with ggml's Vulkan AND RPC backends, on Debian 12,
# so the GPU-offload path runs for real on a machine without a GPU: Mesa's software Vulkan
# driver (lavapipe) gives llama.cpp a device `Vulkan0` (llvmpipe) that ggml-vulkan uses
# when GGML_VK_VISIBLE_DEVICES=0 names it. This is the build CI tests on.
#
#   scripts/build_llama_cpp_vulkan.sh [--check]
#
#   --check   exit 0 when that build is already installed, 1 when not (nothing changes)
#
# Steps (each skipped when already done):
#   1. apt-get install mesa-vulkan-drivers glslc libvulkan1   (lavapipe, shader compiler, loader)
#   2. Debian 13's libvulkan-dev (1.4.309) and spirv-headers into $LOCALSPEC_HOME/vulkan-headers
#      with apt-get download + dpkg -x, nothing installed: Debian 12's headers (1.3.239) are
#      too old for this ggml-vulkan (vk::LayerSettingEXT is missing), and its CMake wants
#      SPIRV-Headers' package config; the newer headers work with Debian 12's loader and glslc.
#   3. CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on ..." pip install --force-reinstall
#      --no-cache-dir llama-cpp-python==0.3.36   (~8 min on 2 cores)
#
# Without apt (another distribution, no network) it fails in step 1 or 2 with the reason;
# .ci/run then falls back to the RPC-only build and the Vulkan tests skip, saying why.
set -euo pipefail

VERSION=0.3.36
PY="${PYTHON:-python}"
HOME_DIR="${LOCALSPEC_HOME:-$HOME/.cache/localspec}"
HDR="$HOME_DIR/vulkan-headers"

die() { echo "build_llama_cpp_vulkan: ERROR: $*" >&2; exit 1; }

installed() {
    # 0.3.36, RPC compiled in, and the Vulkan backend's library in the package
    "$PY" - <<'EOF' 2>/dev/null
import importlib.metadata as m, pathlib, sys
import llama_cpp
ok = (m.version("llama-cpp-python") == "0.3.36" and llama_cpp.llama_supports_rpc()
      and any(pathlib.Path(llama_cpp.__file__).parent.glob("lib/libggml-vulkan.so*")))
sys.exit(0 if ok else 1)
EOF
}

if [[ "${1:-}" == "--check" ]]; then
    installed && exit 0 || exit 1
fi
command -v apt-get >/dev/null || die "needs apt-get (Debian): install the Vulkan headers, glslc and a Vulkan driver by hand"
if ! command -v glslc >/dev/null || [[ ! -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json && ! -e /usr/share/vulkan/icd.d/lvp_icd.json ]] \
   || ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
    echo "installing mesa-vulkan-drivers glslc libvulkan1 (apt-get)"
    pkgs=(mesa-vulkan-drivers glslc libvulkan1)
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${pkgs[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q "${pkgs[@]}" >/dev/null; } \
        || die "apt-get install mesa-vulkan-drivers glslc libvulkan1 failed"
fi

# the runtime (lavapipe) is in place; the build itself only when it is not installed yet
if installed; then
    echo "llama-cpp-python $VERSION (Vulkan + RPC) already installed: not rebuilding"
    exit 0
fi

if [[ ! -f "$HDR/usr/include/vulkan/vulkan.hpp" || ! -d "$HDR/usr/share/cmake/SPIRV-Headers" ]]; then
    echo "fetching Debian 13's libvulkan-dev headers into $HDR (nothing is installed)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
    echo "deb http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
    A=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
       -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
    apt-get "${A[@]}" update -q >/dev/null || die "apt-get update (trixie list) failed"
    (cd "$tmp" && apt-get "${A[@]}" download libvulkan-dev spirv-headers >/dev/null) \
        || die "apt-get download libvulkan-dev spirv-headers failed"
    rm -rf "$HDR" && mkdir -p "$HDR"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$HDR"; done
fi
LIB=$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/ {print $NF; exit}')
[[ -n "$LIB" ]] || die "the Vulkan loader (libvulkan.so.1) is not installed"

echo "building llama-cpp-python $VERSION with -DGGML_VULKAN=on -DGGML_RPC=on (~8 min on 2 cores)"
export CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on -DVulkan_INCLUDE_DIR=$HDR/usr/include -DVulkan_LIBRARY=$LIB -DCMAKE_PREFIX_PATH=$HDR/usr"
export CMAKE_BUILD_PARALLEL_LEVEL="${LOCALSPEC_BUILD_JOBS:-2}"
"$PY" -m pip install -q --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$VERSION"
"$PY" -m pip install -q "llama-cpp-python==$VERSION"  # its pure-Python dependencies
installed || die "the build finished but the Vulkan backend is not in the installed package"
echo "llama-cpp-python $VERSION (Vulkan + RPC) installed"
