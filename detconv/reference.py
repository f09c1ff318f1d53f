"""Bit-exact NumPy reference for the detconv numerics contract (order version 1).

Every function here folds each output in exactly the order docs/contract.md
prescribes, with exactly rounded fused multiply-adds emulated in NumPy, so its
results are the bits every detconv kernel (CPU or CUDA) must produce. It needs
only numpy and ml_dtypes; it is slow compared with the kernels but vectorised
over outputs: the Python loops run over the fold index only.

Arrays are NHWC (input/output) and HWIO (filters). ``strides`` and
``dilations`` are an int or an (h, w) pair; ``padding`` is "SAME", "VALID" or
``((pt, pb), (pl, pr))``. Groups are inferred: G = C // Cg.

How the accumulator is emulated
-------------------------------
Accumulator values of format float32 or float16 are kept in float64 arrays
(every such value is exact there). ``fma_A(a, b, c)``:

* the product of two float32 (or float16) values is exact in float64;
* ``p + c`` is summed with TwoSum and rounded to odd at 53 bits;
* that is rounded once to nearest-even in A. Rounding to odd first and then
  to nearest in a format with at most 51 bits is the same as one correct
  rounding of the exact value (Boldo & Melquiond, "Emulation of FMA and
  correctly rounded sums: proved algorithms using rounding to odd").

A naive ``float32(float64(a) * b + c)`` rounds twice and is wrong for some
inputs. float64 fma uses Dekker's exact product, TwoSum and round-to-odd
(the same paper's emulated FMA); the few elements outside that algorithm's
proved range (huge, tiny or underflowing values) are computed exactly with
rationals.
"""

from fractions import Fraction
import numbers

import ml_dtypes
import numpy as np

__all__ = [
    "ORDER_VERSION",
    "conv2d",
    "conv2d_backprop_input",
    "conv2d_backprop_filter",
    "bias_grad",
    "conv1d",
    "conv1d_transpose",
    "depthwise_conv2d",
    "separable_conv2d",
    "conv3d",
    "conv3d_backprop_input",
    "conv3d_backprop_filter",
    "resolve_padding",
    "reduction_chunks",
    "fma",
]

from detconv import ORDER_VERSION  # noqa: E402 - its one home; the compiled modules are tested to agree

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SUPPORTED = (_F16, _F32, _F64, _BF16)

# Canonical quiet NaN bit patterns (sign bit 0) per output dtype.
_CANON_NAN = {
    _F16: (np.uint16, 0x7E00),
    _BF16: (np.uint16, 0x7FC0),
    _F32: (np.uint32, 0x7FC00000),
    _F64: (np.uint64, 0x7FF8000000000000),
}


# --------------------------------------------------------------- arithmetic

def _round_to_odd_sum(x, y):
    """x + y (float64 arrays) rounded to odd at 53 bits. Non-finite sums pass through."""
    t = np.add(x, y, out=np.empty(np.broadcast_shapes(np.shape(x), np.shape(y))))  # arrays, even 0-d
    bb = np.subtract(t, x, out=np.empty_like(t))
    e = np.subtract(t, bb, out=np.empty_like(t))
    np.subtract(x, e, out=e)
    np.subtract(y, bb, out=bb)
    e += bb  # TwoSum: x + y == t + e exactly when t is finite (in place: this runs once per fma)
    inexact = np.abs(e, out=bb) > 0  # e is NaN where t is not finite: passed through
    # Where inexact, the exact sum lies between t and its neighbour on e's side; the one
    # of the two nearer zero is t, or t one step down in magnitude where e points toward
    # zero, and the odd one of the two is that one with its last bit set.
    bits = t.view(np.int64)
    down = e.view(np.int64)
    np.bitwise_xor(down, bits, out=down)
    np.right_shift(down, 63, out=down)  # -1 where e and t differ in sign, else 0
    down += bits
    down |= 1
    return np.where(inexact, down, bits).view(np.float64)


def _fma32(a, b, c):
    """Exact binary32 fma on float32 values held in float64 arrays."""
    return _round_to_odd_sum(a * b, c).astype(np.float32).astype(np.float64)


def _fma16(a, b, c):
    """Exact binary16 fma on float16 values held in float64 arrays.

    numpy's float64 -> float16 cast rounds directly from the double's bits
    (nearest-even, subnormals included); tests/test_reference.py checks it.
    """
    return _round_to_odd_sum(a * b, c).astype(np.float16).astype(np.float64)


_C_SPLIT = 134217729.0  # 2**27 + 1, Veltkamp's splitting constant for 53 bits


def _split(a):
    g = _C_SPLIT * a
    hi = g - (g - a)
    return hi, a - hi


