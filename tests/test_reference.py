"""Tests of detconv/reference.py against exact rational arithmetic.

The oracle here shares no code with the reference: fma is computed with
fractions.Fraction and rounded by integer arithmetic, and the convolutions are
plain scalar loops written from docs/contract.md. Comparisons are on bits.
"""

import importlib.util
import math
import pathlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from cases import DTYPES
from helpers import NP_DTYPES

# Load the module by path: it needs only numpy and ml_dtypes, and this keeps the
# test independent of the package's __init__ (TensorFlow, built extensions).
_PATH = pathlib.Path(__file__).resolve().parents[1] / "detconv" / "reference.py"
_spec = importlib.util.spec_from_file_location("detconv_reference_under_test", _PATH)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# (precision p, emin, emax) of each binary format
FMT = {F16: (11, -14, 15), F32: (24, -126, 127), F64: (53, -1022, 1023), BF16: (8, -126, 127)}
UINT = {F16: np.uint16, BF16: np.uint16, F32: np.uint32, F64: np.uint64}
CANON = {F16: 0x7E00, BF16: 0x7FC0, F32: 0x7FC00000, F64: 0x7FF8000000000000}


# ------------------------------------------------------------------ oracle

def round_frac(q, dt):
    """Nonzero rational q rounded to nearest-even in format dt (a Python float)."""
    p, emin, emax = FMT[dt]
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    qe = max(e, emin) - (p - 1)  # exponent of the quantum
    scaled = a / Fraction(2) ** qe
    n, rem = divmod(scaled.numerator, scaled.denominator)
    if 2 * rem > scaled.denominator or (2 * rem == scaled.denominator and n & 1):
        n += 1
    if Fraction(n) * Fraction(2) ** qe > (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax:
        r = math.inf
    else:
        r = math.ldexp(n, qe)  # exact: n < 2**(p+1) and the value is representable
    return -r if neg else r


def fma_exact(a, b, c, dt):
    """IEEE fusedMultiplyAdd in format dt on Python floats holding dt values."""
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return math.nan
        prod_sign = math.copysign(1, a) * math.copysign(1, b)
        if math.isinf(c) and math.copysign(1, c) != prod_sign:
            return math.nan
        return prod_sign * math.inf
    if math.isinf(c):
        return c
    prod = Fraction(a) * Fraction(b)
    q = prod + Fraction(c)
    if q == 0:
        if prod == 0 and c == 0:
            prod_neg = (math.copysign(1, a) * math.copysign(1, b)) < 0
            return -0.0 if (prod_neg and math.copysign(1, c) < 0) else 0.0
        return 0.0
    return round_frac(q, dt)


def round_to(v, dt):
    """Python float (any value) rounded once to dt; NaN stays NaN."""
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    return round_frac(Fraction(v), dt)


def bits(arr, dt):
    arr = np.ascontiguousarray(np.asarray(arr, dtype=dt))
    return arr.view(UINT[dt])


def to_dtype_canon(values, dt, shape):
    """Python floats (already dt values) to a dt array with canonical NaNs."""
    out = np.array([0 if math.isnan(v) else v for v in values], dtype=np.float64)
    out = out.astype(np.float32).astype(dt) if dt == BF16 else out.astype(dt)
    u = out.view(UINT[dt])
    for k, v in enumerate(values):
        if math.isnan(v):
            u[k] = CANON[dt]
    return out.reshape(shape)


def assert_bits_equal(got, want, dt):
    g, w = bits(got, dt), bits(want, dt)
    assert g.shape == w.shape
    bad = np.nonzero(g != w)
    assert bad[0].size == 0, (
        f"{bad[0].size} mismatches, first at {tuple(i[0] for i in bad)}: "
        f"got {hex(int(g[tuple(i[0] for i in bad)]))} want {hex(int(w[tuple(i[0] for i in bad)]))}")


# ----------------------------------------------------------- fma triples

def _random_values(rng, dt, n):
    """A mix of random bit patterns, moderate values, subnormals and specials."""
    u = UINT[dt]
    nbits = np.dtype(u).itemsize * 8
    raw = rng.integers(0, 2 ** nbits, size=n, dtype=np.uint64 if nbits == 64 else np.int64)
    anybits = raw.astype(u).view(dt)
    p, emin, emax = FMT[dt]
    sign = rng.choice([-1.0, 1.0], n)
    mant = rng.random(n) + 1.0
    exps = rng.integers(-8, 8, n)
    moderate = (sign * np.ldexp(mant, exps)).astype(dt)
    sub = (sign * np.ldexp(rng.random(n), emin)).astype(dt)          # subnormals
    tiny = (sign * np.ldexp(mant, rng.integers(emin - p, emin + p, n))).astype(dt)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0,
                         float(np.finfo(dt).max), float(np.finfo(dt).tiny)], dtype=dt)
    pick = rng.integers(0, 5, n)
    vals = np.where(pick == 0, anybits, np.where(pick == 1, moderate,
                    np.where(pick == 2, sub, np.where(pick == 3, tiny, moderate))))
    vals[rng.random(n) < 0.03] = rng.choice(specials, 1)[0]
    return vals.astype(dt)


