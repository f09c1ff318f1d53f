"""A host-memory stand-in for CuPy (tests/gpu/emu only): NumPy arrays that pass for CuPy arrays, so
detconv.kernels takes its GPU path into a _kernels module built with the CUDA emulator."""
import numpy as _np

uint8 = _np.uint8


class _Mem:
    def __init__(self, a):
        self.ptr = a.ctypes.data


class Device:
    id = 0

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class ndarray(_np.ndarray):
    @property
    def data(self):
        return _Mem(self)

    @property
    def device(self):
        return Device()


def _wrap(a):
    return _np.asarray(a).view(ndarray)


def asarray(a):
    return _wrap(_np.array(a, copy=True))


def asnumpy(a):
    return _np.array(_np.asarray(a).view(_np.ndarray), copy=True)


def ascontiguousarray(a):
    return _wrap(_np.ascontiguousarray(_np.asarray(a).view(_np.ndarray)))


def empty(shape, dtype=None):
    return _wrap(_np.empty(shape, dtype=dtype))


def concatenate(arrays, axis=0):
    return _wrap(_np.concatenate([_np.asarray(a).view(_np.ndarray) for a in arrays], axis=axis))


class _Stream:
    ptr = 0

    def __init__(self, non_blocking=False):
        pass

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 1


class cuda:
    runtime = _Runtime
    Stream = _Stream

    @staticmethod
    def get_current_stream():
        return _Stream()
