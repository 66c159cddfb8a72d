// braze's CUDA prelude: the op table's semantics, shared by every generated kernel.
//
// The rules match the NumPy reference and the LLVM backend: NaN-propagating maximum/minimum,
// Python-style floor division, integer division by zero giving 0, wrap-around integer
// arithmetic, shifts defined for every amount, saturating float-to-int casts.
#define BZ_D __device__ __forceinline__

// The packed argument block: per array its data pointer, extents and strides; per scalar one slot.
template <int N> struct BzArgs { long long s[N]; };

template <typename T> struct bz_unsigned_of { typedef T type; };
template <> struct bz_unsigned_of<signed char> { typedef unsigned char type; };
template <> struct bz_unsigned_of<short> { typedef unsigned short type; };
template <> struct bz_unsigned_of<int> { typedef unsigned int type; };
template <> struct bz_unsigned_of<long long> { typedef unsigned long long type; };
// Unsigned integers (unsigned char to unsigned long long) are their own unsigned type; they already
// wrap, divide, compare and shift right as unsigned values in C++.
template <typename T> constexpr bool bz_is_signed() { return T(-1) < T(0); }

template <typename T> constexpr bool bz_is_float() { return sizeof(T) >= 4 && T(0.5) != T(0); }

template <typename T> BZ_D bool bz_truth(T x) { return x != T(0); }  // NaN counts as true, as in NumPy
BZ_D bool bz_truth(bool x) { return x; }

// --- arithmetic: signed overflow is undefined in C++, so integers go through unsigned ----------
template <typename T> BZ_D T bz_add(T a, T b) {
  if constexpr (bz_is_float<T>()) return a + b;
  else { typedef typename bz_unsigned_of<T>::type U; return (T)(U)((U)a + (U)b); }
}
BZ_D bool bz_add(bool a, bool b) { return a || b; }
template <typename T> BZ_D T bz_sub(T a, T b) {
  if constexpr (bz_is_float<T>()) return a - b;
  else { typedef typename bz_unsigned_of<T>::type U; return (T)(U)((U)a - (U)b); }
}
template <typename T> BZ_D T bz_mul(T a, T b) {
  if constexpr (bz_is_float<T>()) return a * b;
  else { typedef typename bz_unsigned_of<T>::type U; return (T)(U)((U)a * (U)b); }
}
BZ_D bool bz_mul(bool a, bool b) { return a && b; }
// Floats flip the sign (0 - x would make -0.0 of 0.0 into +0.0); integers wrap.
template <typename T> BZ_D T bz_neg(T a) { if constexpr (bz_is_float<T>()) return -a; else return bz_sub(T(0), a); }
template <typename T> BZ_D T bz_truediv(T a, T b) { return a / b; }

// Iterations of `for (i = first; i < end; i += stride)`, counted before the loop: a loop counted so
// unrolls with no exit test between its copies, so the copies' loads issue together (an exit test
// between them made each wait for the one before). Strides are lanes or threads of a block: a power
// of two takes a shift.
template <typename T, typename E> BZ_D T bz_trips(T first, E end_of_range, unsigned stride) {
  const T end = T(end_of_range);
  if (!(first < end)) return T(0);
  const T span = end - T(1) - first;
  return ((stride & (stride - 1u)) == 0u ? T(span >> (31 - __clz(stride))) : T(span / T(stride))) + T(1);
}

template <typename T> BZ_D T bz_maximum(T a, T b) {
  if constexpr (bz_is_float<T>()) {
    if (a != a || b != b) return a + b;  // NaN wins
    if (a == b) return signbit(a) ? b : a;  // -0.0 < +0.0
    return a > b ? a : b;
  } else return a > b ? a : b;
}
BZ_D bool bz_maximum(bool a, bool b) { return a || b; }
template <typename T> BZ_D T bz_minimum(T a, T b) {
  if constexpr (bz_is_float<T>()) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
  } else return a < b ? a : b;
}
BZ_D bool bz_minimum(bool a, bool b) { return a && b; }
#if __CUDA_ARCH__ >= 800
// float32 without branches: max.NaN/min.NaN propagate NaN (a canonical one); equal operands (+0.0
// and -0.0 among them) give the AND (maximum) or OR (minimum) of their bits, which orders -0.0 below
// +0.0 whatever the instruction does with zeros. Four instructions where the template takes a dozen.
template <> BZ_D float bz_maximum(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return a == b ? __int_as_float(__float_as_int(a) & __float_as_int(b)) : r;
}
template <> BZ_D float bz_minimum(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return a == b ? __int_as_float(__float_as_int(a) | __float_as_int(b)) : r;
}
#endif