def _hard_triples(rng, dt, n):
    """Cancellation and exact ties: c close to -a*b, or a*b a half ulp of c."""
    a = _random_values(rng, dt, n)
    b = _random_values(rng, dt, n)
    with np.errstate(all="ignore"):
        prod = (a.astype(np.float64) * b.astype(np.float64))
        c1 = (-prod).astype(dt)                         # near-total cancellation
        step = np.ldexp(1.0, rng.integers(-30, 0, n)).astype(dt)
        c2 = (c1 * (1 + step.astype(np.float64))).astype(dt)
        # ties: c + k * ulp(c)/2 for odd k, with a = k and b = ulp(c)/2
        c3 = _random_values(rng, dt, n)
        p, emin, emax = FMT[dt]
        ulp = np.array([math.ldexp(1, max(math.frexp(float(v))[1] - 1, emin) - (p - 1))
                        if np.isfinite(v) and v != 0 else 1.0 for v in c3])
        k = rng.choice([1.0, 3.0, 5.0, -1.0, -3.0], n)
        a3 = k.astype(dt)
        b3 = (ulp / 2).astype(dt)  # may flush below the format: then simply another case
        # a*b within a hair of half an ulp of c: the double-rounding trap of
        # float(float64(a)*b + c) for float32 (about one case in sixteen here)
        c4 = (np.ldexp(rng.random(n) + 1, rng.integers(-10, 10, n)) * rng.choice([-1, 1], n)).astype(dt)
        c4[::2] = np.nextafter(c4[::2], np.asarray(np.inf, dt))  # half of them with an odd last bit
        half = np.array([math.ldexp(1, math.frexp(float(v))[1] - 1 - p) for v in c4])
        a4 = (rng.random(n) + 1).astype(dt)
        b4 = (half / a4.astype(np.float64) * rng.choice([-1, 1], n)).astype(dt)
    aa = np.concatenate([a, a, a3, a4])
    bb = np.concatenate([b, b, b3, b4])
    cc = np.concatenate([c1, c2, c3, c4])
    return aa, bb, cc


def _check_fma(dt, a, b, c):
    got = ref.fma(a, b, c, dt)
    want = [fma_exact(float(x), float(y), float(z), dt) for x, y, z in zip(a, b, c)]
    assert_bits_equal(got, to_dtype_canon(want, dt, got.shape), dt)


@pytest.mark.parametrize("dt", [F32, F16, F64], ids=str)
def test_fma_random_against_fractions(dt):
    rng = np.random.default_rng({F32: 1, F16: 2, F64: 3}[dt])
    n = 3000
    _check_fma(dt, _random_values(rng, dt, n), _random_values(rng, dt, n), _random_values(rng, dt, n))


@pytest.mark.parametrize("dt", [F32, F16, F64], ids=str)
def test_fma_hard_cases_against_fractions(dt):
    rng = np.random.default_rng({F32: 4, F16: 5, F64: 6}[dt])
    _check_fma(dt, *_hard_triples(rng, dt, 1000))


def test_fma16_all_pairs_of_a_slice():
    # every a in a band of binary16 against many b, c: dense coverage of the format
    rng = np.random.default_rng(7)
    a = np.arange(0x3000, 0x3400, 4, dtype=np.uint16).view(np.float16)
    b = _random_values(rng, F16, a.size)
    c = _random_values(rng, F16, a.size)
    _check_fma(F16, a, b, c)
    with np.errstate(all="ignore"):
        c2 = c * np.float16(2 ** -10)
    _check_fma(F16, a, -b, c2)


