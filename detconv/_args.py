"""Argument normalization, written once: strides, dilations, padding, data_format and accumulation in every
form tf.nn accepts, for 1, 2 and 3 spatial dimensions. Used by detconv.ops (the TensorFlow ops),
detconv.kernels (raw kernels) and detconv.keras. No TensorFlow here: errors are ValueError / TypeError naming
the argument; detconv.ops re-raises them as its InvalidArgumentValue / InvalidArgumentType (see there).

detconv.reference keeps its own, narrower parsing and output-size arithmetic on purpose: it is the
independent check of everything above it.
"""

import numbers

# data_format spellings per number of spatial dimensions; the first is the default (channels last)
DATA_FORMATS = {1: ("NWC", "NCW"), 2: ("NHWC", "NCHW"), 3: ("NDHWC", "NCDHW")}
ACCUMULATIONS = (None, "float32", "float16")


def channels_last(data_format):
    return data_format.endswith("C")


def data_format(value, ndims, name="data_format"):
    """None -> the channels-last default; otherwise one of DATA_FORMATS[ndims]."""
    allowed = DATA_FORMATS[ndims]
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
    return value


def channels_last_any(value, name="data_format"):
    """For computations whose rank the tensor decides (the bias gradient): any 2-D or 3-D spelling, -> whether the
    channels come last."""
    if value not in DATA_FORMATS[2] + DATA_FORMATS[3]:
        raise ValueError(f"{name}: expected one of {DATA_FORMATS[2] + DATA_FORMATS[3]}, got {value!r}")
    return channels_last(value)


def _int_value(v, name):
    """One stride/dilation entry: ints of any kind (Python, NumPy) and integral floats, as tf.nn accepts them.

    A non-integral float, which tf.nn silently truncates, is a ValueError here; strings are a TypeError.
    """
    if isinstance(v, (str, bytes)):
        raise TypeError(f"{name}: expected integers, got the string {v!r}")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        if not float(v).is_integer():
            raise ValueError(f"{name}: expected integers, got {v!r} (tf.nn would truncate it; detconv does not)")
        return int(v)
    raise TypeError(f"{name}: expected an int or a list of ints, got {v!r}")


def _int_list(value, name):
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name}: expected an int or a list of ints, got the string {value!r}")
    if isinstance(value, numbers.Number) or (hasattr(value, "ndim") and getattr(value, "ndim") == 0):
        return [_int_value(value.item() if hasattr(value, "item") else value, name)]
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int or a list of ints, got {value!r}") from None
    return [_int_value(v, name) for v in items]


def spatial(value, name, data_format, ndims, default=1):
    """tf.nn's int / list of 1, N or N+2 forms (N+2: in data_format's order, batch and channel 1) -> N values."""
    if value is None:
        return [default] * ndims
    vals = _int_list(value, name)
    if len(vals) == 1:
        vals = vals * ndims
    elif len(vals) == ndims + 2:
        outer = (vals[0], vals[-1]) if channels_last(data_format) else (vals[0], vals[1])
        if outer != (1, 1):
            raise ValueError(f"{name}: the batch and channel entries must be 1, got {vals}")
        vals = vals[1:-1] if channels_last(data_format) else vals[2:]
    elif len(vals) != ndims:
        raise ValueError(f"{name}: expected an int or a list of 1, {ndims} or {ndims + 2} ints, got {vals}")
    if any(v < 1 for v in vals):
        raise ValueError(f"{name}: must be >= 1, got {vals}")
    return vals


