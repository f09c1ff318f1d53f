"""detconv's raw kernels on NumPy, CuPy and PyTorch arrays - no TensorFlow needed.

The same bits from every library and device: each function runs the CPU
kernels on NumPy arrays (and PyTorch CPU tensors), and the CUDA kernels on
CuPy arrays and PyTorch CUDA tensors - on the array's device and that
library's current stream - and returns an array of the same kind. Results are
bit-identical to :mod:`detconv.reference` and to the TensorFlow ops (numerics
contract, order version ``ORDER_VERSION``).

Parameters mirror :mod:`detconv.reference`: arrays are NHWC (NDHWC for the
3-D functions) and filters HWIO (DHWIO); ``strides`` and ``dilations`` are an
int, one value per spatial axis, or tf.nn's form with batch and channel
entries; ``padding`` is "SAME", "VALID" or one ``(before, after)`` pair per
spatial axis (``((pt, pb), (pl, pr))``); groups are inferred (input channels =
groups * filter in-channels). The forms are detconv's one set
(``detconv._args``). Extra keywords:

* ``data_format="NHWC" | "NCHW"`` (3-D: ``"NDHWC" | "NCDHW"``): memory layout
  of the input- and output-shaped arrays (and of ``input_shape``); never
  changes a bit;
* ``threads``: CPU threads, the caller's among them (default: all hardware
  threads); the others are kept parked between calls, one set per process
  (a forked child starts its own), and never change a bit.

GPU work is asynchronous on the caller's current stream, like any CuPy or
PyTorch operation. Workspaces (filter and bias gradients) are allocated from
the calling library's memory pool.
"""

import ctypes
import numbers

import numpy as np

from detconv import _args

__all__ = [
    "ORDER_VERSION",
    "conv2d",
    "conv2d_backprop_input",
    "conv2d_backprop_filter",
    "bias_grad",
    "conv2d_transpose",
    "conv3d",
    "conv3d_backprop_input",
    "conv3d_backprop_filter",
    "conv3d_transpose",
    "conv1d",
    "conv1d_transpose",
    "depthwise_conv2d",
    "separable_conv2d",
    "cuda_available",
    "cpu_isa",
    "set_cpu_isa",
]

from detconv import ORDER_VERSION  # noqa: E402 - its one home; the compiled modules are tested to agree

_DTYPES = ("float16", "bfloat16", "float32", "float64")


# ------------------------------------------------------------ native module

_module = None  # detconv._kernels once imported: a per-call import statement costs microseconds


def _native():
    global _module
    if _module is None:
        try:
            from detconv import _kernels as k
        except ImportError as e:
            raise ImportError(
                "detconv's kernel module (detconv/_kernels*.so) is not built: install the package with "
                "`pip install .`, or build it with `cmake -S . -B build -DDETCONV_WITH_TF=OFF && "
                "cmake --build build`") from e
        _module = k
    return _module


def cuda_available():
    """True when the kernels were built with CUDA and a CUDA device is visible."""
    try:
        k = _native()
    except ImportError:
        return False
    return bool(k.gpu_built()) and k.cuda_device_count() > 0


def cpu_isa():
    """The CPU kernel path in use: 'scalar', 'avx2' or 'avx512'."""
    return _native().cpu_isa()


def set_cpu_isa(isa):
    """Forces the CPU kernel path ('auto', 'scalar', 'avx2', 'avx512') of this module.

    Every path gives the same bits; this exists for testing. Raises ValueError
    if the machine cannot run it or the build does not hold it (a from-source
    build holds scalar and the best path of the machine it was built on;
    ``DETCONV_CPU_ISAS=ALL`` builds every path).
    """
    if not isinstance(isa, str):
        raise TypeError(f"isa: expected a string, got {type(isa).__name__}")
    k = _native()
    if not k.cpu_isa_force(isa):
        raise ValueError(f"isa: the '{isa}' kernels cannot run here: this CPU lacks the ISA, or this build does not "
                         "hold them (DETCONV_CPU_ISAS)")