def test_fma32_double_rounding_case():
    # a*b just under half an ulp of c = 1 + 2^-23 (whose last bit is odd): the
    # exact sum rounds down, but rounding first to float64 lands on the tie and
    # then rounds up to even.
    rng = np.random.default_rng(8)
    c = np.float32(1 + 2.0 ** -23)
    for _ in range(100000):
        a = np.float32(1 + rng.random())
        b = np.float32(2.0 ** -24 / float(a))
        d = Fraction(float(a)) * Fraction(float(b)) - Fraction(2) ** -24
        if -Fraction(2) ** -53 < d < 0:
            break
    else:
        pytest.fail("no hard case found")
    naive = np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    exact = fma_exact(float(a), float(b), float(c), F32)
    assert exact == float(c)
    assert naive != np.float32(exact)  # the trap the reference must avoid
    assert ref.fma(a, b, c, np.float32) == np.float32(exact)


def test_fma64_extreme_ranges():
    big, tiny = 2.0 ** 1000, 2.0 ** -1000
    cases = [
        (2.0 ** 1023, 2.0, -2.0 ** 1023),        # product overflows, result finite
        (2.0 ** 1023, 2.0, -float(np.finfo(np.float64).max)),
        (1.5 * 2.0 ** 1000, 1.5 * 2.0 ** 23, 1.0),
        (2.0 ** 1023, 4.0, 1.0),                 # overflow to inf
        (big, big, -np.inf),                     # finite product overflowing + -inf
        (tiny, tiny, 0.0),                       # product underflows to zero
        (-tiny, tiny, 0.0),                      # ... to -0
        (2.0 ** -537, 2.0 ** -537 * 3, 2.0 ** -1074),  # subnormal result
        (1 + 2.0 ** -52, 1 - 2.0 ** -53, -1.0),  # cancellation to the error term
        (2.0 ** -600, 1 + 2.0 ** -52, -(2.0 ** -600)),
        (5e-324, 0.5, 0.0), (5e-324, -0.5, 0.0), (5e-324, 0.75, 0.0),
        (0.0, -3.0, -0.0), (-0.0, -3.0, -0.0), (0.0, np.inf, 1.0), (np.inf, 2.0, -np.inf),
        (np.nan, 1.0, 1.0), (1e308, 10.0, -1e308 * 10),
        # a*b exactly a midpoint; a subnormal c decides the direction
        (1 + 2.0 ** -26, 1 + 2.0 ** -27, 5e-324), (1 + 2.0 ** -26, 1 + 2.0 ** -27, -5e-324),
        (1 + 2.0 ** -26, 1 + 2.0 ** -27, 0.0), (1 + 2.0 ** -26, -1 - 2.0 ** -27, 5e-324),
        (2.0 ** 994, 2.0 ** 29, -(2.0 ** 1023)), (2.0 ** -899, 1 + 2.0 ** -52, -(2.0 ** -899)),
    ]
    a, b, c = (np.array(v) for v in zip(*cases))
    _check_fma(F64, a, b, c)


def test_fma_signed_zeros_and_specials():
    for dt in (F16, F32, F64):
        a = np.array([0.0, -0.0, 0.0, 1.0, 1.0, np.inf, np.inf, 2.0], dt)
        b = np.array([-1.0, 1.0, 1.0, -1.0, np.nan, 0.0, 1.0, 3.0], dt)
        c = np.array([-0.0, -0.0, -0.0, 1.0, 1.0, 1.0, -np.inf, np.inf], dt)
        _check_fma(dt, a, b, c)
        out = ref.fma(a, b, c, dt).view(UINT[dt])
        assert out[4] == CANON[dt] and out[5] == CANON[dt] and out[6] == CANON[dt]


def test_numpy_casts_are_single_correct_roundings():
    # The reference relies on these casts: float64 -> float32/float16 and
    # float32 -> float16/bfloat16 must round once to nearest-even, subnormals included.
    rng = np.random.default_rng(9)
    for src, dst in ((F64, F32), (F64, F16), (F32, F16), (F32, BF16)):
        v = np.concatenate([
            _random_values(rng, src, 2000),
            np.ldexp(rng.random(1000) + 1, rng.integers(FMT[dst][1] - FMT[dst][0] - 2,
                                                          FMT[dst][1] + 3, 1000)).astype(src),
        ])
        if src == F64:  # values just off a binary16/32 tie, which float32 would hide
            t = np.ldexp(1 + np.ldexp(2 * rng.integers(0, 2 ** 9, 500) + 1.0, -FMT[dst][0]),
                         rng.integers(-20, 10, 500))
            v = np.concatenate([v, t, t * (1 + 2.0 ** -40), t * (1 - 2.0 ** -40)])
        with np.errstate(all="ignore"):
            got = (v.astype(np.float32).astype(BF16) if dst == BF16 else v.astype(dst))
        want = [round_to(float(x), dst) for x in v]
        # NaN payloads of the casts are irrelevant (outputs are canonicalised)
        got_bits = bits(got, dst)
        nan = np.isnan(v)
        want_bits = bits(to_dtype_canon(want, dst, got.shape), dst)
        assert np.array_equal(got_bits[~nan], want_bits[~nan])


