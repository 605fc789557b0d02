#!/usr/bin/env python3
"""Compile check for kernels/matmul.cu (no GPU needed).

  python kernels/check_matmul.py              # NVRTC compile, sm_90 and sm_80, ptxas report
  python kernels/check_matmul.py --emulate    # also run the kernel on the CPU (g++, see below)

NVRTC mode compiles every instantiation with --ptxas-options=-v, prints the
lowered names and the register / shared-memory / spill report, and fails on
any spill or stack frame.

--emulate builds matmul.cu as host C++ with a thin CUDA shim (one std::thread per
CUDA thread, a barrier for __syncthreads, blocks run one after another) and
compares against a float64 reference for many shapes, alignments and all four
types, under AddressSanitizer so any out-of-bounds global/shared access aborts.
It checks indexing and synchronisation logic, not GPU performance.
"""

import ctypes
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "matmul.cu")
CU13 = os.path.join(sys.prefix, "lib", "python3.11", "site-packages", "nvidia", "cu13")
if not os.path.isdir(CU13):
    CU13 = os.path.join(HERE, "..", ".venv", "lib", "python3.11", "site-packages", "nvidia", "cu13")
NVRTC = os.path.join(CU13, "lib", "libnvrtc.so.13")
INC = os.path.join(CU13, "include")

NAMES = ["kk_matmul<float>", "kk_matmul<double>", "kk_matmul<__half>", "kk_matmul<__nv_bfloat16>"]


def nvrtc_compile(arch):
    lib = ctypes.CDLL(NVRTC)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    src = open(SRC, "rb").read()

    def ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: {lib.nvrtcGetErrorString(rc).decode()}")

    prog = ctypes.c_void_p()
    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"matmul.cu", 0, None, None), "create")
    for n in NAMES:
        ok(lib.nvrtcAddNameExpression(prog, n.encode()), "name " + n)
    opts = [b"-std=c++17", f"--gpu-architecture={arch}".encode(), b"-I" + INC.encode(), b"--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if rc != 0:
        print(log)
        raise RuntimeError(f"compile failed for {arch}")
    lowered = {}
    for n in NAMES:
        p = ctypes.c_char_p()
        ok(lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(p)), "lowered " + n)
        lowered[n] = p.value.decode()
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return lowered, log


def report(arch):
    lowered, log = nvrtc_compile(arch)
    # ptxas -v log: "Compiling entry function '<mangled>' ..." then the usage lines.
    blocks = re.split(r"(?=ptxas info\s*: Compiling entry function)", log)
    bad = False
    print(f"== {arch} ==")
    for n, low in lowered.items():
        blk = next((b for b in blocks if f"'{low}'" in b), "")
        regs = re.search(r"Used (\d+) registers", blk)
        smem = re.search(r"(\d+) bytes smem", blk)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", blk)
        lmem = re.search(r"(\d+) bytes lmem", blk)
        r = regs.group(1) if regs else "?"
        s = smem.group(1) if smem else "0"
        f = frame.groups() if frame else ("?", "?", "?")
        lm = lmem.group(1) if lmem else "0"
        print(f"  {n:28s} {low:40s} regs={r:>3s} smem={s:>6s}B stack={f[0]} spill_st={f[1]} spill_ld={f[2]} lmem={lm}")
        if not regs or not frame or any(x != "0" for x in f) or lm != "0":
            bad = True
    warn = [line for line in log.splitlines() if "warning" in line.lower()]
    for w in warn:
        print("  WARNING:", w)
    return not bad and not warn