# ------------------------------------------------------------- array kinds
# The per-call costs below add up for tiny problems (batch-1 inference), hence the small caches: each maps
# something immutable (a type, a dtype) to what the general way computes from it alone.

# NumPy's dtype.name is computed in Python (microseconds). Keyed by the scalar type, which alone decides the
# name of the parameterless float types in _DTYPES; other names are not kept.
_NUMPY_DTYPE_NAMES = {}


def _numpy_dtype_name(dtype):
    name = _NUMPY_DTYPE_NAMES.get(dtype.type)
    if name is None:
        name = dtype.name
        if name in _DTYPES:
            _NUMPY_DTYPE_NAMES[dtype.type] = name
    return name


_TORCH_DTYPE_NAMES = {}  # torch.float32 -> "float32": torch dtypes are singletons


def _torch_dtype_name(dtype):
    name = _TORCH_DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).replace("torch.", "")
        if name in _DTYPES:
            _TORCH_DTYPE_NAMES[dtype] = name
    return name


_c_char_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def _numpy_ptr(a):
    """The data pointer of a C-contiguous NumPy array."""
    try:  # through the buffer protocol: a quarter of a.ctypes.data's time
        return _addressof(_c_char_from_buffer(a))
    except Exception:  # read-only or empty, or a dtype without a buffer format (bfloat16): the general way
        return a.ctypes.data


class _NumPy:
    """NumPy arrays (and anything np.asarray takes): CPU kernels."""

    gpu = False

    def __init__(self, torch_cpu=None):
        self.torch = torch_cpu  # set: PyTorch CPU tensors, results as tensors

    def prepare(self, a):
        if self.torch is not None:
            return a.detach().contiguous()
        if not a.dtype.isnative:  # kernels read native byte order
            a = a.astype(a.dtype.newbyteorder("="))
        return np.ascontiguousarray(a)

    def dtype_name(self, a):
        return _torch_dtype_name(a.dtype) if self.torch is not None else _numpy_dtype_name(a.dtype)

    def ptr(self, a):
        return a.data_ptr() if self.torch is not None else _numpy_ptr(a)

    def empty(self, shape, like):
        if self.torch is not None:
            return self.torch.empty(shape, dtype=like.dtype)
        return np.empty(shape, dtype=like.dtype)

    def device(self, like):
        return _NULL_CONTEXT


class _CuPy:
    gpu = True

    def __init__(self, cupy):
        self.cp = cupy

    def prepare(self, a):
        return self.cp.ascontiguousarray(a)

    @staticmethod
    def dtype_name(a):
        return _numpy_dtype_name(a.dtype)  # CuPy's dtypes are NumPy's

    @staticmethod
    def ptr(a):
        return a.data.ptr

    def empty(self, shape, like, dtype=None):
        return self.cp.empty(shape, dtype=like.dtype if dtype is None else dtype)

    def workspace(self, nbytes, like):
        return self.cp.empty((nbytes,), dtype=self.cp.uint8)

    def stream(self, like):
        return self.cp.cuda.get_current_stream().ptr

    @staticmethod
    def device_key(a):
        return ("cupy", a.device.id)

    def device(self, like):
        return like.device


class _TorchCuda:
    gpu = True

    def __init__(self, torch):
        self.torch = torch
        # The current stream's handle without building a torch.cuda.Stream (3 us a call): the function torch's
        # own compiled code uses; the public way where a torch lacks it.
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    @staticmethod
    def prepare(a):
        return a.detach().contiguous()

    @staticmethod
    def dtype_name(a):
        return _torch_dtype_name(a.dtype)

    @staticmethod
    def ptr(a):
        return a.data_ptr()

    def empty(self, shape, like):
        return self.torch.empty(shape, dtype=like.dtype, device=like.device)

    def workspace(self, nbytes, like):
        return self.torch.empty((nbytes,), dtype=self.torch.uint8, device=like.device)

    def stream(self, like):
        if self._raw_stream is not None:
            return self._raw_stream(like.device.index)
        return self.torch.cuda.current_stream(like.device).cuda_stream

    @staticmethod
    def device_key(a):
        return ("torch", a.device.index)

    def device(self, like):
        return self.torch.cuda.device(like.device)


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL_CONTEXT = _NullContext()  # stateless: one for all calls