# ---------------------------------------------------------- shape helpers

def test_reduction_chunks_matches_contract_formula():
    rng = np.random.default_rng(10)
    samples = [(0, 5), (1, 1), (64, 1), (65, 1), (130, 16), (10 ** 6, 2 ** 20), (7, 2 ** 23)]
    samples += [(int(r), int(f)) for r, f in zip(rng.integers(1, 10 ** 7, 300),
                                                 rng.integers(1, 10 ** 7, 300))]
    for R, F in samples:
        L, P = ref.reduction_chunks(R, F)
        if R == 0:
            assert (L, P) == (0, 0)
            continue
        p0 = max(1, min(math.ceil(Fraction(2 ** 22, F)), math.ceil(Fraction(R, 64))))
        assert L == math.ceil(Fraction(R, p0))
        assert P == math.ceil(Fraction(R, L))
        assert (P - 1) * L < R <= P * L
        assert P * F <= 2 ** 22 + F or P == 1 or math.ceil(Fraction(R, 64)) <= math.ceil(Fraction(2 ** 22, F))


def test_resolve_padding():
    # SAME follows TensorFlow: OH = ceil(H / s), extra padding at the bottom/right
    assert ref.resolve_padding(5, 5, 3, 3, 1, 1, "SAME") == (1, 1, 1, 1, 5, 5)
    assert ref.resolve_padding(6, 7, 3, 2, 2, 1, "SAME") == (0, 1, 0, 1, 3, 4)
    assert ref.resolve_padding(5, 5, 3, 3, 1, 2, "SAME") == (2, 2, 2, 2, 5, 5)
    assert ref.resolve_padding(5, 9, 3, 3, (2, 3), (1, 2), "VALID") == (0, 0, 0, 0, 2, 2)
    assert ref.resolve_padding(4, 4, 2, 2, 1, 1, ((1, 0), (2, 3))) == (1, 0, 2, 3, 4, 8)
    assert ref.resolve_padding(1, 1, 4, 4, 1, 1, "SAME") == (1, 2, 1, 2, 1, 1)


