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


def child_python_kwargs(log_level="2"):
    """subprocess keyword arguments for a child Python that imports this same detconv.

    The package's parent goes first on PYTHONPATH and is the child's cwd: `python -c`
    and `python -m` put cwd first on sys.path, so a source checkout without the built
    library must not shadow the installed package.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", log_level)
    return {"env": env, "cwd": root}