def _library_of(a):
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        return "cupy"
    if mod == "torch":
        return "torch"
    return "numpy"


_BACKENDS = {}  # "numpy", "torch-cpu", "torch-cuda", "cupy" -> its array kind, made once (it holds only a module)


def _backend(name):
    be = _BACKENDS.get(name)
    if be is None:
        if name == "cupy":
            import cupy

            be = _CuPy(cupy)
        elif name.startswith("torch"):
            import torch

            be = _TorchCuda(torch) if name == "torch-cuda" else _NumPy(torch_cpu=torch)
        else:
            be = _NumPy()
        _BACKENDS[name] = be
    return be


def _arrays(**named):
    """Checks that the arrays come from one library (and one device) and share a
    supported dtype; returns (backend, {name: contiguous array}, dtype name)."""
    items = [(k, v) for k, v in named.items() if v is not None]
    libs = {k: _library_of(v) for k, v in items}
    kinds = set(libs.values())
    if len(kinds) > 1:
        desc = ", ".join(f"{k} is {lib}" for k, lib in libs.items())
        raise TypeError(f"{items[1][0]}: all arrays must come from one library ({desc})")
    kind = kinds.pop()
    if kind == "cupy":
        be = _backend("cupy")
    elif kind == "torch":
        import torch

        for k, v in items:
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{k}: expected a torch.Tensor, got {type(v).__name__}")
        cuda = {k: v.is_cuda for k, v in items}
        if len(set(cuda.values())) > 1:
            raise TypeError(f"{items[1][0]}: mixes CPU and CUDA tensors")
        be = _backend("torch-cuda" if items[0][1].is_cuda else "torch-cpu")
    else:
        be = _backend("numpy")
    out = {}
    for k, v in named.items():
        if v is None:
            out[k] = None
            continue
        if kind == "numpy":
            v = np.asarray(v)
        out[k] = be.prepare(v)
    if be.gpu:
        devs = {k: be.device_key(v) for k, v in out.items() if v is not None}
        if len(set(devs.values())) > 1:
            raise ValueError(f"{items[1][0]}: all arrays must be on one device, got {devs}")
    dtype = None
    for k, v in out.items():
        if v is None:
            continue
        name = be.dtype_name(v)
        if name not in _DTYPES:
            raise TypeError(f"{k}: dtype must be float16, bfloat16, float32 or float64, got {name}")
        if dtype is None:
            dtype = name
        elif name != dtype:
            raise TypeError(f"{k}: dtype {name} differs from the other operands' {dtype}")
    return be, out, dtype


# ------------------------------------------------------------ argument checks

def _int(v, name):
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{name}: expected an int, got {v!r}")
    return int(v)


# Finalized native Problems (read-only, pure functions of their arguments; with _problem's output shape) by a
# key that determines them: building one costs more than a tiny convolution. Failures raise and are never stored.
_PROBLEMS = {}
_PROBLEMS_MAX = 1024  # then the cache starts over (_args.cached)


def _cached_problem(key, make):
    return _args.cached(_PROBLEMS, key, make, _PROBLEMS_MAX)


def _problem(x_logical, f_shape, strides, padding, dilations, data_format, ndims, dtype, accumulation, x_name,
             f_name):
    """(a finalized native Problem, its output's shape in data_format). x_logical is (N, D, H, W, C); f_shape is
    the filter's ([D]HWIO) shape."""
    make = lambda: _make_problem(x_logical, f_shape, strides, padding, dilations, data_format, ndims,  # noqa: E731
                                 dtype, accumulation, x_name, f_name)
    # x_logical holds ints; the names only appear in errors, which are never cached.
    try:
        if type(data_format) is not str or (accumulation is not None and type(accumulation) is not str):
            raise _args.NotPlain
        plain = _args.plain_key
        key = (ndims, x_logical, plain(f_shape), plain(strides), plain(padding), plain(dilations),
               data_format, dtype, accumulation)
    except _args.NotPlain:
        return make()
    return _cached_problem(key, make)