def test_validation_names_the_argument():
    x = np.zeros((1, 4, 4, 4), np.float32)
    f = np.zeros((2, 2, 2, 4), np.float32)
    cases = [
        (lambda: ref.conv2d(x, f, strides=0), "strides"),
        (lambda: ref.conv2d(x, f, dilations=(1, 0)), "dilations"),
        (lambda: ref.conv2d(x, f, padding="FULL"), "padding"),
        (lambda: ref.conv2d(x, f, padding=((1, -1), (0, 0))), "padding"),
        (lambda: ref.conv2d(x, np.zeros((2, 2, 3, 4), np.float32)), "f"),
        (lambda: ref.conv2d(x, np.zeros((2, 2, 2, 3), np.float32)), "f"),
        (lambda: ref.conv2d(x.astype(np.int32), f), "x"),
        (lambda: ref.conv2d(x, f.astype(np.float64)), "f"),
        (lambda: ref.conv2d(x, f, bias=np.zeros(3, np.float32)), "bias"),
        (lambda: ref.conv2d(x, f, accumulation="float16"), "accumulation"),
        (lambda: ref.conv2d(x, f, accumulation="bfloat16"), "accumulation"),
        (lambda: ref.conv2d(x.astype(np.float64), f.astype(np.float64), accumulation="float32"),
         "accumulation"),
        (lambda: ref.conv2d_backprop_input(np.zeros((1, 3, 3, 5), np.float32), f, x.shape), "dy"),
        (lambda: ref.conv2d_backprop_input(np.zeros((1, 3, 3, 4), np.float32), f, (1, 4, 4)),
         "input_shape"),
        (lambda: ref.conv2d_backprop_filter(x, np.zeros((1, 3, 3, 4), np.float32), (2, 2, 2)),
         "filter_shape"),
        (lambda: ref.bias_grad(np.zeros((3, 4), np.float32)), "dy"),
        (lambda: ref.fma(1, 2, 3, "bfloat16"), "acc_dtype"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
    # a filter taller than the VALID input leaves an empty output (as tf.nn), no error
    assert ref.conv2d(x, np.zeros((5, 2, 4, 4), np.float32)).shape == (1, 0, 3, 4)


# -------------------------------------------- scalar convolutions (oracle)

def _acc_fmt(dt, accumulation):
    if accumulation == "float16":
        return F16
    return F64 if dt == F64 else F32


def _same(n, k, s, d):
    out = -(-n // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def _geometry(H, W, KH, KW, s, d, padding):
    if padding == "VALID":
        pt = pb = pl = pr = 0
    elif padding == "SAME":
        (pt, pb), (pl, pr) = _same(H, KH, s[0], d[0]), _same(W, KW, s[1], d[1])
    else:
        (pt, pb), (pl, pr) = padding
    OH = (H + pt + pb - (KH - 1) * d[0] - 1) // s[0] + 1
    OW = (W + pl + pr - (KW - 1) * d[1] - 1) // s[1] + 1
    return pt, pl, OH, OW


def _out(vals, shape, dt):
    return to_dtype_canon([round_to(v, dt) for v in vals], dt, shape)


def scalar_conv2d(x, f, s, padding, d, bias, accumulation):
    dt = x.dtype
    A = _acc_fmt(dt, accumulation)
    N, H, W, C = x.shape
    KH, KW, Cg, Co = f.shape
    G = C // Cg
    pt, pl, OH, OW = _geometry(H, W, KH, KW, s, d, padding)
    xs, fs = x.astype(np.float64), f.astype(np.float64)
    vals = []
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                for o in range(Co):
                    g = o // (Co // G)
                    acc = 0.0
                    for kh in range(KH):
                        for kw in range(KW):
                            for i in range(Cg):
                                ih, iw = oh * s[0] + kh * d[0] - pt, ow * s[1] + kw * d[1] - pl
                                v = float(xs[n, ih, iw, g * Cg + i]) if 0 <= ih < H and 0 <= iw < W else 0.0
                                acc = fma_exact(v, float(fs[kh, kw, i, o]), acc, A)
                    if bias is not None:
                        acc = fma_exact(acc, 1.0, float(bias.astype(np.float64)[o]), A)
                    vals.append(acc)
    return _out(vals, (N, OH, OW, Co), dt)


def scalar_backprop_input(dy, f, input_shape, s, padding, d, accumulation):
    dt = dy.dtype
    A = _acc_fmt(dt, accumulation)
    N, H, W, C = input_shape
    KH, KW, Cg, Co = f.shape
    G = C // Cg
    Cog = Co // G
    pt, pl, OH, OW = _geometry(H, W, KH, KW, s, d, padding)
    dys, fs = dy.astype(np.float64), f.astype(np.float64)
    vals = []
    for n in range(N):
        for ih in range(H):
            for iw in range(W):
                for c in range(C):
                    g, i = c // Cg, c % Cg
                    acc = 0.0
                    for kh in range(KH):
                        for kw in range(KW):
                            for o in range(g * Cog, (g + 1) * Cog):
                                th, tw = ih + pt - kh * d[0], iw + pl - kw * d[1]
                                if (th >= 0 and tw >= 0 and th % s[0] == 0 and tw % s[1] == 0
                                        and th // s[0] < OH and tw // s[1] < OW):
                                    acc = fma_exact(float(dys[n, th // s[0], tw // s[1], o]),
                                                    float(fs[kh, kw, i, o]), acc, A)
                    vals.append(acc)
    return _out(vals, (N, H, W, C), dt)


def _chunks(R, F):
    if R == 0:
        return 0, 0
    p0 = max(1, min(math.ceil(Fraction(2 ** 22, F)), math.ceil(Fraction(R, 64))))
    L = math.ceil(Fraction(R, p0))
    return L, math.ceil(Fraction(R, L))


def scalar_backprop_filter(x, dy, filter_shape, s, padding, d, accumulation):
    dt = x.dtype
    A = _acc_fmt(dt, accumulation)
    N, H, W, C = x.shape
    KH, KW, Cg, Co = filter_shape
    G = C // Cg
    pt, pl, OH, OW = _geometry(H, W, KH, KW, s, d, padding)
    R = N * OH * OW
    L, P = _chunks(R, KH * KW * Cg * Co)
    xs, dys = x.astype(np.float64), dy.astype(np.float64)
    vals = []
    for kh in range(KH):
        for kw in range(KW):
            for i in range(Cg):
                for o in range(Co):
                    c = (o // (Co // G)) * Cg + i
                    parts = []
                    for p in range(P):
                        part = 0.0
                        for r in range(p * L, min((p + 1) * L, R)):
                            n, rest = divmod(r, OH * OW)
                            oh, ow = divmod(rest, OW)
                            ih, iw = oh * s[0] + kh * d[0] - pt, ow * s[1] + kw * d[1] - pl
                            v = float(xs[n, ih, iw, c]) if 0 <= ih < H and 0 <= iw < W else 0.0
                            part = fma_exact(v, float(dys[n, oh, ow, o]), part, A)
                        parts.append(part)
                    tot = parts[0] if parts else 0.0
                    for q in parts[1:]:
                        tot = fma_exact(tot, 1.0, q, A)
                    vals.append(tot)
    return _out(vals, filter_shape, dt)


def scalar_bias_grad(dy, accumulation):
    dt = dy.dtype
    A = _acc_fmt(dt, accumulation)
    N, OH, OW, Co = dy.shape
    R = N * OH * OW
    L, P = _chunks(R, Co)
    flat = dy.astype(np.float64).reshape(R, Co)
    vals = []
    for o in range(Co):
        parts = []
        for p in range(P):
            part = 0.0
            for r in range(p * L, min((p + 1) * L, R)):
                part = fma_exact(part, 1.0, float(flat[r, o]), A)
            parts.append(part)
        tot = parts[0] if parts else 0.0
        for q in parts[1:]:
            tot = fma_exact(tot, 1.0, q, A)
        vals.append(tot)
    return _out(vals, (Co,), dt)


def _data(rng, shape, dt, scale=1.0):
    v = rng.standard_normal(shape) * scale
    return (v.astype(np.float32).astype(dt) if dt == BF16 else v.astype(dt))


# (x shape, filter shape, strides, padding, dilations)
CONV_CASES = [
    ((1, 5, 5, 2), (2, 2, 2, 3), (1, 1), "VALID", (1, 1)),
    ((2, 5, 4, 2), (3, 2, 2, 2), (2, 1), "SAME", (1, 1)),
    ((1, 6, 6, 4), (2, 2, 2, 4), (1, 2), "SAME", (2, 1)),        # 2 groups
    ((1, 5, 5, 4), (2, 3, 1, 4), (2, 2), ((1, 2), (0, 1)), (1, 1)),  # depthwise
    ((1, 4, 5, 3), (2, 2, 3, 2), (3, 2), ((2, 0), (1, 3)), (2, 2)),
]
DTYPE_CASES = [(np.dtype(NP_DTYPES[d]), a) for d, a in DTYPES]  # the one table (tests/cases.py)


def _ids(case):
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("dt,accumulation", DTYPE_CASES, ids=[_ids(c) for c in DTYPE_CASES])
def test_convolutions_match_scalar_loops(dt, accumulation):
    rng = np.random.default_rng(11)
    for xs, fs, s, padding, d in CONV_CASES:
        x = _data(rng, xs, dt)
        f = _data(rng, fs, dt)
        b = _data(rng, (fs[3],), dt)
        y = ref.conv2d(x, f, s, padding, d, bias=b, accumulation=accumulation)
        assert y.dtype == dt
        assert_bits_equal(y, scalar_conv2d(x, f, s, padding, d, b, accumulation), dt)
        dy = _data(rng, y.shape, dt)
        dx = ref.conv2d_backprop_input(dy, f, xs, s, padding, d, accumulation=accumulation)
        assert_bits_equal(dx, scalar_backprop_input(dy, f, xs, s, padding, d, accumulation), dt)
        dw = ref.conv2d_backprop_filter(x, dy, fs, s, padding, d, accumulation=accumulation)
        assert_bits_equal(dw, scalar_backprop_filter(x, dy, fs, s, padding, d, accumulation), dt)
        db = ref.bias_grad(dy, accumulation=accumulation)
        assert_bits_equal(db, scalar_bias_grad(dy, accumulation), dt)


@pytest.mark.parametrize("dt,accumulation", DTYPE_CASES, ids=[_ids(c) for c in DTYPE_CASES])
def test_multi_chunk_reductions_match_scalar_loops(dt, accumulation):
    # R = 2*9*8 = 144 > 64: P0 = 3, L = 48, P = 3; for db (F = Co) likewise.
    rng = np.random.default_rng(12)
    xs, fs, s, padding, d = (2, 10, 9, 2), (2, 2, 2, 2), (1, 1), "VALID", (1, 1)
    x = _data(rng, xs, dt)
    dy = _data(rng, (2, 9, 8, 2), dt)
    assert ref.reduction_chunks(144, 16) == (48, 3)
    dw = ref.conv2d_backprop_filter(x, dy, fs, s, padding, d, accumulation=accumulation)
    assert_bits_equal(dw, scalar_backprop_filter(x, dy, fs, s, padding, d, accumulation), dt)
    assert_bits_equal(ref.bias_grad(dy, accumulation=accumulation), scalar_bias_grad(dy, accumulation), dt)
    # an uneven last chunk: R = 1*13*10 = 130 -> L = 44, P = 3 (44 + 44 + 42)
    x2 = _data(rng, (1, 14, 11, 2), dt)
    dy2 = _data(rng, (1, 13, 10, 2), dt)
    assert ref.reduction_chunks(130, 16) == (44, 3)
    dw2 = ref.conv2d_backprop_filter(x2, dy2, fs, s, padding, d, accumulation=accumulation)
    assert_bits_equal(dw2, scalar_backprop_filter(x2, dy2, fs, s, padding, d, accumulation), dt)


@pytest.mark.parametrize("dt", [F32, F64, BF16], ids=str)
def test_subnormal_and_special_data_match_scalar_loops(dt):
    rng = np.random.default_rng(13)
    xs, fs, s, padding, d = (1, 4, 4, 2), (2, 2, 2, 2), (1, 1), "SAME", (1, 1)
    p, emin, _ = FMT[dt]
    # products land around the smallest subnormals of the accumulator
    scale = 2.0 ** ((emin - p) / 2 + 2) if dt != BF16 else 2.0 ** -70
    x = _data(rng, xs, dt, scale)
    f = _data(rng, fs, dt, scale)
    x.flat[3] = np.inf
    f.flat[5] = np.nan
    y = ref.conv2d(x, f, s, padding, d)
    assert_bits_equal(y, scalar_conv2d(x, f, s, padding, d, None, None), dt)
    dy = _data(rng, y.shape, dt, scale)
    dx = ref.conv2d_backprop_input(dy, f, xs, s, padding, d)
    assert_bits_equal(dx, scalar_backprop_input(dy, f, xs, s, padding, d, None), dt)
    dw = ref.conv2d_backprop_filter(x, dy, fs, s, padding, d)
    assert_bits_equal(dw, scalar_backprop_filter(x, dy, fs, s, padding, d, None), dt)
    nan = np.isnan(y.astype(np.float64))
    assert nan.any() and np.all(bits(y, dt)[nan] == CANON[dt])
    assert (bits(dw, dt)[np.isnan(dw.astype(np.float64))] == CANON[dt]).all()


def test_padded_tap_turns_underflowed_minus_zero_into_plus_zero():
    # The contract's forward fold multiplies padded taps by +0. An accumulator
    # that underflowed to -0 becomes +0 on such a tap; skipping it would keep -0.
    x = np.array([0.0, -(2.0 ** -149)], np.float32).reshape(1, 1, 2, 1)
    f = np.array([0.25, 1.0], np.float32).reshape(1, 2, 1, 1)
    y = ref.conv2d(x, f, padding="SAME")            # W = 2, KW = 2: pad right by 1
    assert bits(y, F32).ravel()[1] == 0x00000000    # fma(-2^-149, 0.25, +0) = -0, then +0*1 + -0 = +0
    y_valid = ref.conv2d(x[:, :, 1:], f[:, :1], padding="VALID")
    assert bits(y_valid, F32).ravel()[0] == 0x80000000


def test_empty_reductions_give_plus_zero():
    x = np.zeros((0, 4, 4, 2), np.float32)
    dy = np.zeros((0, 3, 3, 2), np.float32)
    dw = ref.conv2d_backprop_filter(x, dy, (2, 2, 2, 2))
    assert dw.shape == (2, 2, 2, 2) and np.all(bits(dw, F32) == 0)
    assert np.all(bits(ref.bias_grad(dy), F32) == 0)
    assert ref.conv2d(x, np.ones((2, 2, 2, 2), np.float32)).shape == (0, 3, 3, 2)


# ----------------------------------------------------- accuracy sanity

def _conv_f64(x, f, s, padding, d):
    """Plain float64 convolution (no particular order) for accuracy checks."""
    N, H, W, C = x.shape
    KH, KW, Cg, Co = f.shape
    G, Cog = C // Cg, Co // (C // Cg)
    pt, pb, pl, pr, OH, OW = ref.resolve_padding(H, W, KH, KW, s, d, padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    y = np.zeros((N, OH, OW, Co))
    for kh in range(KH):
        for kw in range(KW):
            t = xp[:, kh * d[0]:kh * d[0] + (OH - 1) * s[0] + 1:s[0],
                   kw * d[1]:kw * d[1] + (OW - 1) * s[1] + 1:s[1]]
            for g in range(G):
                y[..., g * Cog:(g + 1) * Cog] += t[..., g * Cg:(g + 1) * Cg] @ \
                    f[kh, kw, :, g * Cog:(g + 1) * Cog].astype(np.float64)
    return y


@pytest.mark.parametrize("dt,tol", [(F32, 2e-6), (F16, 2e-3), (BF16, 1.6e-2), (F64, 1e-14)], ids=str)
def test_accuracy_against_float64(dt, tol):
    rng = np.random.default_rng(14)
    x = _data(rng, (2, 9, 9, 8), dt)
    f = _data(rng, (3, 3, 4, 8), dt)  # 2 groups
    for s, padding, d in [((1, 1), "SAME", (1, 1)), ((2, 1), "VALID", (1, 2))]:
        y = ref.conv2d(x, f, s, padding, d).astype(np.float64)
        want = _conv_f64(x, f, s, padding, d)
        scale = _conv_f64(np.abs(x.astype(np.float64)), np.abs(f.astype(np.float64)), s, padding, d)
        assert np.all(np.abs(y - want) <= tol * scale + 1e-30)
        # dx of a linear map is its transpose: <dx, x> == <dy, y> up to rounding
        dy = _data(rng, y.shape, dt)
        dx = ref.conv2d_backprop_input(dy, f, x.shape, s, padding, d).astype(np.float64)
        dw = ref.conv2d_backprop_filter(x, dy, f.shape, s, padding, d).astype(np.float64)
        lhs = np.sum(dy.astype(np.float64) * want)
        mag = np.sum(np.abs(dy.astype(np.float64)) * scale)
        assert abs(np.sum(dx * x.astype(np.float64)) - lhs) <= 4 * tol * mag
        assert abs(np.sum(dw * f.astype(np.float64)) - lhs) <= 4 * tol * mag
        db = ref.bias_grad(dy).astype(np.float64)
        assert np.allclose(db, dy.astype(np.float64).sum(axis=(0, 1, 2)),
                           rtol=0, atol=tol * np.abs(dy.astype(np.float64)).sum() + 1e-30)


def test_order_is_deterministic_and_input_extent_independent():
    # Extra rows beyond any receptive field must not change a bit.
    rng = np.random.default_rng(15)
    x = _data(rng, (1, 8, 8, 4), F32)
    f = _data(rng, (3, 3, 4, 4), F32)
    y1 = ref.conv2d(x, f)
    y2 = ref.conv2d(x[:, :7], f)
    assert np.array_equal(bits(y1[:, :5], F32), bits(y2, F32))
    # batch position does not matter either
    y3 = ref.conv2d(np.concatenate([x, x]), f)
    assert np.array_equal(bits(y3[1:], F32), bits(y1, F32))


def test_speed_budget():
    import time
    rng = np.random.default_rng(16)
    x = _data(rng, (2, 9, 9, 8), F32)
    f = _data(rng, (3, 3, 8, 8), F32)
    t0 = time.perf_counter()
    y = ref.conv2d(x, f, padding="SAME")
    ref.conv2d_backprop_input(y, f, x.shape, padding="SAME")
    ref.conv2d_backprop_filter(x, y, f.shape, padding="SAME")
    assert time.perf_counter() - t0 < 3.0


def test_docs_worked_example_bits():
    # docs/numerics.md quotes these bits
    assert ref.ORDER_VERSION == 1
    x = np.array([-0.5490359, 0.20413981, -1.5344921, -0.565571], np.float32)
    f = np.array([1.8269038, -0.8938041, 1.8445717, -0.08157359], np.float32)
    fwd = ref.conv2d(x.reshape(1, 1, 4, 1), f.reshape(1, 4, 1, 1))
    rev = ref.conv2d(x[::-1].reshape(1, 1, 4, 1), f[::-1].reshape(1, 4, 1, 1))
    assert bits(fwd, F32).ravel()[0] == 0xC07E11E3
    assert bits(rev, F32).ravel()[0] == 0xC07E11E4
    exact = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, f))
    assert round_frac(exact, F32) == float(np.float32(rev.ravel()[0]))
    small = ref.conv2d(np.array([1, 2 ** -24, 2 ** -24], np.float32).reshape(1, 1, 3, 1),
                       np.ones((1, 3, 1, 1), np.float32))
    assert bits(small, F32).ravel()[0] == 0x3F800000
