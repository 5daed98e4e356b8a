#!/usr/bin/env bash
# localspec GPU check: build llama-cpp-python with CUDA for one architecture, offline, and
# measure localspec on the GPU.
#
#   scripts/gpu_check.sh --prepare DIR   here, with PyPI reachable: gather the inputs into DIR
#                                        (a trimmed llama-cpp-python sdist, wheels, this
#                                        project's source; < 60 MiB)
#   bash DIR/gpu_check.sh DIR            there: an NVIDIA GPU, nvcc, CMake and Python 3.10+,
#                                        no network. Reports layers placed on the GPU, greedy
#                                        speculative == AR on the GPU, decode cost for batches
#                                        of 1..64 tokens GPU vs CPU, and the speedup the cost
#                                        model predicts from them. Report: DIR/report/.
#
# Why so: the project's CI has no GPU and a GPU machine sometimes lent to it has no network;
# everything it needs travels in DIR, and the models are random-weight GGUFs of Qwen2.5
# shapes written there (scripts/gpu_check_gguf.py), so no model download is needed.
# The build is kept in DIR/work: a rerun with the same build skips it (a build cut short
# resumes from its object files).
#
# Environment: GPU_CHECK_ARCH (CUDA architecture, default: the GPU's compute capability),
# GPU_CHECK_WORK (default DIR/work), GPU_CHECK_SKIP_7B=1 (skip the 7B-shaped target),
# GPU_CHECK_CMAKE_EXTRA (more CMake flags, e.g. -DGGML_CUDA_FA=OFF for a faster build),
# GPU_CHECK_PY (prepare: Python versions to fetch numpy/MarkupSafe/PyYAML wheels for,
# default "3.12"), GPU_CHECK_CACHE (prepare: download cache, default
# ~/.cache/localspec/gpu-check), PYTHON (default python3), GPU_CHECK_SMOKE=1 (no GPU: skip
# the build, use the installed llama_cpp and tiny models; a test of this script itself).
set -euo pipefail

VERSION=0.3.36
LIMIT_MIB=60
PY=${PYTHON:-python3}
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
# pure-Python wheels: the build backend, llama-cpp-python's and the check's runtime needs
PURE="scikit-build-core pathspec packaging tomli exceptiongroup typing-extensions diskcache jinja2 tqdm gguf"
BINARY="numpy markupsafe pyyaml llguidance"