// Python's floor division and remainder; x // 0 and x % 0 give 0, MIN // -1 wraps. Unsigned
// operands: C++'s division, which is the floor one, and a divisor of all ones is no -1.
template <typename T> BZ_D T bz_int_floordiv(T x, T y) {
  if (y == T(0)) return T(0);
  if constexpr (!bz_is_signed<T>()) return T(x / y);
  if (y == T(-1)) return bz_neg(x);
  T q = x / y, r = x % y;
  return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? T(q - T(1)) : q;
}
template <typename T> BZ_D T bz_int_remainder(T x, T y) {
  if (y == T(0)) return T(0);
  if constexpr (!bz_is_signed<T>()) return T(x % y);
  if (y == T(-1)) return T(0);
  T r = x % y;
  return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? T(r + y) : r;
}
// x // y and x % y of index arithmetic known x >= 0 and y >= 0 (codegen/cuda_rules.py,
// index_division): unsigned division, a fraction of the instructions; y == 0 gives 0 as above.
template <typename T> BZ_D T bz_index_floordiv(T x, T y) {
  typedef typename bz_unsigned_of<T>::type U;
  return y == T(0) ? T(0) : T(U(x) / U(y));
}
template <typename T> BZ_D T bz_index_remainder(T x, T y) {
  typedef typename bz_unsigned_of<T>::type U;
  return y == T(0) ? T(0) : T(U(x) % U(y));
}
// The same divisions by a divisor fixed for the whole kernel (an extent; codegen/cuda_invariants.py),
// as a multiply-high, an add and a shift (Granlund and Montgomery, "Division by invariant integers
// using multiplication", 1994): the hardware has no integer divider, and the division above takes
// ~17 instructions, its reciprocal recomputed at every row. For 0 <= n, d < 2^32, with
// l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1 (so m + 2^32 = floor(2^(32+l) / d) + 1,
// their theorem 4.2's multiplier for 32-bit dividends): n / d = (umulhi(n, m) + n) >> l, the sum
// taken in 33 bits. d = 0 takes m = 0 and l = 32: the quotient is 0 and the remainder is 0, as above.
// tests/codegen/test_fast_divisors.py checks these lines (with g++) and a Python model of them.
struct BzDivisor { unsigned magic, shift, divisor; };
BZ_D BzDivisor bz_divisor(unsigned d) {
  const unsigned shift = 32 - __clz(d - 1u);  // ceil(log2 d): 0 for 1, 32 above 2^31 and for 0
  const unsigned excess = (unsigned)((1ull << shift) - d);  // 2^l - d < d (0 for 0)
  // floor(excess * 2^32 / d) < 2^32 - 1: a double quotient (two roundings, within 2^-20 of the exact
  // one) is at most one from it, and the exact remainder says which way. Once a thread, ~30 instructions
  // where a 64-bit integer division takes ~60.
  unsigned long long q = (unsigned long long)((double)excess * 4294967296.0 * __drcp_rn((double)d));
  const long long r = (long long)(((unsigned long long)excess << 32) - q * d);
  q = r < 0 ? q - 1ull : r >= (long long)d ? q + 1ull : q;
  return BzDivisor{d == 0u ? 0u : (unsigned)q + 1u, shift, d};
}
BZ_D unsigned bz_divide(unsigned n, BzDivisor d) {
  const unsigned long long sum = (unsigned long long)__umulhi(n, d.magic) + n;
  return __funnelshift_rc((unsigned)sum, (unsigned)(sum >> 32), d.shift);  // (sum >> shift), shift <= 32
}
BZ_D int bz_fast_floordiv(int x, BzDivisor d) { return (int)bz_divide((unsigned)x, d); }
BZ_D int bz_fast_remainder(int x, BzDivisor d) {
  return d.divisor == 0u ? 0 : (int)((unsigned)x - bz_divide((unsigned)x, d) * d.divisor);
}
// NumPy's npy_divmod for floats; a zero remainder takes the divisor's sign.
template <typename T> BZ_D T bz_float_remainder(T x, T y) {
  T mod = fmod(x, y);
  if (mod == T(0)) return copysign(T(0), y);
  return ((y < T(0)) != (mod < T(0))) ? mod + y : mod;
}
template <typename T> BZ_D T bz_float_floordiv(T x, T y) {
  T mod = fmod(x, y);
  T div = (x - mod) / y;
  if (mod != T(0) && ((y < T(0)) != (mod < T(0)))) div = div - T(1);
  T floored = floor(div);
  if (div - floored > T(0.5)) floored = floored + T(1);
  if (y == T(0)) return x / y;
  if (div == T(0)) return copysign(T(0), x / y);
  return floored;
}
template <typename T> BZ_D T bz_floordiv(T x, T y) {
  if constexpr (bz_is_float<T>()) return bz_float_floordiv(x, y); else return bz_int_floordiv(x, y);
}
template <typename T> BZ_D T bz_remainder(T x, T y) {
  if constexpr (bz_is_float<T>()) return bz_float_remainder(x, y); else return bz_int_remainder(x, y);
}