def _make_problem(x_logical, f_shape, strides, padding, dilations, data_format, ndims, dtype, accumulation, x_name,
                  f_name):
    N, D, H, W, C = x_logical
    if len(f_shape) != ndims + 2:
        raise ValueError(f"{f_name}: expected a {ndims + 2}-D {'DHWIO' if ndims == 3 else 'HWIO'} shape, "
                         f"got {tuple(f_shape)}")
    fs = tuple(int(d) for d in f_shape)
    KD, (KH, KW, Cg, Co) = (fs[0] if ndims == 3 else 1), fs[-4:]
    if min(N, D, H, W, C) < 0:
        raise ValueError(f"{x_name}: negative dimension")
    if min(KD, KH, KW, Cg) <= 0 or Co < 0:
        raise ValueError(f"{f_name}: spatial and in-channel dimensions must be positive, got {fs}")
    if C == 0 or C % Cg != 0:
        raise ValueError(f"{f_name}: input channels ({C}) must be a positive multiple of the filter's "
                         f"in-channels ({Cg})")
    if Co % (C // Cg) != 0:
        raise ValueError(f"{f_name}: out-channels ({Co}) must be divisible by the number of groups ({C // Cg})")
    st = [1] * (3 - ndims) + _args.spatial(strides, "strides", data_format, ndims)
    dl = [1] * (3 - ndims) + _args.spatial(dilations, "dilations", data_format, ndims)
    mode, explicit = _args.padding(padding, data_format, ndims, exact_case=False)
    pads = [0] * (6 - len(explicit)) + explicit  # (pf, pk, pt, pb, pl, pr); none explicit: all 0
    accum = _args.accumulation(accumulation, dtype)
    layout = "NHWC" if _args.channels_last(data_format) else "NCHW"
    p = _native().Problem(N, H, W, C, KH, KW, Cg, Co, st[1], st[2], dl[1], dl[2], mode, *pads[2:], layout, dtype,
                          "" if accum == "default" else accum, D=D, KD=KD, sd=st[0], dd=dl[0], pf=pads[0], pk=pads[1])
    return p, _in_format(p.N, p.OD, p.OH, p.OW, p.Co, data_format, ndims)


def _logical(shape, data_format, name, ndims):
    """An input- or output-shaped array's shape in data_format -> (N, D, H, W, C) (D = 1 below three dims)."""
    shape = tuple(map(int, shape))
    if len(shape) != ndims + 2:
        raise ValueError(f"{name}: expected a {ndims + 2}-D {data_format} shape, got {shape}")
    n, c, sp = (shape[0], shape[-1], shape[1:-1]) if _args.channels_last(data_format) else \
        (shape[0], shape[1], shape[2:])
    sp = (1,) * (3 - ndims) + sp
    return (n, *sp, c)


def _in_format(n, d, h, w, c, data_format, ndims):
    sp = (d, h, w)[3 - ndims:]
    return (n, *sp, c) if _args.channels_last(data_format) else (n, c, *sp)


def _shape_arg(v, name, rank):
    try:
        s = tuple(v)
    except TypeError:
        raise TypeError(f"{name}: expected {rank} ints, got {v!r}") from None
    if len(s) != rank:
        raise ValueError(f"{name}: expected {rank} ints, got {v!r}")
    return tuple(_int(d, name) for d in s)


def _threads(threads):
    if threads is None:
        return 0
    t = _int(threads, "threads")
    if t < 1:
        raise ValueError(f"threads: must be >= 1, got {threads!r}")
    return min(t, 2**31 - 1)  # the native int; a call never starts more threads than it has units of work


# ------------------------------------------------------------- computations
# One implementation per computation for 1-D... 3-D problems (ndims); the public functions name the rank.

def _fprop(ndims, x, f, strides, padding, dilations, bias, accumulation, data_format, threads):
    data_format = _args.data_format(data_format, ndims)
    be, a, dtype = _arrays(x=x, f=f, bias=bias)
    x, f, bias = a["x"], a["f"], a["bias"]
    p, y_shape = _problem(_logical(x.shape, data_format, "x", ndims), tuple(f.shape), strides, padding, dilations,
                          data_format, ndims, dtype, accumulation, "x", "f")
    if bias is not None and tuple(bias.shape) != (p.Co,):
        raise ValueError(f"bias: expected shape ({p.Co},), got {tuple(bias.shape)}")
    nthreads = _threads(threads)
    k = _native()
    with be.device(x):
        y = be.empty(y_shape, x)
        bptr = be.ptr(bias) if bias is not None else 0
        if be.gpu:
            _need_gpu(k)
            k.fprop_gpu(p, be.ptr(x), be.ptr(f), bptr, be.ptr(y), be.stream(x))
        else:
            k.fprop_cpu(p, be.ptr(x), be.ptr(f), bptr, be.ptr(y), nthreads)
    return y


def _dgrad(ndims, dy, f, input_shape, strides, padding, dilations, accumulation, data_format, threads):
    data_format = _args.data_format(data_format, ndims)
    be, a, dtype = _arrays(dy=dy, f=f)
    dy, f = a["dy"], a["f"]
    x_logical = _logical(_shape_arg(input_shape, "input_shape", ndims + 2), data_format, "input_shape", ndims)
    p, want = _problem(x_logical, tuple(f.shape), strides, padding, dilations, data_format, ndims, dtype,
                       accumulation, "input_shape", "f")
    if tuple(dy.shape) != want:
        raise ValueError(f"dy: expected shape {want} for this input_shape and filter, got {tuple(dy.shape)}")
    nthreads = _threads(threads)
    k = _native()
    with be.device(dy):
        dx = be.empty(_in_format(*x_logical, data_format, ndims), dy)
        if be.gpu:
            _need_gpu(k)
            k.dgrad_gpu(p, be.ptr(dy), be.ptr(f), be.ptr(dx), be.stream(dy))
        else:
            k.dgrad_cpu(p, be.ptr(dy), be.ptr(f), be.ptr(dx), nthreads)
    return dx


def _wgrad(ndims, x, dy, filter_shape, strides, padding, dilations, accumulation, data_format, threads):
    data_format = _args.data_format(data_format, ndims)
    be, a, dtype = _arrays(x=x, dy=dy)
    x, dy = a["x"], a["dy"]
    filter_shape = _shape_arg(filter_shape, "filter_shape", ndims + 2)
    p, want = _problem(_logical(x.shape, data_format, "x", ndims), filter_shape, strides, padding, dilations,
                       data_format, ndims, dtype, accumulation, "x", "filter_shape")
    if tuple(dy.shape) != want:
        raise ValueError(f"dy: expected shape {want} for this x and filter_shape, got {tuple(dy.shape)}")
    nthreads = _threads(threads)
    k = _native()
    with be.device(x):
        dw = be.empty(filter_shape, x)
        if be.gpu:
            _need_gpu(k)
            nbytes = p.wgrad_gpu_workspace_bytes
            ws = be.workspace(nbytes, x) if nbytes else None
            k.wgrad_gpu(p, be.ptr(x), be.ptr(dy), be.ptr(dw), be.ptr(ws) if ws is not None else 0, be.stream(x))
        else:
            k.wgrad_cpu(p, be.ptr(x), be.ptr(dy), be.ptr(dw), nthreads)
    return dw


def conv2d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None,
           data_format="NHWC", threads=None):
    """y[n, oh, ow, o] = round(add(fold_{kh, kw, i} fma(x, f, acc), bias)), same kind as x."""
    return _fprop(2, x, f, strides, padding, dilations, bias, accumulation, data_format, threads)