say() { printf '[gpu-check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 2; }

pin() {  # NAME -> NAME==VERSION when installed here (reproducible bundles), else NAME
    local v
    v=$("$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1" 2>/dev/null || true)
    if [ -n "$v" ]; then echo "$1==$v"; else echo "$1"; fi
}

trim_sdist() {  # SDIST OUT.tar.xz: drop test models, docs, web UI and other backends' sources
    local sdist=$1 out=$2 tmp
    tmp=$(mktemp -d)
    tar -xzf "$sdist" -C "$tmp"
    local top="$tmp/llama_cpp_python-$VERSION" v
    v="$top/vendor/llama.cpp"
    rm -rf "$top"/{.git,.github,docs,examples,tests,docker} "$v"/{.git,.github,.devops} \
        "$v"/{models,docs,media,tests,benches,examples,pocs,app,gguf-py,conversion,scripts,grammars,skills,ci,requirements} \
        "$v"/convert_*.py
    find "$v/tools" -mindepth 1 -maxdepth 1 ! -name mtmd -exec rm -rf {} +
    find "$v/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' \
        ! -name ggml-cpu ! -name ggml-cuda ! -name ggml-rpc ! -name ggml-blas ! -name ggml-hip ! -name ggml-musa \
        -exec rm -rf {} +
    tar -C "$tmp" -cJf "$out" "llama_cpp_python-$VERSION"
    rm -rf "$tmp"
}

prepare() {
    local dir=$1 root cache
    root="$(cd "$(dirname "$SELF")/.." && pwd)"
    cache=${GPU_CHECK_CACHE:-${LOCALSPEC_HOME:-$HOME/.cache/localspec}/gpu-check}
    mkdir -p "$dir/wheels" "$cache/wheels"
    local sdist="$cache/llama_cpp_python-$VERSION.tar.gz" trimmed="$cache/llama-cpp-python-$VERSION-trimmed.tar.xz"
    if [ ! -f "$sdist" ]; then
        say "downloading the llama-cpp-python $VERSION sdist (~75 MB, once)"
        "$PY" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$cache"
    fi
    if [ ! -f "$trimmed" ] || [ "$sdist" -nt "$trimmed" ] || [ "$SELF" -nt "$trimmed" ]; then
        say "trimming the sdist"
        trim_sdist "$sdist" "$trimmed.tmp" && mv "$trimmed.tmp" "$trimmed"
    fi
    cp "$trimmed" "$dir/"
    local stamp="$cache/wheels/.stamp-${GPU_CHECK_PY:-3.12}"
    if [ ! -f "$stamp" ]; then
        say "downloading wheels"
        local pins=() name pyv
        for name in $PURE; do pins+=("$(pin "$name")"); done
        "$PY" -m pip download -q --only-binary :all: --no-deps -d "$cache/wheels" \
            --implementation py --abi none --platform any --python-version 3.10 "${pins[@]}"
        for pyv in ${GPU_CHECK_PY:-3.12}; do
            "$PY" -m pip download -q --only-binary :all: --no-deps -d "$cache/wheels" \
                --python-version "$pyv" --implementation cp --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
                --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 $BINARY
        done
        touch "$stamp"
    fi
    cp "$cache"/wheels/*.whl "$dir/wheels/"
    tar -C "$root" --exclude=__pycache__ -czf "$dir/localspec-src.tar.gz" localspec pyproject.toml README.md \
        models.toml scripts/gpu_check.sh scripts/gpu_check.py scripts/gpu_check_gguf.py \
        tests/support/tiny_gguf bench/results/speed-q4-greedy.json
    cp "$SELF" "$dir/gpu_check.sh"
    local bytes
    bytes=$(du -sb "$dir" | cut -f1)
    ( cd "$dir" && find . -type f ! -name MANIFEST -exec sha256sum {} + | sort -k2 ) > "$dir/MANIFEST"
    say "bundle $dir: $((bytes / 1048576)) MiB ($bytes bytes); run there: bash $dir/gpu_check.sh $dir"
    [ "$bytes" -le $((LIMIT_MIB * 1048576)) ] || die "bundle is over $LIMIT_MIB MiB"
}

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: this check needs $2"; }

install_missing() {  # TARGET "module:dist ..." -> install the dists whose module does not import
    local target=$1 pairs=$2 want=() pair
    for pair in $pairs; do
        PYTHONPATH="$target" "$PY" -c "import ${pair%%:*}" 2>/dev/null || want+=("${pair#*:}")
    done
    [ ${#want[@]} -eq 0 ] || "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-deps --upgrade \
        --target "$target" "${want[@]}"
}

run_check() {
    local dir t0 phase
    dir="$(cd "$1" && pwd)"
    t0=$(date +%s)
    phase() { say "$1 ($(( $(date +%s) - t0 )) s so far)"; }
    local smoke=${GPU_CHECK_SMOKE:-0}  # 1: no GPU, no build, tiny models (tests this script on a CPU box)
    if [ "$smoke" != 1 ]; then
        need nvidia-smi "an NVIDIA driver"; need nvcc "the CUDA toolkit"; need cmake "CMake >= 3.21"
    fi
    need "$PY" "Python 3.10+"
    WHEELS="$dir/wheels"
    local work=${GPU_CHECK_WORK:-$dir/work} pyv arch
    pyv=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    arch=${GPU_CHECK_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)}
    arch=${arch:-native}
    local site="$work/site-$pyv" benv="$work/buildenv-$pyv" proj="$work/project" report="$dir/report"
    mkdir -p "$site" "$benv" "$proj" "$work/models" "$report"
    [ "$smoke" = 1 ] || nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,compute_cap --format=csv \
        | tee "$report/nvidia-smi.csv" >&2
    tar -xzf "$dir/localspec-src.tar.gz" -C "$proj"
    install_missing "$site" "numpy:numpy jinja2:jinja2 markupsafe:markupsafe tqdm:tqdm typing_extensions:typing-extensions diskcache:diskcache yaml:pyyaml gguf:gguf llguidance:llguidance"
    [ "${pyv#3.}" -ge 11 ] || install_missing "$site" "tomli:tomli"
    local want="llama-cpp-python $VERSION GGML_CUDA=on arch=$arch ${GPU_CHECK_CMAKE_EXTRA:-}"
    if [ "$smoke" = 1 ]; then
        phase "smoke test: using the installed llama_cpp, no build"
    elif [ -f "$site/.localspec-build" ] && [ "$(cat "$site/.localspec-build")" = "$want" ] \
        && ls "$site"/llama_cpp/lib/libggml-cuda.* >/dev/null 2>&1; then
        phase "build present: $want"
    else
        phase "building $want with $(nproc) jobs"
        install_missing "$benv" "scikit_build_core:scikit-build-core pathspec:pathspec packaging:packaging"
        [ "${pyv#3.}" -ge 11 ] || install_missing "$benv" "tomli:tomli exceptiongroup:exceptiongroup"
        rm -rf "$work/src" && mkdir -p "$work/src" && tar -xJf "$dir/llama-cpp-python-$VERSION-trimmed.tar.xz" -C "$work/src"
        CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch -DLLAVA_BUILD=off -DGGML_CUDA_NCCL=off ${GPU_CHECK_CMAKE_EXTRA:-}" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PYTHONPATH="$benv" \
            "$PY" -m pip install --no-index --no-deps --no-build-isolation --upgrade --target "$site" \
            -C build-dir="$work/build" "$work/src/llama_cpp_python-$VERSION" >"$report/build.log" 2>&1 \
            || { tail -30 "$report/build.log" >&2; die "build failed (log: $report/build.log)"; }
        echo "$want" >"$site/.localspec-build"
        phase "built"
    fi
    export PYTHONPATH="$proj:$site${PYTHONPATH:+:$PYTHONPATH}"
    local spec
    for spec in qwen2.5-1.5b:t1.5b:1 qwen2.5-0.5b:d0.5b:2 qwen2.5-7b:t7b:3; do
        IFS=: read -r shape name seed <<<"$spec"
        [ "$name" != t7b ] || [ "${GPU_CHECK_SKIP_7B:-0}" != 1 ] || continue
        [ "$smoke" != 1 ] || shape=tiny
        [ -f "$work/models/$name.gguf" ] || { phase "writing a random $shape GGUF"; \
            "$PY" "$proj/scripts/gpu_check_gguf.py" "$work/models/$name.gguf" --shape "$shape" --seed "$seed"; }
    done
    [ -f "$work/models/qwen35-mtp.gguf" ] || { phase "writing tiny hybrid/recurrent/MTP GGUFs"; \
        "$PY" "$proj/scripts/gpu_check.py" --write-tiny "$work/models"; }
    phase "devices and placement"
    "$PY" -m localspec.cli devices -m "$work/models/t1.5b.gguf" -md "$work/models/d0.5b.gguf" | tee "$report/devices.txt"
    phase "measuring"
    local extra=()
    [ "$smoke" != 1 ] || extra=(--allow-cpu --threads 1 --n 16)
    "$PY" "$proj/scripts/gpu_check.py" --models "$work/models" --out "$report/report.json" "${extra[@]}" \
        | tee "$report/summary.txt"
    local total=$(( $(date +%s) - t0 ))
    say "done in $total s; report in $report (summary.txt, report.json, devices.txt, build.log)"
    [ "$total" -le 480 ] || say "warning: over the 8-minute budget ($total s); a rerun reuses the build"
}

case "${1:-}" in
    --prepare) [ -n "${2:-}" ] || die "usage: $0 --prepare DIR"; prepare "$2" ;;
    ""|-h|--help) sed -n '2,29p' "$SELF"; exit 0 ;;
    *) [ -d "$1" ] || die "usage: $0 DIR (a folder made by --prepare)"; run_check "$1" ;;
esac