// Integer power by squaring (wrap-around); a negative exponent gives 1, -1 or 0 as the reference.
template <typename T> BZ_D T bz_int_pow(T base, T e) {
  if (bz_is_signed<T>() && e < T(0)) return base == T(1) ? T(1) : base == T(-1) ? ((e & T(1)) ? T(-1) : T(1)) : T(0);
  typedef typename bz_unsigned_of<T>::type U;
  T result = T(1);
  for (U bits = (U)e;; bits >>= 1) {
    if (bits & U(1)) result = bz_mul(result, base);
    if ((bits >> 1) == U(0)) break;
    base = bz_mul(base, base);
  }
  return result;
}
template <typename T> BZ_D T bz_pow(T a, T b) {
  if constexpr (bz_is_float<T>()) return pow(a, b); else return bz_int_pow(a, b);
}

template <typename T> BZ_D T bz_left_shift(T x, T s) {
  typedef typename bz_unsigned_of<T>::type U;
  return (s >= T(0) && s < T(8 * sizeof(T))) ? (T)(U)((U)x << (int)s) : T(0);
}
// Arithmetic for signed x, logical for unsigned (C++'s >> on each); past the width, the sign fills.
template <typename T> BZ_D T bz_right_shift(T x, T s) {
  return (s >= T(0) && s < T(8 * sizeof(T))) ? (T)(x >> (int)s) : (x < T(0) ? T(-1) : T(0));
}

template <typename T> BZ_D T bz_abs(T x) {
  if constexpr (bz_is_float<T>()) return fabs(x);
  else if constexpr (!bz_is_signed<T>()) return x;
  else return x < T(0) ? bz_neg(x) : x;
}
template <typename T> BZ_D T bz_sign(T x) {
  if (x != x) return x;
  return T((x > T(0)) - (x < T(0)));
}
template <typename T> BZ_D T bz_relu(T x) { return (x > T(0) || x != x) ? x : T(0); }
template <typename T> BZ_D T bz_sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
// 1 + erf(x / sqrt 2) as erfc(-x / sqrt 2): no cancellation in the tail x < 0, where gelu is tiny
template <typename T> BZ_D T bz_gelu_erf(T x) { return T(0.5) * x * erfc(x * T(-0.70710678118654752440)); }
template <typename T> BZ_D T bz_gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + tanh(T(0.79788456080286535588) * (x + T(0.044715) * (x * x * x))));
}
// For float32 results only a 2-byte float keeps (cuda_rules.py, "narrow"): the approximate exp2 and
// reciprocal instructions, flushing results below 2^-126 to zero (as bfloat16 and float16 barely
// notice). Elsewhere (tests/cuda_on_cpu.h) the same from the C library, flushed alike.
BZ_D float bz_exp_narrow(float x) {
  float r;
#ifdef __CUDA_ARCH__
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.44269504088896341f));
#else
  r = exp2f(x * 1.44269504088896341f);
  r = fabsf(r) < 0x1p-126f ? 0.0f : r;
#endif
  return r;
}
BZ_D float bz_rcp_narrow(float x) {
  float r;
#ifdef __CUDA_ARCH__
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
#else
  r = 1.0f / x;
  r = fabsf(r) < 0x1p-126f ? 0.0f * r : r;
#endif
  return r;
}
BZ_D float bz_sigmoid_narrow(float x) { return bz_rcp_narrow(1.0f + bz_exp_narrow(-x)); }
BZ_D float bz_gelu_tanh_narrow(float x) {  // 0.5 * (1 + tanh(u)) = 1 / (1 + e^(-2u))
  return x * bz_rcp_narrow(1.0f + bz_exp_narrow(-1.5957691216057307118f * (x + 0.044715f * (x * x * x))));
}
template <typename T> BZ_D T bz_lerp(T start, T end, T weight) { return start + weight * (end - start); }
template <typename T> BZ_D T bz_clamp(T x, T lo, T hi) { return bz_minimum(bz_maximum(x, lo), hi); }

// --- casts ------------------------------------------------------------------------------------
// Float to integer saturates, and NaN gives 0 (as LLVM's fptosi.sat and fptoui.sat): a negative
// float gives 0 of an unsigned type. hi as F may round up past T's maximum (2^63 as a double): x at
// or past it saturates before the conversion, which would be undefined there.
template <typename T, typename F> BZ_D T bz_float_to_int(F x) {
  if (x != x) return T(0);
  typedef typename bz_unsigned_of<T>::type U;
  constexpr bool is_signed = bz_is_signed<T>();
  constexpr T hi = T(is_signed ? U(~U(0)) >> 1 : U(~U(0)));
  constexpr T lo = T(is_signed ? T(-hi - T(1)) : T(0));
  if (x <= F(lo)) return lo;
  if (x >= F(hi)) return hi;
  return T(x);
}

