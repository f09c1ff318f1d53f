"""`import detconv` is enough to load what uses detconv, in any import order (fresh processes)."""

import subprocess
import sys

import pytest

from detconv._loader import child_python_kwargs


def run(src):
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300,
                       **child_python_kwargs(log_level="3"))
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("saved")
    run(f"""
import numpy as np, tensorflow as tf, keras, detconv, detconv.keras as dk
class M(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, 5, 5, 2], tf.float32)])
    def __call__(self, x):
        return detconv.conv2d(x, tf.ones([3, 3, 2, 4]) * 0.5, 1, "SAME")
tf.saved_model.save(M(), r"{d}/sm")
m = keras.Sequential([keras.Input((5, 5, 2)), dk.Conv2D(3, 3, padding="same")])
m.save(r"{d}/m.keras")
print("saved")
""")
    return d


@pytest.mark.parametrize("first", ["detconv", "tensorflow"])
def test_saved_model_loads_in_either_import_order(saved, first):
    second = "tensorflow" if first == "detconv" else "detconv"
    out = run(f"import {first}\nimport {second}\nimport tensorflow as tf\n"
              f"m = tf.saved_model.load(r'{saved}/sm')\nprint(tuple(m(tf.ones([1, 5, 5, 2])).shape))")
    assert out == "(1, 5, 5, 4)"


@pytest.mark.parametrize("first", ["detconv", "keras"])
def test_keras_file_loads_with_plain_import_detconv(saved, first):
    second = "keras" if first == "detconv" else "detconv"
    out = run(f"import {first}\nimport {second}\nimport keras\n"
              f"m = keras.saving.load_model(r'{saved}/m.keras')\nprint(type(m.layers[0]).__module__)")
    assert out == "detconv.keras"