def conv2d_backprop_input(dy, f, input_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                          data_format="NHWC", threads=None):
    """dx[n, ih, iw, c] = round(fold_{kh, kw, o in group(c)} fma(dy, f, acc)); input_shape in data_format."""
    return _dgrad(2, dy, f, input_shape, strides, padding, dilations, accumulation, data_format, threads)


def conv2d_backprop_filter(x, dy, filter_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                           data_format="NHWC", threads=None):
    """dw[kh, kw, i, o]: the contract's chunked fold over (n, oh, ow); filter_shape is HWIO."""
    return _wgrad(2, x, dy, filter_shape, strides, padding, dilations, accumulation, data_format, threads)


def conv3d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None,
           data_format="NDHWC", threads=None):
    """y[n, od, oh, ow, o] = round(add(fold_{kd, kh, kw, i} fma(x, f, acc), bias)); filters DHWIO."""
    return _fprop(3, x, f, strides, padding, dilations, bias, accumulation, data_format, threads)


def conv3d_backprop_input(dy, f, input_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                          data_format="NDHWC", threads=None):
    """dx[n, id, ih, iw, c] = round(fold_{kd, kh, kw, o in group(c)} fma(dy, f, acc))."""
    return _dgrad(3, dy, f, input_shape, strides, padding, dilations, accumulation, data_format, threads)