def _fma64(a, b, c):
    """Exact binary64 fma on float64 arrays."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.asarray(c, np.float64))
    with np.errstate(all="ignore"):
        # Dekker's exact product: uh + ul == a*b.
        uh = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
        # th + tl == c + uh exactly (TwoSum).
        th = c + uh
        bb = th - c
        tl = (c - (th - bb)) + (uh - bb)
        v = _round_to_odd_sum(tl, ul)
        z = th + v
        # Where the algorithm's hypotheses (no overflow in the split or the
        # sums, no underflow of the product's error term or the result) might
        # fail, use a slower exact route instead. A NaN or inf operand fails
        # the first test, a zero one the product's.
        big, small = 2.0 ** 995, 2.0 ** -900
        m = np.maximum(np.abs(a), np.abs(b))
        np.maximum(m, np.abs(c), out=m)
        auh, az = np.abs(uh), np.abs(z)
        safe = (m < big) & (auh < big) & (auh > small) & (az > small) & (az < big)
        if safe.all():
            return z
        at = np.nonzero(~safe)
        a, b, c, uh = a[at], b[at], c[at], uh[at]
        # a or b zero (all finite): a*b is an exact +-0, so a*b + c is exact,
        # zero signs included. a or b inf/nan: the product is exactly what an
        # fma would see. c inf with a, b finite: the result is c.
        ab_finite = np.isfinite(a) & np.isfinite(b)
        out = np.array(z, copy=True)
        out[at] = np.where(ab_finite & ~np.isfinite(c), c, uh + c)
    slow = np.nonzero(ab_finite & np.isfinite(c) & (a != 0) & (b != 0))[0]
    for k in slow:
        out[tuple(i[k] for i in at)] = _fma64_exact_scalar(float(a[k]), float(b[k]), float(c[k]))
    return out


def _fma64_exact_scalar(a, b, c):
    """fma for finite a, b, c with a*b != 0, via rationals."""
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        return 0.0  # exact cancellation of a nonzero product: +0 in round-to-nearest
    try:
        r = q.numerator / q.denominator  # CPython's int true division is correctly rounded
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")
    if r == 0.0:
        r = -0.0 if q < 0 else 0.0
    return r


class _Acc:
    """One accumulator format: float64 container arrays and exact operations."""

    def __init__(self, name):
        self.name = name
        if name == "float32":
            self.fma = _fma32
        elif name == "float16":
            self.fma = _fma16
        else:
            self.fma = _fma64

    def add(self, a, b):
        if self.name == "float64":
            return a + b  # numpy's binary64 add is the IEEE operation
        return self.fma(a, 1.0, b)  # a*1 is exact; the fma rounds a + b once

    def zeros(self, shape):
        return np.zeros(shape, np.float64)


def _canonicalize(out):
    """Writes every NaN as the dtype's canonical quiet NaN."""
    utype, pattern = _CANON_NAN[out.dtype]
    nan = np.isnan(out.astype(np.float32) if out.dtype == _BF16 else out)
    if nan.any():
        out.view(utype)[nan] = utype(pattern)
    return out


def _round_out(acc_vals, out_dtype):
    """The single rounding from the accumulator (held in float64) to the output dtype."""
    if out_dtype == _F64:
        out = np.array(acc_vals, dtype=np.float64)
    elif out_dtype == _F32:
        out = acc_vals.astype(np.float32)  # exact: the values are float32 already
    elif out_dtype == _F16:
        out = acc_vals.astype(np.float32).astype(np.float16)
    else:
        out = acc_vals.astype(np.float32).astype(_BF16)
    return _canonicalize(np.ascontiguousarray(out))


def _check_subnormals():
    """The reference relies on IEEE subnormals; refuse to run under FTZ/DAZ."""
    t64 = np.array([2.0 ** -1022, 2.0 ** -1074])
    t32 = np.array([2.0 ** -126, 2.0 ** -149], np.float32)
    ok = (t64[0] * 0.5 != 0) and (t64[1] + t64[1] != 0) and \
         (t32[0] * np.float32(0.5) != 0) and (t32[1] + t32[1] != 0)
    if not ok:
        raise RuntimeError("detconv.reference: the floating-point environment flushes "
                           "subnormals (FTZ/DAZ); results would not match the contract")


_ACC_NAMES = {"float32": _F32, "float64": _F64, "float16": _F16}


