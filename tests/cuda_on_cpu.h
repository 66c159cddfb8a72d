// A CPU stand-in for what braze's generated CUDA uses (tests/cuda_on_cpu.py and
// tests/loop_cuda_on_cpu.py compile kernels against it with g++): a block's threads are OS threads,
// with a barrier for __syncthreads and one per warp for its shuffles; a fusion's blocks run one after
// another (bz_launch), so a function's `static` arrays are its block's `__shared__` ones, while a loop
// kernel's, which share nothing but global memory, all run at once (bz_launch_all). Atomics are
// atomic across the OS threads. Half types are their bits, converted by the prelude's own functions.
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>
using std::signbit; using std::fmod; using std::floor; using std::copysign; using std::erf; using std::erfc; using std::tanh;
using std::exp; using std::log; using std::sqrt; using std::pow; using std::fabs; using std::isnan; using std::isinf;
using std::isfinite; using std::exp2; using std::expm1; using std::log2; using std::log1p; using std::sin; using std::cos;
using std::tan; using std::ceil; using std::rint; using std::trunc; using std::atan2; using std::fmax;
using std::fmin;

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __shared__ static
#define __CUDA_FP16_H__ 1

struct uint3 { unsigned x, y, z; };
thread_local uint3 threadIdx, blockIdx;
uint3 blockDim, gridDim;
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct __nv_bfloat16 { unsigned short bits; };
struct __half { unsigned short bits; };
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return {b}; }
inline unsigned short __half_as_ushort(__half v) { return v.bits; }
inline __half __ushort_as_half(unsigned short b) { return {b}; }
inline float __half2float(__half h) {
  unsigned sign = (h.bits & 0x8000u) << 16, exponent = (h.bits >> 10) & 0x1f, mantissa = h.bits & 0x3ff, bits;
  if (exponent == 0) {
    float f = std::ldexp((float)mantissa, -24);
    return sign ? -f : f;
  }
  if (exponent == 31) bits = sign | 0x7f800000u | (mantissa << 13);
  else bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  float f; std::memcpy(&f, &bits, 4); return f;
}
inline __half __float2half_rn(float x) {  // round to nearest even, as the GPU's conversion
  _Float16 h = (_Float16)x; unsigned short bits; std::memcpy(&bits, &h, 2); return {bits};
}
template <typename A, typename B> inline A bz_bits(B b) { static_assert(sizeof(A) == sizeof(B)); A a; std::memcpy(&a, &b, sizeof(A)); return a; }
inline float __int_as_float(int x) { return bz_bits<float>(x); }
inline int __float_as_int(float x) { return bz_bits<int>(x); }
inline float __uint_as_float(unsigned x) { return bz_bits<float>(x); }
inline unsigned __float_as_uint(float x) { return bz_bits<unsigned>(x); }
inline double __longlong_as_double(long long x) { return bz_bits<double>(x); }
inline long long __double_as_longlong(double x) { return bz_bits<long long>(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __clz(unsigned x) { return x == 0u ? 32 : __builtin_clz(x); }
// (hi:lo) >> shift, the shift clamped to 32 (CUDA's clamping funnel shift).
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
  const unsigned long long both = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(both >> (shift < 32u ? shift : 32u));
}
inline double __drcp_rn(double x) { return 1.0 / x; }  // IEEE division: the reciprocal rounded to nearest
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// The vector accesses of a kernel (tests/cuda_on_cpu.py casts through this): the GPU faults on one
// misaligned to its vector type where the CPU reads it all the same, so each is counted, and the
// launch that made any fails.
extern "C" { unsigned long long bz_misaligned_vectors = 0; }
template <typename T, typename P> inline T bz_vector_cast(P p) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::remove_pointer_t<T>) != 0)
    __atomic_fetch_add(&bz_misaligned_vectors, 1ULL, __ATOMIC_RELAXED);
  return reinterpret_cast<T>(p);
}

std::barrier<>* bz_block_barrier;
std::vector<std::unique_ptr<std::barrier<>>> bz_warp_barriers;
unsigned long long bz_warp_slots[64][32];
alignas(16) unsigned char bz_dynamic_shared[1 << 20];