def conv3d_backprop_filter(x, dy, filter_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                           data_format="NDHWC", threads=None):
    """dw[kd, kh, kw, i, o]: the contract's chunked fold over (n, od, oh, ow); filter_shape is DHWIO."""
    return _wgrad(3, x, dy, filter_shape, strides, padding, dilations, accumulation, data_format, threads)


def conv2d_transpose(dy, f, output_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                     data_format="NHWC", threads=None):
    """tf.nn.conv2d_transpose: the input gradient (f is [KH, KW, out, in], as TensorFlow's)."""
    return conv2d_backprop_input(dy, f, output_shape, strides, padding, dilations, accumulation=accumulation,
                                 data_format=data_format, threads=threads)


def conv3d_transpose(dy, f, output_shape, strides=1, padding="VALID", dilations=1, *, accumulation=None,
                     data_format="NDHWC", threads=None):
    """tf.nn.conv3d_transpose: the 3-D input gradient."""
    return conv3d_backprop_input(dy, f, output_shape, strides, padding, dilations, accumulation=accumulation,
                                 data_format=data_format, threads=threads)


# 1-D and the composite convolutions: the 2-D computations on reshaped views (docs/contract.md, "Composite
# operations"); [:, None] and .reshape work alike on NumPy, CuPy and PyTorch arrays.
def _height1(data_format):
    """(2-D data_format, axis of the inserted height) for a 1-D data_format."""
    data_format = _args.data_format(data_format, 1)
    return ("NHWC", 1) if _args.channels_last(data_format) else ("NCHW", 2)


def _pad_1d(padding):
    return padding if isinstance(padding, str) else [[0, 0], list(padding)]


def _at_height1(a, axis):
    return a[:, None] if axis == 1 else a[:, :, None]


def conv1d(x, f, stride=1, padding="VALID", dilation=1, *, bias=None, accumulation=None, data_format="NWC",
           threads=None):
    """tf.nn.conv1d (x [N, W, C], f [K, Cg, Co], padding a string or (before, after)): conv2d at height 1."""
    fmt, axis = _height1(data_format)
    y = conv2d(_at_height1(x, axis), f[None], (1, stride), _pad_1d(padding), (1, dilation), bias=bias,
               accumulation=accumulation, data_format=fmt, threads=threads)
    return y[:, 0] if axis == 1 else y[:, :, 0]