def fma(a, b, c, acc_dtype):
    """Elementwise IEEE fusedMultiplyAdd(a, b, c) in ``acc_dtype`` (float16/32/64).

    Operands are first converted to ``acc_dtype`` (exact when they already are
    values of that format); the result is ``a*b + c`` computed exactly and
    rounded once to nearest-even, returned as an ``acc_dtype`` array with NaNs
    canonical.
    """
    try:
        dt = np.dtype(acc_dtype)
    except TypeError:
        raise ValueError(f"acc_dtype: unsupported accumulator {acc_dtype!r}") from None
    if dt not in (_F16, _F32, _F64):
        raise ValueError(f"acc_dtype: must be float16, float32 or float64, got {dt}")
    _check_subnormals()
    name = {_F16: "float16", _F32: "float32", _F64: "float64"}[dt]
    with np.errstate(all="ignore"):
        conv = [np.asarray(v).astype(dt).astype(np.float64) for v in (a, b, c)]
        a64, b64, c64 = np.broadcast_arrays(*conv)
        shape = a64.shape
        r = _Acc(name).fma(a64.ravel(), b64.ravel(), c64.ravel())
    out = np.ascontiguousarray(np.asarray(r).astype(dt).reshape(shape))
    return _canonicalize(out)


# ------------------------------------------------------------- shape logic

def _pair(v, name):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = (int(v), int(v))
    try:
        seq = tuple(v)
    except TypeError:
        raise ValueError(f"{name}: expected an int or a pair of ints, got {v!r}") from None
    if len(seq) != 2 or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                for s in seq):
        raise ValueError(f"{name}: expected an int or a pair of ints, got {v!r}")
    sh, sw = int(seq[0]), int(seq[1])
    if sh < 1 or sw < 1:
        raise ValueError(f"{name}: must be >= 1, got {v!r}")
    return sh, sw