def padding(value, data_format, ndims, exact_case=True):
    """-> (mode, explicit): mode "SAME", "VALID" or "EXPLICIT"; explicit [lo, hi] per spatial axis, flattened.

    Explicit pairs come as N pairs or N+2 (data_format's order, batch and channel unpadded). tf.nn's spelling
    is exact ("SAME", "VALID"); exact_case=False also takes other cases (the raw kernels' convenience).
    """
    if isinstance(value, (str, bytes)):
        mode = value.decode() if isinstance(value, bytes) else value
        if not exact_case:
            mode = mode.upper()
        if mode not in ("SAME", "VALID"):
            raise ValueError(f"padding: expected 'SAME', 'VALID' or a list of [before, after] pairs, got {value!r}")
        return mode, []
    try:
        pairs = [list(p) for p in value]
        if any(len(p) != 2 for p in pairs):
            raise ValueError
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for p in pairs for v in p):
            raise TypeError
        pairs = [[int(a), int(b)] for a, b in pairs]
    except (TypeError, ValueError):
        raise ValueError(f"padding: expected 'SAME', 'VALID' or a list of [before, after] int pairs, "
                         f"got {value!r}") from None
    if len(pairs) == ndims + 2:
        outer = [pairs[0], pairs[-1]] if channels_last(data_format) else pairs[:2]
        if any(p != [0, 0] for p in outer):
            raise ValueError(f"padding: the batch and channel dimensions cannot be padded, got {pairs}")
        pairs = pairs[1:-1] if channels_last(data_format) else pairs[2:]
    elif len(pairs) != ndims:
        raise ValueError(f"padding: expected {ndims} or {ndims + 2} [before, after] pairs, got {pairs}")
    flat = [v for p in pairs for v in p]
    if any(v < 0 for v in flat):
        raise ValueError(f"padding: explicit padding must be >= 0, got {pairs}")
    return "EXPLICIT", flat


class NotPlain(Exception):
    """plain_key's answer for a value that is not plain."""


def plain_key(v):
    """A strides / dilations / padding / data_format argument (or a shape) as a hashable key when it is plain: an
    int, a str or None, or a list or tuple of ints, or of lists or tuples of ints (lists as tuples: the
    functions above read both alike); raises NotPlain for anything else (NumPy ints, floats, bools, bytes,
    arrays...), which callers then normalize afresh on every call. Only exact types count: subclasses may
    compare, hash or convert differently. For the callers' caches of normalized arguments (detconv.ops,
    detconv.kernels)."""
    t = type(v)
    if t is int or t is str or v is None:
        return v
    if t is not tuple and t is not list:
        raise NotPlain
    out = []
    for e in v:
        te = type(e)
        if te is int:
            out.append(e)
        elif (te is tuple or te is list) and all(type(i) is int for i in e):
            out.append(tuple(e))
        else:
            raise NotPlain
    return tuple(out)


def cached(cache, key, make, limit=1024):
    """cache[key], made by make() the first time; past `limit` entries the cache starts over (clear() is atomic:
    no lock is needed between threads). make() raising stores nothing. The one shape of the callers' caches of
    normalized arguments, size constants and native problems (detconv.ops, detconv.kernels)."""
    value = cache.get(key)
    if value is None:
        value = make()
        if len(cache) >= limit:
            cache.clear()
        cache[key] = value
    return value


def pad_arg(mode, explicit):
    """The padding argument that padding() turns back into (mode, explicit), as N pairs."""
    if mode != "EXPLICIT":
        return mode
    return [[explicit[i], explicit[i + 1]] for i in range(0, len(explicit), 2)]


def accumulation(value, dtype_name):
    """Checks `accumulation` against the inputs' dtype name; returns "float16" (native binary16 accumulation) or
    "default" (float32 for 16-bit inputs, else the input type)."""
    if value not in ACCUMULATIONS:
        raise ValueError(f"accumulation: expected None, 'float32' or 'float16', got {value!r}")
    if value == "float16" and dtype_name != "float16":
        raise ValueError(f"accumulation: 'float16' needs float16 inputs, got {dtype_name}")
    if value == "float32" and dtype_name == "float64":
        raise ValueError("accumulation: float64 inputs accumulate in float64; 'float32' is not allowed")
    return "float16" if value == "float16" else "default"
