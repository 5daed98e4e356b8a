# Sourced (not run) by every script that builds llama.cpp: build_llama_cpp_vulkan.sh,
# build_llama_cpp_peer.sh and .ci/run's RPC-only fallback, so the flags and the check live once.
#
# Why: ggml's AMX kernels, compiled in by -march=native on an AMX CPU (Sapphire Rapids and
# later), segfault in ggml_backend_amx_mul_mat on the first decode of a quantized model on
# some of these machines (seen on a 2-core VM: SmolLM2 Q4_1, Qwen Q4_0 and Q4_K_M; upstream
# llama.cpp issue 20824, open in the version localspec pins). -mno-amx-* leaves the AMX code
# out and keeps every other native instruction (AVX-512, VNNI): GCC lets an explicit -mno-X
# win over -march=native whatever their order. docs/gpu.md#repack; localspec itself leaves
# the kernels unused in a build that has them (backend/devices.amx_kernels).

NO_AMX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# cmake arguments, one per element (x86-64 only: other compilers know no such flags)
NO_AMX_CMAKE=()
if [ "$(uname -m)" = x86_64 ]; then
    NO_AMX_CMAKE=("-DCMAKE_C_FLAGS=$NO_AMX_FLAGS" "-DCMAKE_CXX_FLAGS=$NO_AMX_FLAGS")
fi

# The same for CMAKE_ARGS, which scikit-build-core splits as a shell would: each one quoted.
no_amx_cmake_args() {
    local a
    for a in "${NO_AMX_CMAKE[@]}"; do printf "'%s' " "$a"; done
}

# Exit 0 when the llama-cpp-python that interpreter $1 (default python) imports has AMX kernels.
has_amx_kernels() {
    "${1:-python}" -c "import sys, llama_cpp; sys.exit(b'AMX_INT8 = 1' not in llama_cpp.llama_print_system_info())" 2>/dev/null
}