// float32 -> bfloat16 bits, rounding to nearest even; a NaN stays a quiet NaN with its payload's top
// bits (as NumPy's ml_dtypes and the LLVM backend give it, where CUDA's conversion gives 0x7fff).
// From sm_80 on, one conversion instruction rounds (a select keeps the NaN's bits): the integer
// rounding takes six, and bfloat16 fusions that round twice an element were bound by them.
BZ_D unsigned short bz_float_to_bf16_bits(float x) {
  unsigned bits = __float_as_uint(x);
  const unsigned short nan = (unsigned short)((bits >> 16) | 0x40);
#if defined(__CUDA_BF16_H__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned short rounded = __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  const unsigned short rounded = (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
#endif
  return x != x ? nan : rounded;
}
// The same for a float32 an add, subtract or multiply computed: its NaN is the canonical 0x7fffffff
// (NVIDIA GPUs keep no payload through arithmetic), 0x7fff either way, so from sm_80 on the conversion
// alone: one instruction where the NaN test took four more (cuda_rules, "cast").
BZ_D unsigned short bz_arith_float_to_bf16_bits(float x) {
#if defined(__CUDA_BF16_H__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  return bz_float_to_bf16_bits(x);
#endif
}

// A row task whose rows do not fit in shared memory reads them again from memory in a later loop.
// Rows of thousands of blocks in flight (a 32000-long vocabulary: 128 KB a row) pass more bytes
// through L2 than it holds before the second read, which then goes to DRAM again. So the first read
// asks L2 to keep its lines (evict_last), and the last read and the stores of such a task mark
// theirs evict-first, leaving L2 to the rows still to be read again (cuda_rows, `bz_load_keep`).
template <typename V> BZ_D V bz_load_keep(const V* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  V v;
  if constexpr (sizeof(V) == 16) {
    uint4 w;
    asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "l"(p), "l"(policy));
    *reinterpret_cast<uint4*>(&v) = w;
  } else if constexpr (sizeof(V) == 8) {
    uint2 w;
    asm("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(w.x), "=r"(w.y) : "l"(p), "l"(policy));
    *reinterpret_cast<uint2*>(&v) = w;
  } else if constexpr (sizeof(V) == 4) {
    unsigned w;
    asm("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(w) : "l"(p), "l"(policy));
    *reinterpret_cast<unsigned*>(&v) = w;
  } else {
    v = *p;
  }
  return v;
#else
  return *p;
#endif
}
template <typename V> BZ_D V bz_load_last(const V* p) {
#if defined(__CUDA_ARCH__)
  V v;
  if constexpr (sizeof(V) == 16) *reinterpret_cast<uint4*>(&v) = __ldcs(reinterpret_cast<const uint4*>(p));
  else if constexpr (sizeof(V) == 8) *reinterpret_cast<uint2*>(&v) = __ldcs(reinterpret_cast<const uint2*>(p));
  else if constexpr (sizeof(V) == 4) *reinterpret_cast<unsigned*>(&v) = __ldcs(reinterpret_cast<const unsigned*>(p));
  else v = *p;
  return v;
#else
  return *p;
#endif
}
template <typename V> BZ_D void bz_store_last(V* p, const V v) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(V) == 16) __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
  else if constexpr (sizeof(V) == 8) __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&v));
  else if constexpr (sizeof(V) == 4) __stcs(reinterpret_cast<unsigned*>(p), *reinterpret_cast<const unsigned*>(&v));
  else *p = v;
#else
  *p = v;
#endif
}

// Four neighbouring elements moved as one access (float4 and int4 are CUDA's own); eight of a type
// of 2 bytes or less, 16 bytes of half types (cuda_plan.VECTOR_TYPES).
struct __align__(16) bz_double4 { double x, y, z, w; };
#if defined(__CUDA_FP16_H__)
struct __align__(8) bz_half4 { __half x, y, z, w; };
struct __align__(8) bz_bfloat164 { __nv_bfloat16 x, y, z, w; };
struct __align__(16) bz_half8 { __half v[8]; };
struct __align__(16) bz_bfloat168 { __nv_bfloat16 v[8]; };
#endif
struct __align__(4) bz_bool4 { bool x, y, z, w; };
struct __align__(8) bz_bool8 { bool v[8]; };
// A vector held in registers, as if an instruction had changed it (no instruction is emitted): values
// computed from it before are not reused after (cuda_rows.launder_register_row).
template <int Loop, typename V> BZ_D void bz_launder(V& v) {
  static_assert(sizeof(V) % 4 == 0, "a vector of whole 32-bit registers");
  unsigned* words = reinterpret_cast<unsigned*>(&v);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(V) / 4); ++i) asm("" : "+r"(words[i]) : "n"(Loop));
}

