"""Lazy loader of the compiled TensorFlow op library."""

import functools
import os

_LIB_NAME = "_detconv_ops.so"


def ops_library_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


@functools.lru_cache(maxsize=None)
def load_ops():
    """Loads detconv/_detconv_ops.so once and returns its generated op wrappers."""
    import tensorflow as tf

    path = ops_library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"detconv's op library {path} is missing: install the package with "
            "`pip install .` (or build in place with `python setup.py build_ext --inplace`)."
        )
    return tf.load_op_library(path)
