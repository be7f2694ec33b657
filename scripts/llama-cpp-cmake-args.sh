#!/usr/bin/env bash
# Prints the CMAKE_ARGS for building llama.cpp (llama-cpp-python from source) on this machine:
# every x86 SIMD extension the CPU reports, named one by one, and never AMX. A native build
# (`-march=native`) compiles llama.cpp's AMX kernels wherever the CPU lists AMX, and they die
# with SIGILL ("tilezero") on virtual machines that list AMX without enabling it. Other
# architectures get llama.cpp's own defaults.
set -euo pipefail
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
if [ "$(uname -m)" != "x86_64" ] || [ "$flags" = "  " ]; then
  echo "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  exit 0
fi
args="-DGGML_NATIVE=OFF"
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
  avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  case "$flags" in
    *" ${pair%%:*} "*) args="$args -DGGML_${pair#*:}=ON" ;;
    *) args="$args -DGGML_${pair#*:}=OFF" ;;
  esac
done
echo "$args -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
