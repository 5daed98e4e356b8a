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
#      They come from the machine's own Debian archive entry with the suite set to trixie
#      (see trixie_sources), so from whatever mirror or proxy its apt uses.
#   3. CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on ..." pip install --force-reinstall
#      --no-cache-dir llama-cpp-python==0.3.36   (~8 min on 2 cores)
#
# Without apt (another distribution, no network) it fails in step 1 or 2 with the reason;
# .ci/run then falls back to the RPC-only build and the Vulkan tests skip, saying why.
set -euo pipefail

VERSION=0.3.36
# built without ggml's AMX kernels: they segfault on some AMX machines (the file says why)
source "$(dirname "${BASH_SOURCE[0]}")/llama_cpp_no_amx.sh"
PY="${PYTHON:-python}"
HOME_DIR="${LOCALSPEC_HOME:-$HOME/.cache/localspec}"
HDR="$HOME_DIR/vulkan-headers"

die() { echo "build_llama_cpp_vulkan: ERROR: $*" >&2; exit 1; }

# The trixie entries for step 2 are the machine's own, not a host named here, so the fetch
# works wherever its apt works (a local mirror, a proxy, a snapshot): its entries for the main
# Debian archive -- type deb, suite exactly "bookworm" (so not bookworm-security, -updates or
# -backports), component main -- with only the suite swapped for trixie and the URI,
# components and options (signed-by, trusted, arch, ...) kept as they are. trixie's Release is
# signed with keys that Debian 12's debian-archive-keyring already holds, so the key check
# runs as it does for bookworm. Reads apt's source list and parts dir (one-line *.list,
# deb822 *.sources), writes $1/trixie.list and/or $1/trixie.sources; returns 1 if none found.
trixie_sources() {
    local out=$1 SL=/etc/apt/sources.list SP=/etc/apt/sources.list.d f line key val st n=0
    local deb bw main off
    eval "$(apt-config shell SL Dir::Etc::SourceList/f SP Dir::Etc::SourceParts/d 2>/dev/null)"
    SP=${SP%/}
    # one-line: deb [options] URI suite component...   ('#' starts a comment)
    local re='^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+bookworm[[:space:]]+(.*[^[:space:]])'
    for f in "$SL" "$SP"/*.list; do
        [[ -f $f ]] || continue
        while IFS= read -r line || [[ -n $line ]]; do
            [[ ${line%%#*} =~ $re && " ${BASH_REMATCH[3]} " == *[[:space:]]main[[:space:]]* ]] || continue
            echo "deb ${BASH_REMATCH[1]}${BASH_REMATCH[2]} trixie ${BASH_REMATCH[3]}" >> "$out/trixie.list"
            n=$((n + 1))
        done < "$f"
    done
    # deb822: stanzas end at a blank line (one is added at the end of each file); a line that
    # starts with a space continues the field above (e.g. an inline Signed-By key); '#' is a
    # comment. A stanza's Types/Suites become "deb"/"trixie", its other lines are copied.
    for f in "$SP"/*.sources; do
        [[ -f $f ]] || continue
        st="" deb=0 bw=0 main=0 off=0 key=""
        while IFS= read -r line; do
            if [[ -z ${line//[[:space:]]/} ]]; then
                if ((deb && bw && main && !off)); then
                    printf 'Types: deb\nSuites: trixie\n%s\n' "$st" >> "$out/trixie.sources"
                    n=$((n + 1))
                fi
                st="" deb=0 bw=0 main=0 off=0 key=""
                continue
            fi
            [[ $line == \#* ]] && continue
            if [[ $line == [[:space:]]* ]]; then val=$line
            else key=${line%%:*} key=${key,,} val=${line#*:}; fi
            val=" ${val//[[:space:]]/ } "
            case $key in
                types) [[ $val == *" deb "* ]] && deb=1; continue ;;
                suites) [[ $val == *" bookworm "* ]] && bw=1; continue ;;
                components) [[ $val == *" main "* ]] && main=1 ;;
                enabled) [[ ${val,,} == *" no "* ]] && off=1 ;;
            esac
            st+=$line$'\n'
        done < <(cat -- "$f"; echo)
    done
    ((n > 0))
}

installed() {
    # 0.3.36, RPC compiled in, the Vulkan backend's library in the package, and no AMX kernels
    # (a build made on an AMX machine without the flags segfaults on its first quantized decode)
    "$PY" - <<'EOF' 2>/dev/null && ! has_amx_kernels "$PY"
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
   || ! ldconfig -p | grep 'libvulkan.so.1 ' >/dev/null; then
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
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/sources"
    trixie_sources "$tmp/sources" || die "no main Debian archive entry (deb, suite bookworm, component main) in the machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/*.list|*.sources): cannot derive the trixie entry for Debian 13's libvulkan-dev"
    A=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$tmp/sources"
       -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
    apt-get "${A[@]}" update -q >/dev/null || die "apt-get update (trixie list) failed"
    (cd "$tmp" && apt-get "${A[@]}" download libvulkan-dev spirv-headers >/dev/null) \
        || die "apt-get download libvulkan-dev spirv-headers failed"
    rm -rf "$HDR" && mkdir -p "$HDR"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$HDR"; done
fi
# awk reads all of ldconfig's output: an early exit (or grep -q) can end ldconfig with
# SIGPIPE, which pipefail + set -e turned into a silent exit of this script on a fresh machine
LIB=$(ldconfig -p | awk '/libvulkan.so.1 .*x86-64/ && !found {print $NF; found = 1}')
[[ -n "$LIB" ]] || die "the Vulkan loader (libvulkan.so.1) is not installed"

echo "building llama-cpp-python $VERSION with -DGGML_VULKAN=on -DGGML_RPC=on (~8 min on 2 cores)"
export CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=on -DVulkan_INCLUDE_DIR=$HDR/usr/include -DVulkan_LIBRARY=$LIB -DCMAKE_PREFIX_PATH=$HDR/usr $(no_amx_cmake_args)"
export CMAKE_BUILD_PARALLEL_LEVEL="${LOCALSPEC_BUILD_JOBS:-2}"
"$PY" -m pip install -q --force-reinstall --no-cache-dir --no-deps "llama-cpp-python==$VERSION"
"$PY" -m pip install -q "llama-cpp-python==$VERSION"  # its pure-Python dependencies
installed || die "the build finished but the Vulkan backend is not in the installed package"
echo "llama-cpp-python $VERSION (Vulkan + RPC) installed"