def conv1d_transpose(dy, f, output_shape, stride=1, padding="VALID", dilation=1, *, accumulation=None,
                     data_format="NWC", threads=None):
    """tf.nn.conv1d_transpose (f [K, C, Co], output_shape [N, W, C] in data_format): the conv1d input gradient."""
    fmt, axis = _height1(data_format)
    shape = [int(v) for v in output_shape]
    shape.insert(axis, 1)
    dx = conv2d_backprop_input(_at_height1(dy, axis), f[None], shape, (1, stride), _pad_1d(padding), (1, dilation),
                               accumulation=accumulation, data_format=fmt, threads=threads)
    return dx[:, 0] if axis == 1 else dx[:, :, 0]


def depthwise_conv2d(x, f, strides=1, padding="VALID", dilations=1, *, bias=None, accumulation=None,
                     data_format="NHWC", threads=None):
    """tf.nn.depthwise_conv2d: f [KH, KW, C, M] as HWIO [KH, KW, 1, C*M] (output channel c*M + m)."""
    if len(f.shape) != 4:
        raise ValueError(f"f: expected [KH, KW, C, M], got shape {tuple(f.shape)}")
    kh, kw, c, m = (int(d) for d in f.shape)
    return conv2d(x, f.reshape(kh, kw, 1, c * m), strides, padding, dilations, bias=bias, accumulation=accumulation,
                  data_format=data_format, threads=threads)


def separable_conv2d(x, depthwise_filter, pointwise_filter, strides=1, padding="VALID", dilations=1, *, bias=None,
                     accumulation=None, data_format="NHWC", threads=None):
    """tf.nn.separable_conv2d: depthwise_conv2d rounded to x's dtype, then a 1x1 conv2d with the bias fused."""
    mid = depthwise_conv2d(x, depthwise_filter, strides, padding, dilations, accumulation=accumulation,
                           data_format=data_format, threads=threads)
    return conv2d(mid, pointwise_filter, 1, "VALID", 1, bias=bias, accumulation=accumulation,
                  data_format=data_format, threads=threads)


def bias_grad(dy, *, accumulation=None, data_format="NHWC", threads=None):
    """db[o]: the contract's chunked sum of dy over n and its spatial axes (rank 4 or 5; data_format says where
    the channels are: NHWC/NDHWC last, NCHW/NCDHW first)."""
    be, a, dtype = _arrays(dy=dy)
    dy = a["dy"]
    ndims = len(dy.shape) - 2
    if ndims not in (2, 3):
        raise ValueError(f"dy: expected a 4-D or 5-D array, got shape {tuple(dy.shape)}")
    last = _args.channels_last_any("NHWC" if data_format is None else data_format)
    data_format = _args.DATA_FORMATS[ndims][0 if last else 1]  # the array's rank decides the spelling
    accum = _args.accumulation(accumulation, dtype)
    N, OD, OH, OW, Co = _logical(dy.shape, data_format, "dy", ndims)
    nthreads = _threads(threads)
    k = _native()
    with be.device(dy):
        db = be.empty((Co,), dy)
        if Co == 0:
            return db
        # A 1x1 VALID problem whose output is dy: R = N*OD*OH*OW and F = Co as the contract says.
        layout = "NHWC" if _args.channels_last(data_format) else "NCHW"
        p = _cached_problem(("bias_grad", N, OD, OH, OW, Co, layout, dtype, accum), lambda: k.Problem(
            N, OH, OW, Co, 1, 1, Co, Co, 1, 1, 1, 1, "VALID", 0, 0, 0, 0, layout, dtype,
            "" if accum == "default" else accum, D=OD))
        if be.gpu:
            _need_gpu(k)
            nbytes = p.bgrad_gpu_workspace_bytes
            ws = be.workspace(nbytes, dy) if nbytes else None
            k.bgrad_gpu(p, be.ptr(dy), be.ptr(db), be.ptr(ws) if ws is not None else 0, be.stream(dy))
        else:
            k.bgrad_cpu(p, be.ptr(dy), be.ptr(db), nthreads)
    return db


def _need_gpu(k):
    if not k.gpu_built():
        raise RuntimeError("detconv.kernels: got GPU arrays, but detconv was built without CUDA "
                           "(rebuild with nvcc on PATH, or DETCONV_CUDA=ON)")