// Half types to float32 exactly, NaN payloads included (CUDA's conversions give a canonical NaN).
// Only kernels that use half types include cuda_fp16.h.
BZ_D float bz_bf16_bits_to_float(unsigned short bits) { return __uint_as_float((unsigned)bits << 16); }
#if defined(__CUDA_FP16_H__)
BZ_D float bz_half_bits_to_float(unsigned short bits) {
  if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu))
    return __uint_as_float(((bits & 0x8000u) << 16) | 0x7f800000u | ((bits & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(bits));
}
// And back, as NumPy rounds: a NaN keeps its sign and the top of its payload (at least one bit, so
// it stays a NaN), where CUDA's conversion gives the canonical one: a float16 NaN a kernel only
// moves (tril, roll, a select) keeps its bits.
BZ_D __half bz_float_to_half(float x) {
  if (x != x) {
    const unsigned bits = __float_as_uint(x), payload = (bits >> 13) & 0x3ffu;
    return __ushort_as_half((unsigned short)(((bits >> 16) & 0x8000u) | 0x7c00u | (payload ? payload : 1u)));
  }
  return __float2half_rn(x);
}
#endif

// --- Philox4x32-10: the four 32-bit words of counter (group, offset) under key seed ----------
BZ_D uint4 bz_philox_block(long long seed, long long offset, long long group) {
  unsigned c0 = (unsigned)group, c1 = (unsigned)((unsigned long long)group >> 32);
  unsigned c2 = (unsigned)offset, c3 = (unsigned)((unsigned long long)offset >> 32);
  unsigned k0 = (unsigned)seed, k1 = (unsigned)((unsigned long long)seed >> 32);
  for (int round = 0; round < 10; ++round) {
    unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}

// One word of a block.
BZ_D long long bz_philox(long long seed, long long offset, long long group, long long word) {
  const uint4 c = bz_philox_block(seed, offset, group);
  return (long long)(word == 0 ? c.x : word == 1 ? c.y : word == 2 ? c.z : c.w);
}

// Words first .. first + 3 of the stream, word q being bz_philox(seed, offset, q / 4, q % 4) (floor
// division): what the four elements of a 16-byte loop draw for rand. One block when `first` is a
// multiple of 4 (rows whose length 4 divides), else the two blocks the four words straddle.
BZ_D uint4 bz_philox_run(long long seed, long long offset, long long first) {
  const long long group = bz_floordiv(first, 4LL);
  const long long skip = first - 4 * group;
  const uint4 a = bz_philox_block(seed, offset, group);
  if (skip == 0) return a;
  const uint4 b = bz_philox_block(seed, offset, group + 1);
  return skip == 1 ? make_uint4(a.y, a.z, a.w, b.x) : skip == 2 ? make_uint4(a.z, a.w, b.x, b.y)
                   : make_uint4(a.w, b.x, b.y, b.z);
}

// --- combining partial reductions across the lanes of a row -----------------------------------
template <typename T> BZ_D T bz_shfl_xor(T v, int offset) { return __shfl_xor_sync(0xffffffffu, v, offset); }
BZ_D bool bz_shfl_xor(bool v, int offset) { return __shfl_xor_sync(0xffffffffu, (int)v, offset) != 0; }
BZ_D signed char bz_shfl_xor(signed char v, int offset) {
  return (signed char)__shfl_xor_sync(0xffffffffu, (int)v, offset);
}

struct BzReduceAdd { template <typename T> BZ_D T operator()(T a, T b) const { return bz_add(a, b); } };
struct BzReduceMul { template <typename T> BZ_D T operator()(T a, T b) const { return bz_mul(a, b); } };
struct BzReduceMax { template <typename T> BZ_D T operator()(T a, T b) const { return bz_maximum(a, b); } };
struct BzReduceMin { template <typename T> BZ_D T operator()(T a, T b) const { return bz_minimum(a, b); } };
struct BzReduceOr { template <typename T> BZ_D T operator()(T a, T b) const { return a || b; } };
struct BzReduceAnd { template <typename T> BZ_D T operator()(T a, T b) const { return a && b; } };

// `width` neighbouring lanes of a warp (a power of two, 32 at most) share a row: a butterfly of
// shuffles, no barrier. Every lane gets the result.
template <typename T, typename Op> BZ_D T bz_shuffle_reduce(T v, int width, Op op) {
  for (int offset = width / 2; offset > 0; offset >>= 1) v = op(v, bz_shfl_xor(v, offset));
  return v;
}
// One warp a row (the tasks' `_warp` functions): shuffles only, so rows of one block need not agree.
template <typename T, typename Op> BZ_D T bz_warp_reduce(T v, Op op) { return bz_shuffle_reduce(v, 32, op); }

// The first warp of this thread's row of `lanes` threads: a block of 256 threads holds one row of
// 256 lanes, or two of 128, four of 64, each its own warps. A row of the whole block starts at warp 0
// whatever the block's size (a loop kernel's block need not be a power of two).
BZ_D int bz_row_warp(int lanes) {
  return lanes >= (int)blockDim.x ? 0 : (int)(threadIdx.x & ~(unsigned)(lanes - 1)) >> 5;
}

// `lanes` threads (a power of two) share a row: up to a warp, a butterfly of shuffles; otherwise
// the row's warps combine through shared memory in a fixed order, so the result is the same from
// run to run. Every lane gets the result. The block's threads all call it (its barriers).
template <typename T, typename Op> BZ_D T bz_lane_reduce(T v, int lanes, Op op) {
  v = bz_shuffle_reduce(v, lanes < 32 ? lanes : 32, op);
  if (lanes <= 32) return v;
  __shared__ T partial[32];
  __syncthreads();  // an earlier reduction's readers are done with `partial`
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  const int first = bz_row_warp(lanes);
  T total = partial[first];
  for (int w = 1; w < (lanes >> 5); ++w) total = op(total, partial[first + w]);
  return total;
}

// Several accumulators of a row combined over its lanes with two barriers in all, where a
// bz_lane_reduce each would take two apiece (var_mean, the norms' statistics and backwards):
// bz_lane_put folds each warp's lanes and, where the row is over a warp, leaves the warp's
// value in slot i; after one barrier bz_lane_take combines the row's warps' slots i in order, as
// bz_lane_reduce does (the same bits). The caller brackets the puts with the two barriers.
template <int N> BZ_D unsigned long long* bz_lane_slots() {
  __shared__ unsigned long long slots[32 * N];
  return slots;
}
template <typename T, typename Op> BZ_D void bz_lane_put(T& v, int lanes, Op op, unsigned long long* slots, int i) {
  static_assert(sizeof(T) <= 8, "a lane slot holds 8 bytes");
  v = bz_shuffle_reduce(v, lanes < 32 ? lanes : 32, op);
  if (lanes > 32 && (threadIdx.x & 31) == 0) reinterpret_cast<T*>(slots + 32 * i)[threadIdx.x >> 5] = v;
}
template <typename T, typename Op> BZ_D void bz_lane_take(T& v, int lanes, Op op, const unsigned long long* slots,
                                                       int i) {
  const T* partial = reinterpret_cast<const T*>(slots + 32 * i) + bz_row_warp(lanes);
  T total = partial[0];
  for (int w = 1; w < (lanes >> 5); ++w) total = op(total, partial[w]);
  v = total;
}

// A scan over the lanes of a row, a tile at a time (`carry`: the tiles before, the same in every lane
// of the row). Up to a warp, shuffles up within the row's lanes; a block a row, each warp's scan,
// then the warps' totals through shared memory in warp order.
template <typename T> BZ_D T bz_shfl_up(T v, int delta, int width) { return __shfl_up_sync(0xffffffffu, v, delta, width); }
BZ_D bool bz_shfl_up(bool v, int delta, int width) { return __shfl_up_sync(0xffffffffu, (int)v, delta, width) != 0; }
BZ_D signed char bz_shfl_up(signed char v, int delta, int width) {
  return (signed char)__shfl_up_sync(0xffffffffu, (int)v, delta, width);
}
template <typename T> BZ_D T bz_shfl_idx(T v, int lane, int width) { return __shfl_sync(0xffffffffu, v, lane, width); }
BZ_D bool bz_shfl_idx(bool v, int lane, int width) { return __shfl_sync(0xffffffffu, (int)v, lane, width) != 0; }
BZ_D signed char bz_shfl_idx(signed char v, int lane, int width) {
  return (signed char)__shfl_sync(0xffffffffu, (int)v, lane, width);
}
// Each lane holds the combine `v` of its own run of consecutive elements of the tile: lane i gets
// `carry` combined with lanes 0..i-1 (what comes before its run), and `carry` becomes the whole tile's.
// `lanes` is a power of two; past a warp a row's lanes are whole warps, and a block may hold several
// rows (balanced lanes of a long row: cuda_launch.balanced_lanes), so a row combines its own warps only.
template <typename T, typename Op> BZ_D T bz_lane_scan(T v, T& carry, int lanes, Op op) {
  const int width = lanes < 32 ? lanes : 32, lane = threadIdx.x & (width - 1);
  for (int offset = 1; offset < width; offset <<= 1) {
    const T before = bz_shfl_up(v, offset, width);
    if (lane >= offset) v = op(before, v);
  }
  const T prior = bz_shfl_up(v, 1, width);  // lanes 0..i-1 of this warp's (or row's) lanes
  if (lanes <= 32) {
    const T before = lane == 0 ? carry : op(carry, prior);
    carry = op(carry, bz_shfl_idx(v, width - 1, width));
    return before;
  }
  __shared__ T warp_totals[32];
  __syncthreads();  // the tile before's readers are done with the totals
  if (lane == 31) warp_totals[threadIdx.x >> 5] = v;
  __syncthreads();
  const int first = (threadIdx.x & ~(unsigned)(lanes - 1)) >> 5, last = first + (lanes >> 5);
  T before = carry;
  for (int w = first; w < (int)(threadIdx.x >> 5); ++w) before = op(before, warp_totals[w]);
  for (int w = first; w < last; ++w) carry = op(carry, warp_totals[w]);
  return lane == 0 ? before : op(before, prior);
}

// One pass for a row's maximum m and its sum s of exp(x - m) (softmax, log_softmax, cross_entropy):
// an element that raises the maximum rescales the sum so far. The scale exp(a - b) is exactly 1
// where a == b, so the empty start (m = -inf, s = 0) makes no NaN; a NaN still spreads.
template <typename T> BZ_D T bz_online_scale(T m, T m_new) {
  if constexpr (sizeof(T) == 8) return m == m_new ? T(1) : exp(m - m_new);
  else return m == m_new ? T(1) : expf(m - m_new);
}
// One exponential an element: of x - m when x does not raise the maximum, else of m - x (the scale).
// x == m counts as 1 also at -inf (an empty start or a masked element); +inf against +inf is NaN,
// as exp(inf - inf) is in the two-pass sum.
template <typename T> BZ_D T bz_online_add(T s, T m, T x) {
  const T d = (x == m && x < T(0)) ? T(0) : x - m;
  const T e = sizeof(T) == 8 ? (T)exp(d > T(0) ? -d : d) : (T)expf(d > T(0) ? -d : d);
  return d > T(0) ? s * e + T(1) : s + e;
}
template <typename T> BZ_D void bz_online_combine(T& m, T& s, T m2, T s2) {
  const T m_new = bz_maximum(m, m2);
  s = s * bz_online_scale(m, m_new) + s2 * bz_online_scale(m2, m_new);  // the same either way round
  m = m_new;
}
// bz_shuffle_reduce and bz_lane_reduce for two accumulators that combine together:
// `combine(a, b, a2, b2)` folds another lane's pair into (a, b).
template <typename A, typename B, typename Combine> BZ_D void bz_pair_shuffle_reduce(A& a, B& b, int width,
                                                                                    Combine combine) {
  for (int offset = width / 2; offset > 0; offset >>= 1) combine(a, b, bz_shfl_xor(a, offset), bz_shfl_xor(b, offset));
}
template <typename A, typename B, typename Combine> BZ_D void bz_pair_lane_reduce(A& a, B& b, int lanes,
                                                                                 Combine combine) {
  bz_pair_shuffle_reduce(a, b, lanes < 32 ? lanes : 32, combine);
  if (lanes <= 32) return;
  __shared__ A partial_a[32];
  __shared__ B partial_b[32];
  __syncthreads();  // an earlier reduction's readers are done with the partials
  if ((threadIdx.x & 31) == 0) {
    partial_a[threadIdx.x >> 5] = a;
    partial_b[threadIdx.x >> 5] = b;
  }
  __syncthreads();
  const int first = bz_row_warp(lanes);
  a = partial_a[first];
  b = partial_b[first];
  for (int w = 1; w < (lanes >> 5); ++w) combine(a, b, partial_a[first + w], partial_b[first + w]);
}

// A (maximum, sum) pair of bz_online_add.
struct BzOnlineCombine {
  template <typename T> BZ_D void operator()(T& m, T& s, T m2, T s2) const { bz_online_combine(m, s, m2, s2); }
};

// argmax / argmin across lanes: each lane holds the (value, index) it found first among its
// elements; of two, the first NaN wins, else the larger (smaller) value, the lower index on a tie:
// NumPy's first occurrence, whichever lanes the elements fell to.
template <bool Largest> struct BzArgCombine {
  template <typename T, typename I> BZ_D void operator()(T& v, I& i, T v2, I i2) const {
    const bool nan1 = v != v, nan2 = v2 != v2;
    const bool take = (nan1 || nan2) ? nan2 && (!nan1 || i2 < i)
                                     : (Largest ? v2 > v : v2 < v) || (v2 == v && i2 < i);
    if (take) {
      v = v2;
      i = i2;
    }
  }
};

// An outer reduction's block: threads c + cols * g (cols a power of two) share column c, one per
// row group g. Their values combine in a fixed tree over the row groups, through shared memory;
// every thread gets its column's result. `Block` is the compiled block size.
template <int Block, typename T, typename Op> BZ_D T bz_column_reduce(T v, int cols, Op op) {
  __shared__ T partial[Block];
  if (cols >= (int)blockDim.x) return v;
  __syncthreads();  // an earlier reduction's readers are done with `partial`
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int half = (int)blockDim.x >> 1; half >= cols; half >>= 1) {
    if ((int)threadIdx.x < half) partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  return partial[threadIdx.x & (cols - 1)];
}

// `Op` on each of the four columns of a float4: bz_column_reduce of four columns a thread at once
// (one tree and its barriers for the four).
template <typename Op> struct BzEach4 {
  BZ_D float4 operator()(float4 a, float4 b) const {
    const Op op{};
    return make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
  }
};

// `x`, which the compiler must take as unknown where this reads it: a loop over rows reading a lane
// index so cannot keep what it derives from it (a row-invariant vector's addresses and loads) in
// registers across its iterations (inner-outer tasks: 125 registers and no spills for layer_norm
// backward, 64 instead of 128 for rms_norm backward).
BZ_D int bz_opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

// Whether this block is the last of the `count` blocks sharing `counter` to get here (their writes
// before this are then seen by this block); the last one resets the counter for the next launch.
BZ_D bool bz_last_of(unsigned* counter, long long count) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == (unsigned)(count - 1);
  __syncthreads();
  if (last && threadIdx.x == 0) *counter = 0;
  __threadfence();
  return last;
}

// Whether this block is the last of the grid to get here (see bz_last_of).
BZ_D bool bz_last_block(unsigned* finished) { return bz_last_of(finished, gridDim.x); }

// --- atomics (the loop language): each returns the element's value before the update ----------
// The semantics are the CPU backend's (LLVM's atomicrmw): integers wrap, float min/max ignore a NaN
// operand as fminf/fmaxf do, float sub adds the negated value (x - v is x + -v, also for zeros).
template <typename T> BZ_D T bz_atomic_add(T* p, T v) {
  if constexpr (sizeof(T) == 8 && !bz_is_float<T>())
    return (T)atomicAdd((unsigned long long*)p, (unsigned long long)v);
  else return atomicAdd(p, v);
}
template <typename T> BZ_D T bz_atomic_sub(T* p, T v) {
  if constexpr (bz_is_float<T>()) return atomicAdd(p, -v);
  else return bz_atomic_add(p, bz_neg(v));
}
// Where the hardware has no atomic for the type: compare-and-swap on the bits until no other
// thread changed them in between. An update that changes nothing writes nothing.
template <int Bytes> struct bz_bits_of_size;
template <> struct bz_bits_of_size<4> { typedef unsigned type; };
template <> struct bz_bits_of_size<8> { typedef unsigned long long type; };
template <typename T, typename Op> BZ_D T bz_atomic_cas_loop(T* p, T v, Op op) {
  typedef typename bz_bits_of_size<sizeof(T)>::type Bits;
  Bits* bits = (Bits*)p;
  Bits old = *(volatile Bits*)bits, assumed;
  do {
    assumed = old;
    T current, next;
    memcpy(&current, &assumed, sizeof(T));
    next = op(current, v);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    if (next_bits == assumed) break;
    old = atomicCAS(bits, assumed, next_bits);
  } while (old != assumed);
  T result;
  memcpy(&result, &old, sizeof(T));
  return result;
}
struct BzAtomicMax { template <typename T> BZ_D T operator()(T a, T b) const { return fmax(a, b); } };
struct BzAtomicMin { template <typename T> BZ_D T operator()(T a, T b) const { return fmin(a, b); } };
template <typename T> BZ_D T bz_atomic_max(T* p, T v) {
  if constexpr (bz_is_float<T>()) return bz_atomic_cas_loop(p, v, BzAtomicMax());
  else return atomicMax(p, v);
}
template <typename T> BZ_D T bz_atomic_min(T* p, T v) {
  if constexpr (bz_is_float<T>()) return bz_atomic_cas_loop(p, v, BzAtomicMin());
  else return atomicMin(p, v);
}

// A failed debug check (`@bz.kernel(debug=True)`): the first failure's message number stays.
BZ_D void bz_assert_failed(long long* status, long long code) {
  atomicCAS((unsigned long long*)status, 0ULL, (unsigned long long)code);
}
