"""C++ identifiers for the names of a loop kernel.

Loop kernels carry Python names (parameters, locals, loop indices) into the CUDA source, so the
source reads like the kernel. A Python name may be a C++ keyword (`new`, `class`, `int`), a CUDA
builtin (`threadIdx`), a math function the generated expressions call (`exp`, `fminf`: a local of
that name would hide the function), an identifier C++ reserves (`__x`, `_X`), braze's own
(`bz_...`), or not ASCII at all. Those are renamed; every other name stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast
    struct switch template this thread_local throw true try typedef typeid typename union unsigned using virtual
    void volatile wchar_t while xor xor_eq
""".split())

CUDA_BUILTINS = frozenset("""
    threadIdx blockIdx blockDim gridDim warpSize dim3 size_t ptrdiff_t std printf malloc free memcpy memset assert
    clock clock64 NULL INFINITY NAN HUGE_VAL HUGE_VALF asm volatile
""".split())

# The CUDA math library (float64 names; the float32 ones add `f`), and integer helpers.
_MATH = """
    acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh cospi cyl_bessel_i0 cyl_bessel_i1 erf erfc
    erfcinv erfcx erfinv exp exp10 exp2 expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb isfinite isinf
    isnan j0 j1 jn ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround modf nan nearbyint nextafter
    norm norm3d norm4d normcdf normcdfinv pow rcbrt remainder remquo rhypot rint rnorm round rsqrt scalbln scalbn
    signbit sin sincos sincospi sinh sinpi sqrt tan tanh tgamma trunc y0 y1 yn
"""
MATH_FUNCTIONS = frozenset(n + suffix for n in _MATH.split() for suffix in ("", "f")) | frozenset(
    "abs labs llabs min max umin umax llmin llmax ullmin ullmax".split())

_RESERVED_PATTERN = re.compile(
    r"^(__|_[A-Z]|bz_|Bz|atomic|make_|(u?(char|short|int|long|longlong)|float|double)[1-4]$)")


def is_reserved(name: str) -> bool:
    """Whether `name` cannot stand as written in the generated source."""
    return (name in CPP_KEYWORDS or name in CUDA_BUILTINS or name in MATH_FUNCTIONS
            or _RESERVED_PATTERN.match(name) is not None or not name.isascii() or not name.isidentifier())


def _ascii(name: str) -> str:
    """`name` in the characters of a C++ identifier: a non-ASCII letter spelled out, anything else
    (the brackets of a tuple item's local `w[0]`) an underscore."""
    spelled = "".join(c if c.isascii() else f"_u{ord(c):04x}" for c in name)
    return re.sub(r"[^A-Za-z0-9_]", "_", spelled)


class Names:
    """Python name -> C++ identifier, for one generated function. Reserved names become `v_<name>`;
    a clash with another name already given gets a number, so every name maps to its own identifier.

    Names are looked up by a key: a Python name, or a tuple for what the generator derives from one
    (`("shape", "x", 0)` proposes `x_shape0`), so a local called `x_shape0` gets another identifier.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.given: dict[object, str] = {}
        self.used: set[str] = set(taken)

    def __call__(self, key: object, proposed: str | None = None) -> str:
        if key not in self.given:
            name = proposed if proposed is not None else str(key)
            self.given[key] = self._fresh(f"v_{_ascii(name).lstrip('_')}" if is_reserved(name) else name)
        return self.given[key]

    def _fresh(self, base: str) -> str:
        candidate, n = base, 1
        while candidate in self.used or is_reserved(candidate):
            n += 1
            candidate = f"{base}_{n}"
        self.used.add(candidate)
        return candidate