# ----------------------------------------------------------------------------
# Host emulation
# ----------------------------------------------------------------------------
SHIM_FP16 = r"""
#pragma once
#include <cstring>
struct __half { unsigned short x; };
static inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.x, 2); return (float)f; }
static inline __half __float2half_rn(float v) { _Float16 f = (_Float16)v; __half h; std::memcpy(&h.x, &f, 2); return h; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
"""
SHIM_BF16 = r"""
#pragma once
#include <cstring>
struct __nv_bfloat16 { unsigned short x; };
static inline float __bfloat162float(__nv_bfloat16 h) { unsigned u = (unsigned)h.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  unsigned u; std::memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u); __nv_bfloat16 h; h.x = (unsigned short)(u >> 16); return h; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.x = u; return h; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
"""
SHIM_CUDA = r"""
#pragma once
#include <cmath>
#include <cstring>
#include <mutex>
#include <condition_variable>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
// Same alignment as CUDA's vector types so UBSan flags misaligned vector accesses.
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct dim3s { unsigned x, y, z; };
thread_local dim3s threadIdx, blockIdx;
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline int __double2loint(double d) { unsigned long long u; std::memcpy(&u, &d, 8); return (int)(unsigned)u; }
static inline int __double2hiint(double d) { unsigned long long u; std::memcpy(&u, &d, 8); return (int)(unsigned)(u >> 32); }
static inline double __hiloint2double(int hi, int lo) {
  unsigned long long u = ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo; double d; std::memcpy(&d, &u, 8); return d; }
static inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
template <class V> static inline V __ldg(const V* p) { return *p; }
struct Barrier {
  std::mutex m; std::condition_variable cv; int n = 0, count = 0; unsigned long gen = 0;
  void wait() { std::unique_lock<std::mutex> l(m); unsigned long g = gen;
    if (++count == n) { count = 0; ++gen; cv.notify_all(); } else cv.wait(l, [&]{ return gen != g; }); }
};
static Barrier g_bar;
static inline void __syncthreads() { g_bar.wait(); }
"""
HARNESS = r"""
#include "cuda_shim.h"
#include "matmul.cu"
#include <thread>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <random>

template <class T> T from_f(float v);
template <> float from_f<float>(float v) { return v; }
template <> double from_f<double>(float v) { return v; }
template <> __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
static double to_d(float v) { return v; }
static double to_d(double v) { return v; }
static double to_d(__half v) { return __half2float(v); }
static double to_d(__nv_bfloat16 v) { return __bfloat162float(v); }

// Each buffer is its own malloc (ASan catches any overrun); 'off' elements of
// offset make the base misaligned when requested.
template <class T> int run(int M, int N, int K, int offA, int offB, int offC, double tol, unsigned seed) {
  using Tr = kk_mm_traits<T>;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  T* Ab = (T*)malloc(sizeof(T) * ((size_t)M * K + offA)); T* A = Ab + offA;
  T* Bb = (T*)malloc(sizeof(T) * ((size_t)K * N + offB)); T* B = Bb + offB;
  T* Cb = (T*)malloc(sizeof(T) * ((size_t)M * N + offC)); T* C = Cb + offC;
  for (size_t i = 0; i < (size_t)M * K; ++i) A[i] = from_f<T>(dist(rng));
  for (size_t i = 0; i < (size_t)K * N; ++i) B[i] = from_f<T>(dist(rng));
  for (size_t i = 0; i < (size_t)M * N; ++i) C[i] = from_f<T>(12345.f);  // sentinel
  const int gx = (N + Tr::BN - 1) / Tr::BN, gy = (M + Tr::BM - 1) / Tr::BM;
  g_bar.n = 256;
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      std::vector<std::thread> th;
      for (int t = 0; t < 256; ++t)
        th.emplace_back([=] { threadIdx = {(unsigned)t, 0, 0}; blockIdx = {(unsigned)bx, (unsigned)by, 0};
                              kk_matmul<T>(A, B, C, M, N, K); });
      for (auto& x : th) x.join();
    }
  double maxerr = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) { double p = to_d(A[(size_t)i * K + k]) * to_d(B[(size_t)k * N + j]); ref += p; mag += std::fabs(p); }
      double err = std::fabs(to_d(C[(size_t)i * N + j]) - ref) / (mag + 1e-30);
      if (!(err <= tol)) {
        printf("FAIL %s M=%d N=%d K=%d off=(%d,%d,%d) at (%d,%d): got %g want %g\n", __PRETTY_FUNCTION__, M, N, K,
               offA, offB, offC, i, j, to_d(C[(size_t)i * N + j]), ref);
        return 1;
      }
      if (err > maxerr) maxerr = err;
    }
  free(Ab); free(Bb); free(Cb);
  return 0;
}

int main(int argc, char** argv) {
  int shapes[][3] = {{1,1,1},{7,13,5},{129,65,33},{128,128,8},{64,64,64},{130,257,17},
                     {1,300,9},{300,1,40},{65,129,16},{200,136,24},{33,40,100}};
  int offs[][3] = {{0,0,0},{1,1,1},{0,1,0},{1,0,1}};
  int fails = 0, n = 0;
  for (auto& s : shapes)
    for (auto& o : offs) {
      fails += run<float>(s[0], s[1], s[2], o[0], o[1], o[2], 1e-5, 1);
      fails += run<double>(s[0], s[1], s[2], o[0], o[1], o[2], 1e-13, 2);
      fails += run<__half>(s[0], s[1], s[2], o[0], o[1], o[2], 2e-3, 3);
      fails += run<__nv_bfloat16>(s[0], s[1], s[2], o[0], o[1], o[2], 1e-2, 4);
      n += 4;
    }
  // aligned & divisible shapes that exercise the 16-byte paths on all operands
  int big[][3] = {{256,256,64},{136,264,48}};
  for (auto& s : big) {
    fails += run<float>(s[0], s[1], s[2], 0,0,0, 1e-5, 5);
    fails += run<double>(s[0], s[1], s[2], 0,0,0, 1e-13, 6);
    fails += run<__half>(s[0], s[1], s[2], 0,0,0, 2e-3, 7);
    fails += run<__nv_bfloat16>(s[0], s[1], s[2], 0,0,0, 1e-2, 8);
    n += 4;
  }
  printf("%d/%d cases passed\n", n - fails, n);
  return fails != 0;
}
"""


def emulate():
    with tempfile.TemporaryDirectory() as d:
        for name, txt in [
            ("cuda_fp16.h", SHIM_FP16),
            ("cuda_bf16.h", SHIM_BF16),
            ("cuda_shim.h", SHIM_CUDA),
            ("harness.cpp", HARNESS),
        ]:
            open(os.path.join(d, name), "w").write(txt)
        exe = os.path.join(d, "emu")
        cmd = [
            "g++",
            "-std=c++17",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-Wno-unknown-pragmas",
            "-x",
            "c++",
            "-include",
            os.path.join(d, "cuda_shim.h"),
            "-I",
            d,
            "-I",
            HERE,
            os.path.join(d, "harness.cpp"),
            "-o",
            exe,
            "-pthread",
        ]
        subprocess.run(cmd, check=True)
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        return subprocess.run([exe], env=env).returncode == 0


def main():
    good = True
    for arch in ("sm_90", "sm_80"):
        good &= report(arch)
    if "--emulate" in sys.argv:
        good &= emulate()
    print("OK" if good else "FAILED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
