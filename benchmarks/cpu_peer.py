"""TensorFlow as the CPU benchmarks (cpu.py, keras_fit.py) measure it: imported through here, once."""

import os


def tensorflow(threads=None):
    """Imports TensorFlow with its oneDNN kernels on and `threads` intra-op threads (None: its default)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The peer is TensorFlow's oneDNN path, its fastest on CPUs, which its x86 builds enable by default only on
    # some CPUs (with AVX-512 VNNI, BF16 or AMX): on an AVX2-only AMD EPYC its own kernels ran instead (3-D
    # input gradient 943 ms against oneDNN's 154). TF_ENABLE_ONEDNN_OPTS=0 measures those.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    return tf