def _same_1d(n, k, s, d):
    out = -(-n // s)
    if out == 0:  # an empty input stays empty
        return 0, 0
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def resolve_padding(H, W, KH, KW, strides, dilations, padding):
    """Returns (pt, pb, pl, pr, OH, OW) per the contract's notation section."""
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    for name, v in (("H", H), ("W", W)):
        if not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"input: {name} must be a non-negative int, got {v!r}")
    for name, v in (("KH", KH), ("KW", KW)):
        if not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"filters: {name} must be a positive int, got {v!r}")
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            pt = pb = pl = pr = 0
        elif mode == "SAME":
            pt, pb = _same_1d(H, KH, sh, dh)
            pl, pr = _same_1d(W, KW, sw, dw)
        else:
            raise ValueError(f"padding: expected 'SAME', 'VALID' or ((pt, pb), (pl, pr)), got {padding!r}")
    else:
        try:
            (pt, pb), (pl, pr) = padding
        except (TypeError, ValueError):
            raise ValueError(f"padding: expected 'SAME', 'VALID' or ((pt, pb), (pl, pr)), "
                             f"got {padding!r}") from None
        vals = (pt, pb, pl, pr)
        if not all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in vals):
            raise ValueError(f"padding: explicit padding must be ints, got {padding!r}")
        pt, pb, pl, pr = (int(p) for p in vals)
        if min(vals) < 0:
            raise ValueError(f"padding: explicit padding must be >= 0, got {padding!r}")
    hh = H + pt + pb - (KH - 1) * dh - 1
    ww = W + pl + pr - (KW - 1) * dw - 1
    # a dilated filter larger than the padded input leaves no output (size 0, as tf.nn)
    return pt, pb, pl, pr, (hh // sh + 1 if hh >= 0 else 0), (ww // sw + 1 if ww >= 0 else 0)


def reduction_chunks(R, F):
    """(L, P) of the dw/db reduction: P chunks of length L over 0 <= r < R."""
    R, F = int(R), int(F)
    if F < 1:
        raise ValueError(f"F: must be >= 1, got {F}")
    if R <= 0:
        return 0, 0
    p0 = max(1, min(-(-(1 << 22) // F), -(-R // 64)))
    L = -(-R // p0)
    return L, -(-R // L)


class _Problem:
    """Validated shapes of one convolution (the contract's notation)."""

    def __init__(self, x_shape, f_shape, strides, padding, dilations, x_name, f_name):
        if len(x_shape) != 4:
            raise ValueError(f"{x_name}: expected a 4-D NHWC shape, got {tuple(x_shape)}")
        if len(f_shape) != 4:
            raise ValueError(f"{f_name}: expected a 4-D HWIO shape, got {tuple(f_shape)}")
        self.N, self.H, self.W, self.C = (int(v) for v in x_shape)
        self.KH, self.KW, self.Cg, self.Co = (int(v) for v in f_shape)
        if min(self.N, self.H, self.W, self.C) < 0:
            raise ValueError(f"{x_name}: negative dimension in {tuple(x_shape)}")
        if min(self.KH, self.KW, self.Cg) <= 0 or self.Co < 0:
            raise ValueError(f"{f_name}: spatial and in-channel dimensions must be positive, got {tuple(f_shape)}")
        if self.C % self.Cg != 0 or self.C == 0:
            raise ValueError(f"{f_name}: input channels ({self.C}) must be a positive multiple "
                             f"of the filter's in-channels ({self.Cg})")
        self.G = self.C // self.Cg
        if self.Co % self.G != 0:
            raise ValueError(f"{f_name}: out-channels ({self.Co}) must be divisible by the "
                             f"number of groups ({self.G})")
        self.Cog = self.Co // self.G
        self.sh, self.sw = _pair(strides, "strides")
        self.dh, self.dw = _pair(dilations, "dilations")
        (self.pt, self.pb, self.pl, self.pr, self.OH, self.OW) = resolve_padding(
            self.H, self.W, self.KH, self.KW, strides, dilations, padding)

    @property
    def y_shape(self):
        return (self.N, self.OH, self.OW, self.Co)

    def cidx(self, i):
        """Input channel that filter in-channel i meets, per output channel o."""
        return (np.arange(self.Co) // self.Cog) * self.Cg + i

    def padded(self, x64):
        """x with +0 padding, in the accumulator's container."""
        return np.pad(x64, ((0, 0), (self.pt, self.pb), (self.pl, self.pr), (0, 0)))


def _array(v, name):
    a = np.asarray(v)
    if a.dtype not in _SUPPORTED:
        raise ValueError(f"{name}: dtype must be float16, bfloat16, float32 or float64, got {a.dtype}")
    return a


def _same_dtype(dtype, **arrays):
    for name, a in arrays.items():
        if a.dtype != dtype:
            raise ValueError(f"{name}: dtype {a.dtype} differs from the other operands' {dtype}")


def _accumulator(dtype, accumulation):
    if accumulation is None:
        return "float64" if dtype == _F64 else "float32"
    if accumulation == "float32":
        if dtype == _F64:
            raise ValueError("accumulation: 'float32' is not available for float64 inputs "
                             "(they accumulate in float64)")
        return "float32"
    if accumulation == "float16":
        if dtype != _F16:
            raise ValueError(f"accumulation: 'float16' needs float16 inputs, got {dtype}")
        return "float16"
    raise ValueError(f"accumulation: expected None, 'float32' or 'float16', got {accumulation!r}")


def _to_acc(a):
    # Every supported input value is exact in float64 (and in the accumulator).
    return a.astype(np.float32).astype(np.float64) if a.dtype == _BF16 else a.astype(np.float64)


def _shape_arg(v, name):
    try:
        s = tuple(v)
    except TypeError:
        raise ValueError(f"{name}: expected 4 ints, got {v!r}") from None
    if len(s) != 4 or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in s):
        raise ValueError(f"{name}: expected 4 ints, got {v!r}")
    return tuple(int(d) for d in s)


# ------------------------------------------------------------ computations

def conv2d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None):
    """y[n, oh, ow, o] = round(add(fold_{kh, kw, i} fma(x, f, acc), bias))."""
    x = _array(x, "x")
    f = _array(f, "f")
    _same_dtype(x.dtype, f=f)
    if bias is not None:
        bias = _array(bias, "bias")
        _same_dtype(x.dtype, bias=bias)
    acc = _Acc(_accumulator(x.dtype, accumulation))
    pr = _Problem(x.shape, f.shape, strides, padding, dilations, "x", "f")
    if bias is not None and bias.shape != (pr.Co,):
        raise ValueError(f"bias: expected shape ({pr.Co},), got {bias.shape}")
    _check_subnormals()
    xp = pr.padded(_to_acc(x))
    f64 = _to_acc(f)
    cidx = [pr.cidx(i) for i in range(pr.Cg)]
    y = acc.zeros(pr.y_shape)
    with np.errstate(all="ignore"):
        for kh in range(pr.KH):
            h0 = kh * pr.dh
            rows = xp[:, h0:h0 + (pr.OH - 1) * pr.sh + 1:pr.sh]
            for kw in range(pr.KW):
                w0 = kw * pr.dw
                taps = rows[:, :, w0:w0 + (pr.OW - 1) * pr.sw + 1:pr.sw]
                for i in range(pr.Cg):
                    # padded taps read the +0 padding: they are fma with +0
                    y = acc.fma(taps[..., cidx[i]], f64[kh, kw, i], y)
        if bias is not None:
            y = acc.add(y, _to_acc(bias))
    return _round_out(y, x.dtype)


def conv2d_backprop_input(dy, f, input_shape, strides=1, padding="VALID", dilations=1, *,
                          accumulation=None):
    """dx[n, ih, iw, c] = round(fold_{kh, kw, o in group(c) ascending} fma(dy, f, acc))."""
    dy = _array(dy, "dy")
    f = _array(f, "f")
    _same_dtype(dy.dtype, f=f)
    acc = _Acc(_accumulator(dy.dtype, accumulation))
    input_shape = _shape_arg(input_shape, "input_shape")
    pr = _Problem(input_shape, f.shape, strides, padding, dilations, "input_shape", "f")
    if dy.shape != pr.y_shape:
        raise ValueError(f"dy: expected shape {pr.y_shape} for this input_shape and filter, got {dy.shape}")
    _check_subnormals()
    dy64 = _to_acc(dy)
    f64 = _to_acc(f)
    c = np.arange(pr.C)
    g, i_of_c = c // pr.Cg, c % pr.Cg
    dx = acc.zeros((pr.N, pr.H, pr.W, pr.C))

    def out_index(n_in, pad, k, d, s, n_out):
        t = np.arange(n_in) + pad - k * d
        ok = (t >= 0) & (t % s == 0) & (t // s < n_out)
        return np.where(ok, t // s, 0), ok

    with np.errstate(all="ignore"):
        for kh in range(pr.KH):
            oh, ok_h = out_index(pr.H, pr.pt, kh, pr.dh, pr.sh, pr.OH)
            if not ok_h.any():
                continue
            for kw in range(pr.KW):
                ow, ok_w = out_index(pr.W, pr.pl, kw, pr.dw, pr.sw, pr.OW)
                if not ok_w.any():
                    continue
                mask = (ok_h[:, None] & ok_w[None, :])[None, :, :, None]
                dyg = dy64[:, oh[:, None], ow[None, :], :]  # (N, H, W, Co)
                for j in range(pr.Cog):
                    o = g * pr.Cog + j
                    new = acc.fma(dyg[..., o], f64[kh, kw, i_of_c, o], dx)
                    dx = np.where(mask, new, dx)  # taps that reach no output are skipped
    return _round_out(dx, dy.dtype)


def conv2d_backprop_filter(x, dy, filter_shape, strides=1, padding="VALID", dilations=1, *,
                           accumulation=None):
    """dw[kh, kw, i, o]: chunked fold over r = (n*OH + oh)*OW + ow, chunks added in order."""
    x = _array(x, "x")
    dy = _array(dy, "dy")
    _same_dtype(x.dtype, dy=dy)
    acc = _Acc(_accumulator(x.dtype, accumulation))
    filter_shape = _shape_arg(filter_shape, "filter_shape")
    pr = _Problem(x.shape, filter_shape, strides, padding, dilations, "x", "filter_shape")
    if dy.shape != pr.y_shape:
        raise ValueError(f"dy: expected shape {pr.y_shape} for this x and filter_shape, got {dy.shape}")
    _check_subnormals()
    R = pr.N * pr.OH * pr.OW
    F = pr.KH * pr.KW * pr.Cg * pr.Co
    L, P = reduction_chunks(R, F) if F > 0 else (0, 0)  # F = 0: no output channel, no dw
    if P == 0:
        return _round_out(acc.zeros(filter_shape), x.dtype)
    xp = pr.padded(_to_acc(x))
    dyr = _to_acc(dy).reshape(R, pr.Co)
    kh_off = (np.arange(pr.KH) * pr.dh)[None, :, None]
    kw_off = (np.arange(pr.KW) * pr.dw)[None, None, :]
    cidx = np.stack([pr.cidx(i) for i in range(pr.Cg)])  # (Cg, Co)
    first = np.arange(P) * L
    part = acc.zeros((P,) + filter_shape)
    with np.errstate(all="ignore"):
        for j in range(L):
            # step j of every chunk at once: r = p*L + j
            r = first + j
            live = r < R
            rc = np.minimum(r, R - 1)
            ow = rc % pr.OW
            oh = (rc // pr.OW) % pr.OH
            n = rc // (pr.OW * pr.OH)
            rows = (oh * pr.sh)[:, None, None] + kh_off
            cols = (ow * pr.sw)[:, None, None] + kw_off
            taps = xp[n[:, None, None], rows, cols, :]  # (P, KH, KW, C), +0 in padding
            v = taps[..., cidx]  # (P, KH, KW, Cg, Co)
            d = dyr[rc][:, None, None, None, :]
            new = acc.fma(v, d, part)
            part = np.where(live[:, None, None, None, None], new, part)
        s = part[0]
        for p in range(1, P):
            s = acc.add(s, part[p])
    return _round_out(s, x.dtype)


def bias_grad(dy, *, accumulation=None):
    """db[o]: chunked sum of dy over (n, [od,] oh, ow) with F = Co, chunks added in order."""
    dy = _array(dy, "dy")
    if dy.ndim == 5:  # NDHWC: r = ((n*OD + od)*OH + oh)*OW + ow is the order of the rows of (N, OD*OH, OW, Co)
        dy = dy.reshape(dy.shape[0], dy.shape[1] * dy.shape[2], dy.shape[3], dy.shape[4])
    if dy.ndim != 4:
        raise ValueError(f"dy: expected a 4-D NHWC or 5-D NDHWC array, got shape {dy.shape}")
    acc = _Acc(_accumulator(dy.dtype, accumulation))
    Co = dy.shape[3]
    if Co == 0:
        return _round_out(acc.zeros((0,)), dy.dtype)
    _check_subnormals()
    R = dy.shape[0] * dy.shape[1] * dy.shape[2]
    L, P = reduction_chunks(R, Co)
    if P == 0:
        return _round_out(acc.zeros((Co,)), dy.dtype)
    dyr = _to_acc(dy).reshape(R, Co)
    first = np.arange(P) * L
    part = acc.zeros((P, Co))
    with np.errstate(all="ignore"):
        for j in range(L):
            r = first + j
            live = r < R
            new = acc.add(part, dyr[np.minimum(r, R - 1)])
            part = np.where(live[:, None], new, part)
        s = part[0]
        for p in range(1, P):
            s = acc.add(s, part[p])
    return _round_out(s, dy.dtype)


# ------------------------------------------------ compositions of the above
# The other tf.nn entry points are the convolutions above on reshaped operands; written here once so
# the tests compare each op with its own reference function.

def _pad_1d(padding):
    return padding if isinstance(padding, str) else ((0, 0), tuple(padding))


def conv1d(x, f, stride=1, padding="VALID", dilation=1, *, bias=None, accumulation=None):
    """tf.nn.conv1d (x [N, W, C], f [K, Cg, Co], padding a string or (before, after)): conv2d at height 1."""
    x, f = _array(x, "x"), _array(f, "f")
    return conv2d(x[:, None], f[None], (1, stride), _pad_1d(padding), (1, dilation), bias=bias,
                  accumulation=accumulation)[:, 0]


def conv1d_transpose(dy, f, output_shape, stride=1, padding="VALID", dilation=1, *, accumulation=None):
    """tf.nn.conv1d_transpose (dy [N, W, Co], f [K, C, Co], output_shape [N, W, C]): the conv1d input gradient."""
    dy, f = _array(dy, "dy"), _array(f, "f")
    n, w, c = (int(v) for v in output_shape)
    return conv2d_backprop_input(dy[:, None], f[None], (n, 1, w, c), (1, stride), _pad_1d(padding),
                                 (1, dilation), accumulation=accumulation)[:, 0]


def depthwise_conv2d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None):
    """tf.nn.depthwise_conv2d: f [KH, KW, C, M] is HWIO [KH, KW, 1, C*M], output channel c*M + m."""
    f = _array(f, "f")
    if f.ndim != 4:
        raise ValueError(f"f: expected [KH, KW, C, M], got shape {f.shape}")
    kh, kw, c, m = f.shape
    return conv2d(x, f.reshape(kh, kw, 1, c * m), strides, padding, dilations, bias=bias,
                  accumulation=accumulation)


def separable_conv2d(x, depthwise_filter, pointwise_filter, strides=1, padding="VALID", dilations=1, *,
                     bias=None, accumulation=None):
    """tf.nn.separable_conv2d: depthwise_conv2d rounded to x's dtype, then a 1x1 conv2d (bias fused there)."""
    y = depthwise_conv2d(x, depthwise_filter, strides, padding, dilations, accumulation=accumulation)
    return conv2d(y, pointwise_filter, 1, "VALID", 1, bias=bias, accumulation=accumulation)


# ------------------------------------------------------ three spatial dimensions
# Written out on their own (not through the 2-D functions), as an independent check of the kernels' 3-D
# paths: arrays NDHWC, filters DHWIO; strides/dilations an int or (d, h, w); padding "SAME", "VALID" or
# ((pf, pk), (pt, pb), (pl, pr)).

def _triple(v, name):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = (int(v),) * 3
    try:
        seq = tuple(int(e) for e in v)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected an int or 3 ints, got {v!r}") from None
    if len(seq) != 3 or min(seq) < 1:
        raise ValueError(f"{name}: expected an int or 3 ints >= 1, got {v!r}")
    return seq


class _Problem3:
    """Validated shapes of one 3-D convolution; per axis (lo, hi, out) from the contract's notation."""

    def __init__(self, x_shape, f_shape, strides, padding, dilations, x_name, f_name):
        if len(x_shape) != 5:
            raise ValueError(f"{x_name}: expected a 5-D NDHWC shape, got {tuple(x_shape)}")
        if len(f_shape) != 5:
            raise ValueError(f"{f_name}: expected a 5-D DHWIO shape, got {tuple(f_shape)}")
        self.N, self.D, self.H, self.W, self.C = (int(v) for v in x_shape)
        self.KD, self.KH, self.KW, self.Cg, self.Co = (int(v) for v in f_shape)
        if min(self.KD, self.KH, self.KW, self.Cg) <= 0 or self.Co < 0:
            raise ValueError(f"{f_name}: spatial and in-channel dimensions must be positive, got {tuple(f_shape)}")
        if self.C == 0 or self.C % self.Cg != 0:
            raise ValueError(f"{f_name}: input channels ({self.C}) must be a positive multiple of the filter's "
                             f"in-channels ({self.Cg})")
        self.G = self.C // self.Cg
        if self.Co % self.G != 0:
            raise ValueError(f"{f_name}: out-channels ({self.Co}) must be divisible by the number of groups")
        self.Cog = self.Co // self.G
        self.s = _triple(strides, "strides")
        self.d = _triple(dilations, "dilations")
        self.size = (self.D, self.H, self.W)
        self.k = (self.KD, self.KH, self.KW)
        if isinstance(padding, str):
            if padding.upper() not in ("SAME", "VALID"):
                raise ValueError(f"padding: expected 'SAME', 'VALID' or three (lo, hi) pairs, got {padding!r}")
            pads = [(_same_1d(n, k, s, d) if padding.upper() == "SAME" else (0, 0))
                    for n, k, s, d in zip(self.size, self.k, self.s, self.d)]
        else:
            pads = [tuple(int(v) for v in pair) for pair in padding]
            if len(pads) != 3 or any(len(p) != 2 or min(p) < 0 for p in pads):
                raise ValueError(f"padding: expected three (lo, hi) pairs >= 0, got {padding!r}")
        self.pads = pads
        self.out = tuple((n + lo + hi - (k - 1) * d - 1) // s + 1 if n + lo + hi >= (k - 1) * d + 1 else 0
                         for n, (lo, hi), k, s, d in zip(self.size, pads, self.k, self.s, self.d))
        self.OD, self.OH, self.OW = self.out

    @property
    def y_shape(self):
        return (self.N, self.OD, self.OH, self.OW, self.Co)

    def cidx(self, i):
        return (np.arange(self.Co) // self.Cog) * self.Cg + i

    def padded(self, x64):
        return np.pad(x64, ((0, 0), *self.pads, (0, 0)))


def conv3d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None):
    """y[n, od, oh, ow, o] = round(add(fold_{kd, kh, kw, i} fma(x, f, acc), bias))."""
    x, f = _array(x, "x"), _array(f, "f")
    _same_dtype(x.dtype, f=f)
    if bias is not None:
        bias = _array(bias, "bias")
        _same_dtype(x.dtype, bias=bias)
    acc = _Acc(_accumulator(x.dtype, accumulation))
    pr = _Problem3(x.shape, f.shape, strides, padding, dilations, "x", "f")
    if bias is not None and bias.shape != (pr.Co,):
        raise ValueError(f"bias: expected shape ({pr.Co},), got {bias.shape}")
    _check_subnormals()
    xp = pr.padded(_to_acc(x))
    f64 = _to_acc(f)
    (sd, sh, sw), (dd, dh, dw) = pr.s, pr.d
    y = acc.zeros(pr.y_shape)
    with np.errstate(all="ignore"):
        for kd in range(pr.KD):
            slab = xp[:, kd * dd:kd * dd + (pr.OD - 1) * sd + 1:sd]
            for kh in range(pr.KH):
                rows = slab[:, :, kh * dh:kh * dh + (pr.OH - 1) * sh + 1:sh]
                for kw in range(pr.KW):
                    taps = rows[:, :, :, kw * dw:kw * dw + (pr.OW - 1) * sw + 1:sw]
                    for i in range(pr.Cg):  # padded taps read +0: fma with +0
                        y = acc.fma(taps[..., pr.cidx(i)], f64[kd, kh, kw, i], y)
        if bias is not None:
            y = acc.add(y, _to_acc(bias))
    return _round_out(y, x.dtype)


def conv3d_backprop_input(dy, f, input_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None):
    """dx[n, id, ih, iw, c] = round(fold_{kd, kh, kw, o in group(c) ascending} fma(dy, f, acc)), taps that
    reach no output skipped."""
    dy, f = _array(dy, "dy"), _array(f, "f")
    _same_dtype(dy.dtype, f=f)
    acc = _Acc(_accumulator(dy.dtype, accumulation))
    pr = _Problem3(tuple(int(v) for v in input_shape), f.shape, strides, padding, dilations, "input_shape", "f")
    if dy.shape != pr.y_shape:
        raise ValueError(f"dy: expected shape {pr.y_shape} for this input_shape and filter, got {dy.shape}")
    _check_subnormals()
    dy64, f64 = _to_acc(dy), _to_acc(f)
    c = np.arange(pr.C)
    g, i_of_c = c // pr.Cg, c % pr.Cg
    dx = acc.zeros((pr.N, pr.D, pr.H, pr.W, pr.C))

    def out_index(axis, k):
        t = np.arange(pr.size[axis]) + pr.pads[axis][0] - k * pr.d[axis]
        ok = (t >= 0) & (t % pr.s[axis] == 0) & (t // pr.s[axis] < pr.out[axis])
        return np.where(ok, t // pr.s[axis], 0), ok

    with np.errstate(all="ignore"):
        for kd in range(pr.KD):
            od, ok_d = out_index(0, kd)
            for kh in range(pr.KH):
                oh, ok_h = out_index(1, kh)
                for kw in range(pr.KW):
                    ow, ok_w = out_index(2, kw)
                    mask = (ok_d[:, None, None] & ok_h[None, :, None] & ok_w[None, None, :])[None, ..., None]
                    if not mask.any():
                        continue
                    dyg = dy64[:, od[:, None, None], oh[None, :, None], ow[None, None, :], :]
                    for j in range(pr.Cog):
                        o = g * pr.Cog + j
                        dx = np.where(mask, acc.fma(dyg[..., o], f64[kd, kh, kw, i_of_c, o], dx), dx)
    return _round_out(dx, dy.dtype)


def conv3d_backprop_filter(x, dy, filter_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None):
    """dw[kd, kh, kw, i, o]: chunked fold over r = ((n*OD + od)*OH + oh)*OW + ow, chunks added in order."""
    x, dy = _array(x, "x"), _array(dy, "dy")
    _same_dtype(x.dtype, dy=dy)
    acc = _Acc(_accumulator(x.dtype, accumulation))
    filter_shape = tuple(int(v) for v in filter_shape)
    pr = _Problem3(x.shape, filter_shape, strides, padding, dilations, "x", "filter_shape")
    if dy.shape != pr.y_shape:
        raise ValueError(f"dy: expected shape {pr.y_shape} for this x and filter_shape, got {dy.shape}")
    _check_subnormals()
    R = pr.N * pr.OD * pr.OH * pr.OW
    F = int(np.prod(filter_shape))
    L, P = reduction_chunks(R, F) if F > 0 else (0, 0)
    if P == 0:
        return _round_out(acc.zeros(filter_shape), x.dtype)
    xp = pr.padded(_to_acc(x))
    dyr = _to_acc(dy).reshape(R, pr.Co)
    (sd, sh, sw), (dd, dh, dw) = pr.s, pr.d
    kd_off = (np.arange(pr.KD) * dd)[None, :, None, None]
    kh_off = (np.arange(pr.KH) * dh)[None, None, :, None]
    kw_off = (np.arange(pr.KW) * dw)[None, None, None, :]
    cidx = np.stack([pr.cidx(i) for i in range(pr.Cg)])  # (Cg, Co)
    first = np.arange(P) * L
    part = acc.zeros((P,) + filter_shape)
    with np.errstate(all="ignore"):
        for j in range(L):
            r = first + j
            live = r < R
            rc = np.minimum(r, R - 1)
            ow, t = rc % pr.OW, rc // pr.OW
            oh, t = t % pr.OH, t // pr.OH
            od, n = t % pr.OD, t // pr.OD
            e = (slice(None), None, None, None)
            taps = xp[n[e], (od * sd)[e] + kd_off, (oh * sh)[e] + kh_off, (ow * sw)[e] + kw_off, :]
            v = taps[..., cidx]  # (P, KD, KH, KW, Cg, Co), +0 in padding
            new = acc.fma(v, dyr[rc][:, None, None, None, None, :], part)
            part = np.where(live[:, None, None, None, None, None], new, part)
        s = part[0]
        for p in range(1, P):
            s = acc.add(s, part[p])
    return _round_out(s, x.dtype)
