"""Lazy loader of the compiled TensorFlow op library."""

import functools
import json
import os
import warnings

_LIB_NAME = "_detconv_ops.so"


def ops_library_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


@functools.lru_cache(maxsize=None)
def build_info():
    """What the compiled parts were built for: {"tensorflow", "cuda", "cuda_version", "cuda_archs"}
    (empty values for a build that did not record them)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build_info.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"tensorflow": "", "cuda": False, "cuda_version": "", "cuda_archs": []}


def _minor(version):
    return ".".join(str(version).split(".")[:2])


def _remedy(built):
    return ("reinstall detconv against this TensorFlow (from source: `pip install --no-build-isolation "
            f"--force-reinstall .`), or install TensorFlow {built or 'of the build'}")


def tf_version_mismatch(built, running):
    """The warning for an op library built for another TensorFlow minor, or None."""
    if not built or _minor(built) == _minor(running):
        return None
    return (f"detconv's op library was built for TensorFlow {built} but TensorFlow {running} is running; "
            f"TensorFlow has no stable C++ ABI across minors, so its ops may fail to load: {_remedy(built)}.")


@functools.lru_cache(maxsize=None)
def load_ops():
    """Loads detconv/_detconv_ops.so once and returns its generated op wrappers.

    The op library is compiled against one TensorFlow minor (TensorFlow has no
    stable C++ ABI): another minor gets one clear warning here and, if loading
    then fails, an ImportError that says which versions and what to do - never
    a bare undefined-symbol traceback.
    """
    import tensorflow as tf

    path = ops_library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"detconv's op library {path} is missing: install the package with "
            "`pip install .` (or build in place with `python setup.py build_ext --inplace`)."
        )
    built = build_info().get("tensorflow", "")
    mismatch = tf_version_mismatch(built, tf.__version__)
    if mismatch:
        warnings.warn(mismatch, RuntimeWarning, stacklevel=2)
    try:
        return tf.load_op_library(path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, OSError) as e:
        raise ImportError(f"detconv's op library {path} (built for TensorFlow {built or 'unknown'}) could not be "
                          f"loaded into TensorFlow {tf.__version__}: {_remedy(built)}. Loader said: {e}") from e


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