inline void __syncthreads() { bz_block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { bz_warp_barriers[threadIdx.x >> 5]->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// Every lane of the warp offers `v` and takes the value lane `source` offered.
template <typename T> T bz_warp_exchange(T v, unsigned source) {
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  std::memcpy(&bz_warp_slots[warp][lane], &v, sizeof(T));
  bz_warp_barriers[warp]->arrive_and_wait();
  T r; std::memcpy(&r, &bz_warp_slots[warp][source], sizeof(T));
  bz_warp_barriers[warp]->arrive_and_wait();
  return r;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
  return bz_warp_exchange(v, (threadIdx.x & 31) ^ mask);
}
template <typename T> T __shfl_up_sync(unsigned, T v, int delta, int width = 32) {
  const unsigned lane = threadIdx.x & 31;
  return bz_warp_exchange(v, (int)(lane % width) >= delta ? lane - delta : lane);
}
template <typename T> T __shfl_sync(unsigned, T v, int source, int width = 32) {
  return bz_warp_exchange(v, (threadIdx.x & 31) / width * width + source % width);
}
template <typename T> T atomicCAS(T* p, T compare, T value) {
  std::atomic_ref<T> a(*p);
  a.compare_exchange_strong(compare, value);
  return compare;
}
template <typename T> T atomicAdd(T* p, T v) {
  std::atomic_ref<T> a(*p);
  if constexpr (std::is_floating_point_v<T>) {
    T old = a.load();
    while (!a.compare_exchange_weak(old, old + v)) {}
    return old;
  } else return a.fetch_add(v);
}
// CUDA's integer atomicMax and atomicMin (int, unsigned, long long, unsigned long long).
template <typename T> T bz_atomic_update(T* p, T v, bool (*replaces)(T, T)) {
  static_assert(std::is_integral_v<T> && sizeof(T) >= 4);
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (replaces(v, old) && !a.compare_exchange_weak(old, v)) {}
  return old;
}
template <typename T> T atomicMax(T* p, T v) { return bz_atomic_update<T>(p, v, [](T x, T y) { return x > y; }); }
template <typename T> T atomicMin(T* p, T v) { return bz_atomic_update<T>(p, v, [](T x, T y) { return x < y; }); }

// Runs `body` as `grid` blocks of `block` threads, the dynamic shared memory filled with 0xFF (NaN)
// before each block.
inline void bz_launch(long long grid, long long block, long long shared, const std::function<void()>& body) {
  blockDim = {(unsigned)block, 1, 1};
  gridDim = {(unsigned)grid, 1, 1};
  std::barrier<> sync((std::ptrdiff_t)block);
  bz_block_barrier = &sync;
  bz_warp_barriers.clear();
  for (long long w = 0; w < (block + 31) / 32; ++w)
    bz_warp_barriers.push_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)std::min(32LL, block - 32 * w)));
  std::vector<std::thread> threads;
  for (long long t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {(unsigned)t, 0, 0};
      for (long long b = 0; b < grid; ++b) {
        blockIdx = {(unsigned)b, 0, 0};
        if (t == 0) std::memset(bz_dynamic_shared, 0xff, (size_t)shared);
        sync.arrive_and_wait();
        body();
        sync.arrive_and_wait();
      }
    });
  for (auto& t : threads) t.join();
}

// Runs `body` as the first `started` threads of `grid` blocks of `block` threads, all at once (a
// loop kernel's task has no barrier and no shared memory): they start together, so threads that race
// for an element on a GPU race here too.
inline void bz_launch_all(long long grid, long long block, long long started, const std::function<void()>& body) {
  blockDim = {(unsigned)block, 1, 1};
  gridDim = {(unsigned)grid, 1, 1};
  std::barrier<> start((std::ptrdiff_t)started);
  std::vector<std::thread> threads;
  for (long long n = 0; n < started; ++n)
    threads.emplace_back([&, n] {
      blockIdx = {(unsigned)(n / block), 0, 0};
      threadIdx = {(unsigned)(n % block), 0, 0};
      start.arrive_and_wait();
      body();
    });
  for (auto& t : threads) t.join();
}
