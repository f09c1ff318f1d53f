"""detconv.keras: drop-in layers, serialization, mixed precision, convert(), reproducible training."""

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import keras

import detconv
import detconv.keras as dk
from detconv._loader import child_python_kwargs
from conftest import assert_bits_equal

STOCK = {
    dk.Conv1D: keras.layers.Conv1D,
    dk.Conv2D: keras.layers.Conv2D,
    dk.DepthwiseConv2D: keras.layers.DepthwiseConv2D,
    dk.Conv2DTranspose: keras.layers.Conv2DTranspose,
    dk.Conv1DTranspose: keras.layers.Conv1DTranspose,
    dk.DepthwiseConv1D: keras.layers.DepthwiseConv1D,
    dk.SeparableConv1D: keras.layers.SeparableConv1D,
    dk.SeparableConv2D: keras.layers.SeparableConv2D,
    dk.Conv3D: keras.layers.Conv3D,
    dk.Conv3DTranspose: keras.layers.Conv3DTranspose,
}
RANK1 = (dk.Conv1D, dk.Conv1DTranspose, dk.DepthwiseConv1D, dk.SeparableConv1D)
RANK3 = (dk.Conv3D, dk.Conv3DTranspose)
TRANSPOSES = (dk.Conv1DTranspose, dk.Conv2DTranspose, dk.Conv3DTranspose)
ACTIVATIONS = (None, "relu", "tanh")


def _child_kwargs():
    """A child Python that imports this same detconv (see detconv._loader.child_python_kwargs)."""
    return child_python_kwargs(log_level="3")


@pytest.fixture
def policy():
    """Restores the global dtype policy after a test changes it."""
    old = keras.mixed_precision.global_policy()
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy(old)


# ------------------------------------------------------------------ random configs
def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _stride_dilation(rng, rank, both=False):
    strides = tuple(int(v) for v in rng.integers(1, 4, rank))
    dil = tuple(int(v) for v in rng.integers(1, 4, rank))
    if both:
        return strides, dil
    return (strides, (1,) * rank) if rng.random() < 0.6 else ((1,) * rank, dil)


def random_case(cls, rng):
    """(constructor kwargs, channels-last input shape) for one random layer config."""
    rank = 1 if cls in RANK1 else 3 if cls in RANK3 else 2
    kernel = tuple(int(v) for v in rng.integers(1, 4, rank))
    common = dict(kernel_size=kernel, use_bias=bool(rng.random() < 0.7), activation=_pick(rng, ACTIVATIONS),
                  data_format=_pick(rng, ("channels_last", "channels_first")))
    if cls in (dk.Conv1D, dk.Conv2D, dk.Conv3D):
        strides, dil = _stride_dilation(rng, rank)
        groups = int(_pick(rng, (1, 1, 2, 3)))
        channels = groups * int(rng.integers(1, 4))
        paddings = ("valid", "same", "causal") if rank == 1 else ("valid", "same")
        kw = dict(common, filters=groups * int(rng.integers(1, 4)), strides=strides, dilation_rate=dil,
                  groups=groups, padding=_pick(rng, paddings))
    elif cls in (dk.DepthwiseConv2D, dk.DepthwiseConv1D):
        strides, dil = _stride_dilation(rng, rank, both=rng.random() < 0.2)
        channels = int(rng.integers(1, 6))
        kw = dict(common, depth_multiplier=int(rng.integers(1, 4)), strides=strides, dilation_rate=dil,
                  padding=_pick(rng, ("valid", "same")))
    elif cls in (dk.SeparableConv1D, dk.SeparableConv2D):
        strides, dil = _stride_dilation(rng, rank)
        channels = int(rng.integers(1, 5))
        kw = dict(common, filters=int(rng.integers(1, 6)), depth_multiplier=int(rng.integers(1, 3)),
                  strides=strides, dilation_rate=dil, padding=_pick(rng, ("valid", "same")))
    else:
        strides, dil = _stride_dilation(rng, rank)
        channels = int(rng.integers(1, 6))
        padding = _pick(rng, ("valid", "same"))
        kw = dict(common, filters=int(rng.integers(1, 6)), strides=strides, dilation_rate=dil, padding=padding)
        if rng.random() < 0.5:
            kw["output_padding"] = tuple(int(rng.integers(0, s)) for s in strides)
    spatial = []
    for i in range(rank):
        reach = (kernel[i] - 1) * kw["dilation_rate"][i] + 1
        spatial.append(int(rng.integers(reach, reach + (3 if rank == 3 else 6))))
    if cls in TRANSPOSES and kw.get("output_padding") is not None and kw["padding"] == "same":
        # Keep configs TensorFlow itself accepts: SAME needs ceil(out / s) == in.
        for i in range(rank):
            s, k = kw["strides"][i], (kernel[i] - 1) * kw["dilation_rate"][i] + 1
            out = (spatial[i] - 1) * s + k % 2 + kw["output_padding"][i]
            if -(-out // s) != spatial[i]:
                kw["output_padding"] = None
                break
    batch = int(rng.integers(1, 4))
    return kw, (batch, *spatial, channels)


def _randomize(layer, rng):
    """Random non-integer weights (positive where they are variances, e.g. BatchNormalization's)."""
    layer.set_weights([
        (rng.uniform(0.5, 1.5, w.shape) if v.path.endswith("variance") else rng.standard_normal(w.shape) * 0.5)
        .astype(w.dtype) for v, w in zip(layer.weights, layer.get_weights())])


def _to_first(a):
    return np.moveaxis(a, -1, 1)


def _to_last(a):
    return np.moveaxis(a, 1, -1)


def _stock_output(cls, kw, weights, x_last):
    """Stock Keras output (channels_last: its CPU kernels lack NCHW), XLA where TF's CPU kernels refuse."""
    stock = STOCK[cls](**dict(kw, data_format="channels_last"))
    stock.build(x_last.shape)
    stock.set_weights(weights)
    try:
        return stock(x_last).numpy()
    except tf.errors.InvalidArgumentError:
        # TF's CPU kernels refuse dilated transposes and unequal depthwise strides; XLA's do not.
        return tf.function(stock, jit_compile=True)(x_last).numpy()


def _op_output(layer, x, cast=None, accumulation=None):
    """The layer's output recomputed with the public ops on its weights (cast to `cast` first), by another
    route where one exists (1-D depthwise as a grouped conv1d, separable as its two convolutions)."""
    kw = layer.get_config()
    separable = isinstance(layer, (dk.SeparableConv1D, dk.SeparableConv2D))
    kernels = [layer.depthwise_kernel, layer.pointwise_kernel] if separable else [layer.kernel]
    kernels = [tf.convert_to_tensor(k.value) for k in kernels]
    bias = tf.convert_to_tensor(layer.bias.value) if layer.use_bias else None
    if cast is not None:
        x = tf.cast(x, cast)
        kernels = [tf.cast(k, cast) for k in kernels]
        bias = None if bias is None else tf.cast(bias, cast)
    kernel = kernels[0]
    acc = dict(accumulation=accumulation)
    first = kw["data_format"] == "channels_first"
    fmt1, fmt2 = ("NCW", "NCHW") if first else ("NWC", "NHWC")
    strides, dil, padding = list(layer.strides), list(layer.dilation_rate), kw["padding"].upper()
    if isinstance(layer, dk.Conv1D):
        if kw["padding"] == "causal":
            # Keras' own causal recipe: pad the input, then VALID.
            pad = [[0, 0], [0, 0], [(layer.kernel_size[0] - 1) * layer.dilation_rate[0], 0]]
            x = tf.pad(x, pad if first else [pad[0], pad[2], pad[1]])
            padding = "VALID"
        y = detconv.conv1d(x, kernel, strides, padding, fmt1, dil, bias=bias, **acc)
    elif isinstance(layer, dk.Conv2D):
        y = detconv.conv2d(x, kernel, strides, padding, fmt2, dil, bias=bias, **acc)
    elif isinstance(layer, dk.Conv3D):  # through tf.nn.convolution's entry point
        y = detconv.convolution(x, kernel, strides, padding, "NCDHW" if first else "NDHWC", dil, bias=bias, **acc)
    elif isinstance(layer, dk.DepthwiseConv2D):
        y = detconv.depthwise_conv2d(x, kernel, strides, padding, fmt2, dil, bias=bias, **acc)
    elif isinstance(layer, dk.DepthwiseConv1D):  # a conv1d with one group per channel
        k, c, m = kernel.shape
        y = detconv.conv1d(x, tf.reshape(kernel, [k, 1, c * m]), strides, padding, fmt1, dil, bias=bias, **acc)
    elif separable:
        dwk, pwk = kernels
        if isinstance(layer, dk.SeparableConv1D):
            k, c, m = dwk.shape
            mid = detconv.conv1d(x, tf.reshape(dwk, [k, 1, c * m]), strides, padding, fmt1, dil, **acc)
            y = detconv.conv1d(mid, pwk, 1, "VALID", fmt1, bias=bias, **acc)
        else:
            mid = detconv.depthwise_conv2d(x, dwk, strides, padding, fmt2, dil, **acc)
            y = detconv.conv2d(mid, pwk, 1, "VALID", fmt2, bias=bias, **acc)
    else:
        out = list(layer.compute_output_shape(x.shape))
        if isinstance(layer, dk.Conv1DTranspose):
            y = detconv.conv1d_transpose(x, kernel, out, strides, padding, fmt1, dil, **acc)
        elif isinstance(layer, dk.Conv3DTranspose):
            y = detconv.conv3d_transpose(x, kernel, out, strides, padding, "NCDHW" if first else "NDHWC", dil, **acc)
        else:
            y = detconv.conv2d_transpose(x, kernel, out, strides, padding, fmt2, dil, **acc)
        if bias is not None:
            rank = len(layer.kernel_size)
            y = y + tf.reshape(bias, (1, -1) + (1,) * rank if first else (1,) * (rank + 1) + (-1,))
    if layer.activation is not None:
        y = layer.activation(y)
    return np.asarray(y)


# Fixed corner cases, checked before the random ones.
EDGE_CASES = {
    dk.Conv1D: [(dict(filters=4, kernel_size=3, strides=2, padding="causal", groups=2), (2, 9, 4)),
                (dict(filters=3, kernel_size=2, dilation_rate=3, padding="causal", data_format="channels_first"),
                 (1, 8, 2))],
    dk.Conv2D: [(dict(filters=6, kernel_size=(3, 2), strides=(2, 1), padding="same", groups=3,
                      data_format="channels_first", activation="relu"), (2, 7, 6, 6)),
                (dict(filters=8, kernel_size=1, use_bias=False), (1, 4, 4, 5))],
    dk.DepthwiseConv2D: [(dict(kernel_size=3, strides=2, dilation_rate=2, padding="same", depth_multiplier=2),
                          (2, 9, 8, 3)),
                         (dict(kernel_size=(2, 3), strides=(1, 2), data_format="channels_first"), (1, 6, 7, 4))],
    dk.Conv2DTranspose: [(dict(filters=3, kernel_size=3, strides=2, padding="same", output_padding=0),
                          (2, 4, 5, 2)),
                         (dict(filters=2, kernel_size=(3, 2), dilation_rate=2, padding="valid",
                               data_format="channels_first"), (1, 5, 4, 3))],
    dk.Conv1DTranspose: [(dict(filters=3, kernel_size=4, strides=3, padding="same"), (2, 5, 2)),
                         (dict(filters=2, kernel_size=3, dilation_rate=2, data_format="channels_first"), (1, 6, 3))],
    dk.DepthwiseConv1D: [(dict(kernel_size=3, strides=2, padding="same", depth_multiplier=3), (2, 9, 2)),
                         (dict(kernel_size=2, dilation_rate=2, data_format="channels_first"), (1, 7, 4))],
    dk.SeparableConv1D: [(dict(filters=5, kernel_size=3, strides=2, padding="same", depth_multiplier=2), (2, 9, 3))],
    dk.Conv3D: [(dict(filters=4, kernel_size=(2, 3, 3), strides=(1, 2, 2), padding="same", groups=2), (2, 4, 7, 6, 4)),
                (dict(filters=3, kernel_size=2, dilation_rate=(2, 1, 2), data_format="channels_first"), (1, 5, 4, 6, 2))],
    dk.Conv3DTranspose: [(dict(filters=3, kernel_size=3, strides=2, padding="same"), (1, 3, 4, 3, 2)),
                         (dict(filters=2, kernel_size=(2, 3, 2), strides=(1, 2, 1), output_padding=(0, 1, 0),
                               data_format="channels_first"), (2, 3, 3, 4, 3))],
    dk.SeparableConv2D: [(dict(filters=4, kernel_size=(3, 2), strides=(2, 1), padding="same", depth_multiplier=2,
                               data_format="channels_first", activation="relu"), (2, 7, 6, 3)),
                         (dict(filters=6, kernel_size=3, dilation_rate=2, use_bias=False), (1, 9, 8, 2))],
}


# ------------------------------------------------------------------ layers
@pytest.mark.parametrize("cls", list(STOCK), ids=lambda c: c.__name__)
def test_layer_matches_stock_and_op(cls, rng):
    cases = [(dict(kw), shape) for kw, shape in EDGE_CASES[cls]] + [random_case(cls, rng) for _ in range(12)]
    for kw, shape in cases:
        kw.setdefault("data_format", "channels_last")
        x_last = (rng.standard_normal(shape) * 0.7).astype(np.float32)
        first = kw["data_format"] == "channels_first"
        x = _to_first(x_last) if first else x_last
        layer = cls(**kw)
        layer.build(x.shape)
        _randomize(layer, rng)
        y = layer(x).numpy()
        assert y.shape == tuple(layer.compute_output_shape(x.shape)), kw
        assert_bits_equal(y, _op_output(layer, x), f"{cls.__name__} {kw}")
        want = _stock_output(cls, kw, layer.get_weights(), x_last)
        got = _to_last(y) if first else y
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()),
                                   err_msg=f"{cls.__name__} {kw}")


@pytest.mark.parametrize("cls", list(STOCK), ids=lambda c: c.__name__)
def test_same_constructor_weights_and_transfer(cls, rng):
    ours = inspect.signature(cls.__init__).parameters
    theirs = inspect.signature(STOCK[cls].__init__).parameters
    assert list(ours) == [p for p in theirs if p != "kwargs"] + ["accumulation", "kwargs"]
    for name, p in theirs.items():
        assert ours[name].default == p.default, name
    kw, shape = random_case(cls, rng)
    kw["data_format"] = "channels_last"
    x = rng.standard_normal(shape).astype(np.float32)
    det, stock = cls(**kw), STOCK[cls](**kw)
    det.build(shape)
    stock.build(shape)
    assert [(w.name, w.shape, w.trainable) for w in det.weights] == [
        (w.name, w.shape, w.trainable) for w in stock.weights]
    # Weights go both ways and give the same function (to float32 rounding).
    _randomize(stock, rng)
    det.set_weights(stock.get_weights())
    np.testing.assert_allclose(det(x), stock(x), rtol=1e-5, atol=1e-5 * max(1.0, np.abs(stock(x)).max()))
    _randomize(det, rng)
    stock.set_weights(det.get_weights())
    for a, b in zip(stock.get_weights(), det.get_weights()):
        assert_bits_equal(a, b, "weights")
    # Stock configs load into detconv layers and back.
    assert cls.from_config(stock.get_config()).get_config() == dict(stock.get_config(), accumulation=None)
    assert STOCK[cls].from_config({k: v for k, v in det.get_config().items() if k != "accumulation"})


@pytest.mark.parametrize("cls", list(STOCK), ids=lambda c: c.__name__)
def test_get_config_round_trip(cls, rng):
    kw, _ = random_case(cls, rng)
    layer = cls(**kw, accumulation="float32", name="my_conv")
    config = layer.get_config()
    assert config["accumulation"] == "float32"
    clone = cls.from_config(config)
    assert type(clone) is cls and clone.get_config() == config
    registered = keras.saving.get_registered_name(cls)
    assert registered == f"detconv>{cls.__name__}"
    assert keras.saving.get_registered_object(registered) is cls
    with pytest.raises(ValueError, match="accumulation"):
        cls(**kw, accumulation="float64")


def test_gradients_match_stock(rng):
    x = rng.standard_normal((2, 7, 7, 4)).astype(np.float32)
    for cls, kw in ((dk.Conv2D, dict(filters=6, kernel_size=3, strides=2, padding="same", groups=2)),
                    (dk.DepthwiseConv2D, dict(kernel_size=3, depth_multiplier=2, padding="same")),
                    (dk.Conv2DTranspose, dict(filters=3, kernel_size=3, strides=2, padding="same")),
                    (dk.Conv1D, dict(filters=3, kernel_size=3, padding="causal"))):
        xin = x[:, 0] if cls is dk.Conv1D else x
        det, stock = cls(**kw), STOCK[cls](**kw)
        det.build(xin.shape)
        stock.build(xin.shape)
        _randomize(det, rng)
        stock.set_weights(det.get_weights())
        grads = []
        for layer in (det, stock):
            xt = tf.constant(xin)
            with tf.GradientTape() as tape:
                tape.watch(xt)
                loss = tf.reduce_sum(tf.sin(layer(xt)))
            grads.append([g.numpy() for g in tape.gradient(loss, [xt] + layer.trainable_weights)])
        for g_det, g_stock in zip(*grads):
            np.testing.assert_allclose(g_det, g_stock, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(g_stock).max()))


def test_float64_lora_and_dynamic_shapes(rng):
    x = rng.standard_normal((2, 9, 8, 3))
    layer = dk.Conv2D(4, 3, padding="same", dtype="float64")
    y = layer(x)
    assert y.dtype == tf.float64
    assert_bits_equal(y, _op_output(layer, x), "float64")
    # LoRA: the layer convolves with Keras' effective kernel (kernel + scaled low-rank delta).
    lora = dk.Conv2D(4, 3)
    lora.build(x.shape)
    lora.enable_lora(2)
    lora.lora_kernel_b.assign(rng.standard_normal(lora.lora_kernel_b.shape).astype(np.float32))
    xf = x.astype(np.float32)
    assert_bits_equal(lora(xf), detconv.conv2d(xf, lora.kernel, 1, "VALID", bias=lora.bias), "lora")
    # Unknown spatial sizes: the transpose output shape is computed at run time, as Keras does.
    inp = keras.Input((None, None, 3))
    model = keras.Model(inp, dk.Conv2DTranspose(2, 3, strides=2, padding="same", output_padding=1)(inp))
    assert tuple(model.output.shape) == (None, None, None, 2)
    assert model(xf).shape == (2, 18, 16, 2)


# ------------------------------------------------------------------ mixed precision
@pytest.mark.parametrize("accumulation", [None, "float16"])
def test_mixed_float16(policy, accumulation, rng):
    policy("mixed_float16")
    for cls in STOCK:
        kw, shape = random_case(cls, rng)
        x = rng.standard_normal(shape).astype(np.float32)
        if kw["data_format"] == "channels_first":
            x = _to_first(x)
        layer = cls(**kw, accumulation=accumulation)
        y = layer(x)
        assert layer.compute_dtype == "float16" and all(w.dtype == "float32" for w in layer.weights)
        assert y.dtype == tf.float16
        # The op on float16 copies of input, kernel and bias, bit for bit.
        want = _op_output(layer, x, cast=tf.float16, accumulation=accumulation)
        assert_bits_equal(y, want, f"{cls.__name__} {kw} accumulation={accumulation}")


def test_mixed_float16_training(policy, rng):
    policy("mixed_float16")
    model = keras.Sequential([keras.Input((8, 8, 3)), dk.Conv2D(4, 3, activation="relu"),
                              dk.DepthwiseConv2D(3, padding="same", accumulation="float16"),
                              dk.Conv2DTranspose(2, 3, strides=2), keras.layers.Flatten(),
                              keras.layers.Dense(2, dtype="float32")])
    model.compile(optimizer="sgd", loss="mse")  # Keras wraps it in a LossScaleOptimizer
    x = rng.standard_normal((8, 8, 8, 3)).astype(np.float32)
    before = model.get_weights()
    history = model.fit(x, rng.standard_normal((8, 2)).astype(np.float32), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert all(w.dtype == "float32" for w in model.weights)


def test_mixed_bfloat16(policy, rng):
    policy("mixed_bfloat16")
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    layer = dk.Conv2D(5, 3, padding="same")
    y = layer(x)
    assert y.dtype == tf.bfloat16
    want = detconv.conv2d(tf.cast(x, tf.bfloat16), tf.cast(layer.kernel.value, tf.bfloat16), 1, "SAME",
                          bias=tf.cast(layer.bias.value, tf.bfloat16))
    assert_bits_equal(y, want, "bfloat16")


# ------------------------------------------------------------------ XLA
def _small_model(conv=dk.Conv2D):
    return keras.Sequential([keras.Input((8, 8, 3)), conv(4, 3, activation="relu"),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])


def test_jit_compile_auto_is_off_and_true_falls_back(rng):
    from keras.src.trainers.trainer import model_supports_jit

    assert model_supports_jit(_small_model(keras.layers.Conv2D))
    model = _small_model()
    assert not model_supports_jit(model)  # so "auto" resolves to False on every machine
    model.compile(optimizer="sgd", loss="mse")
    assert model.jit_compile is False
    with pytest.warns(UserWarning, match="jit_compile"):
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    assert model.jit_compile is False
    x = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
    model.fit(x, rng.standard_normal((4, 2)).astype(np.float32), verbose=0)
    # Tracing a detconv layer for XLA by hand is an error, not different numbers.
    with pytest.raises(Exception, match="cannot be compiled with XLA"):
        tf.function(model, jit_compile=True)(x)


# ------------------------------------------------------------------ serialization
def _all_layers_model(rng):
    inp = keras.Input((10, 10, 4))
    a = dk.Conv2D(6, 3, padding="same", activation="relu", name="c2d")(inp)
    b = dk.DepthwiseConv2D(3, strides=2, depth_multiplier=2, name="dw", accumulation="float32")(a)
    c = dk.Conv2DTranspose(3, 3, strides=2, output_padding=1, name="ct")(b)
    c = dk.SeparableConv2D(4, 3, depth_multiplier=2, padding="same", name="sep2d")(c)
    d = keras.layers.Reshape((-1, 4))(c)
    e = dk.Conv1D(2, 3, padding="causal", dilation_rate=2, name="c1d")(d)
    e = dk.Conv1DTranspose(3, 3, strides=2, name="ct1d")(e)
    e = dk.DepthwiseConv1D(3, depth_multiplier=2, padding="same", name="dw1d")(e)
    e = dk.SeparableConv1D(2, 3, name="sep1d", accumulation="float32")(e)
    model = keras.Model(inp, e)
    for layer in model.layers:
        _randomize(layer, rng)
    return model


def _keras_round_trip(model, x, path, float32_layer, label):
    """Saves model as .keras and loads it: same layer classes, the named layer keeps accumulation="float32",
    same bits on x. Returns the loaded model."""
    model.save(str(path))
    loaded = keras.models.load_model(str(path))
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in model.layers]
    assert loaded.get_layer(float32_layer).accumulation == "float32"
    assert_bits_equal(loaded(x), model(x), label)
    return loaded


def test_keras_file_round_trip(tmp_path, rng):
    model = _all_layers_model(rng)
    x = rng.standard_normal((2, 10, 10, 4)).astype(np.float32)
    loaded = _keras_round_trip(model, x, tmp_path / "m.keras", "dw", ".keras round trip")
    assert_bits_equal(loaded.predict(x, verbose=0), model(x), ".keras predict")


def test_saved_model_in_fresh_process(tmp_path, rng):
    model = _all_layers_model(rng)
    x = rng.standard_normal((3, 10, 10, 4)).astype(np.float32)
    model.export(str(tmp_path / "sm"), verbose=False)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf
        import detconv  # registers detconv's ops so the SavedModel can load
        served = tf.saved_model.load({str(tmp_path / "sm")!r})
        np.save({str(tmp_path / "y.npy")!r}, served.serve(np.load({str(tmp_path / "x.npy")!r})).numpy())
    """)
    proc = subprocess.run([sys.executable, "-c", script], **_child_kwargs(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_bits_equal(np.load(tmp_path / "y.npy"), model(x), "SavedModel served in a fresh process")


# ------------------------------------------------------------------ convert
def _conv_types(model):
    return {layer.name: type(layer) for layer in model._flatten_layers(include_self=False)
            if isinstance(layer, tuple(STOCK.values()))}


def _check_converted(model, converted, accumulation=None):
    old, new = _conv_types(model), _conv_types(converted)
    assert old.keys() == new.keys() and old
    for name, cls in new.items():
        assert cls in STOCK and STOCK[cls] is old[name], name
    flat_old = {l.name: l for l in model._flatten_layers(include_self=False)}
    for layer in converted._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.InputLayer):
            continue  # clone_model makes fresh inputs
        orig = flat_old[layer.name]
        if not isinstance(layer, tuple(STOCK)):
            assert type(layer) is type(orig), layer.name
        else:
            assert layer.accumulation == accumulation
            cfg = dict(layer.get_config())
            assert cfg.pop("accumulation") == accumulation
            assert cfg == orig.get_config()
        assert len(layer.weights) == len(orig.weights), layer.name
        for a, b in zip(layer.weights, orig.weights):
            assert a is not b
            assert_bits_equal(a.numpy(), b.numpy(), f"{layer.name} weights")
    # The original is untouched.
    assert all(type(layer) in STOCK.values() for layer in
               [l for l in model._flatten_layers(include_self=False) if l.name in old])


def test_convert_sequential(rng):
    model = keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="a"),
        keras.layers.BatchNormalization(),
        keras.layers.DepthwiseConv2D(3, strides=2, depth_multiplier=2, name="b"),
        keras.layers.Conv2DTranspose(3, 3, strides=2, name="c"),
        keras.layers.Reshape((-1, 3)),
        keras.layers.Conv1D(2, 5, strides=2, groups=1, name="d"),
        keras.layers.Flatten(),
        keras.layers.Dense(3),
    ])
    for layer in model.layers:
        _randomize(layer, rng)
    model.compile(optimizer="sgd", loss="mse")
    converted = dk.convert(model, accumulation="float32")
    assert isinstance(converted, keras.Sequential) and converted.compiled
    _check_converted(model, converted, "float32")
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    want = model(x).numpy()
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(converted(x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # Converted weights are copies: training the copy leaves the original alone.
    before = [w.copy() for w in model.get_weights()]
    converted.fit(x, rng.standard_normal((2, 3)).astype(np.float32), verbose=0)
    for a, b in zip(before, model.get_weights()):
        assert_bits_equal(a, b, "original weights")


def test_convert_functional_with_branches_and_sharing(rng):
    inp = keras.Input((9, 9, 4))
    shared = keras.layers.Conv2D(4, 1, name="shared")
    left = keras.layers.Conv2D(4, 3, padding="same", groups=1, name="left")(shared(inp))
    right = keras.layers.DepthwiseConv2D(3, padding="same", name="right")(shared(inp))
    merged = keras.layers.Concatenate()([left, right, keras.layers.Conv3D(1, 1, name="c3")(inp[..., None])[..., 0]])
    out = keras.layers.Conv2D(2, 3, groups=2, name="grouped")(merged)
    model = keras.Model(inp, out)
    for layer in model.layers:
        _randomize(layer, rng)
    converted = dk.convert(model)
    _check_converted(model, converted)
    assert type(converted.get_layer("c3")) is dk.Conv3D
    # The shared layer stays one (shared) layer in the copy.
    assert sum(1 for l in converted.layers if l.name == "shared") == 1
    assert len(converted.get_layer("shared")._inbound_nodes) == 2
    x = rng.standard_normal((2, 9, 9, 4)).astype(np.float32)
    want = model(x).numpy()
    np.testing.assert_allclose(converted(x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_convert_nested_application(rng):
    backbone = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                              include_top=False)
    inner = keras.Sequential([keras.Input((1, 1, 1280)), keras.layers.Conv2D(4, 1, name="head_conv")],
                             name="head")
    inp = keras.Input((32, 32, 3))
    feat = backbone(inp)
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True)(feat)
    model = keras.Model(inp, inner(pooled))
    converted = dk.convert(model)
    kinds = {type(l) for l in converted._flatten_layers(include_self=False)}
    assert keras.layers.Conv2D not in kinds and keras.layers.DepthwiseConv2D not in kinds
    assert dk.Conv2D in kinds and dk.DepthwiseConv2D in kinds
    new_backbone = converted.get_layer(backbone.name)
    assert isinstance(new_backbone, keras.Model) and new_backbone is not backbone
    assert isinstance(converted.get_layer("head"), keras.Sequential)
    assert len(converted.weights) == len(model.weights)
    for a, b in zip(converted.weights, model.weights):
        assert a.path == b.path
        assert_bits_equal(a.numpy(), b.numpy(), a.path)
    x = rng.standard_normal((2, 32, 32, 3)).astype(np.float32)
    want = backbone(x).numpy()
    got = new_backbone(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())
    assert_bits_equal(converted(x), converted(x), "converted model run twice")


def test_convert_time_distributed(rng, tmp_path):
    # A video model's per-frame convolutions: the wrapped stock layers are swapped, the wrappers keep their
    # names and weight paths, and each frame is the detconv layer's output for that frame alone.
    inp = keras.Input((3, 9, 9, 2))
    y = keras.layers.TimeDistributed(keras.layers.Conv2D(4, 3, padding="same", name="frame_conv"), name="td")(inp)
    y = keras.layers.TimeDistributed(keras.layers.DepthwiseConv2D(3, name="frame_dw"), name="td_dw")(y)
    per_frame = keras.Sequential([keras.Input((7, 7, 4)), keras.layers.Conv2D(2, 1, name="seq_conv")], name="cnn")
    y = keras.layers.TimeDistributed(per_frame, name="td_seq")(y)  # a per-frame CNN
    model = keras.Model(inp, y)
    for layer in model.layers:
        _randomize(layer, rng)
    converted = dk.convert(model)
    assert isinstance(converted.get_layer("td"), keras.layers.TimeDistributed)
    assert type(converted.get_layer("td").layer) is dk.Conv2D
    assert type(converted.get_layer("td_dw").layer) is dk.DepthwiseConv2D
    new_cnn = converted.get_layer("td_seq").layer
    assert isinstance(new_cnn, keras.Sequential) and new_cnn is not per_frame
    assert type(new_cnn.get_layer("seq_conv")) is dk.Conv2D
    rep = converted.detconv_report
    assert sorted(s[0] for s in rep.swapped) == ["frame_conv", "frame_dw", "seq_conv"], str(rep)
    assert rep.fully_controlled, str(rep)
    assert [w.path for w in converted.weights] == [w.path for w in model.weights]
    for a, b in zip(converted.weights, model.weights):
        assert_bits_equal(a.numpy(), b.numpy(), a.path)
    x = rng.standard_normal((2, 3, 9, 9, 2)).astype(np.float32)
    got = converted(x).numpy()
    frames = new_cnn(converted.get_layer("td_dw").layer(converted.get_layer("td").layer(x.reshape(6, 9, 9, 2))))
    assert_bits_equal(got, frames.numpy().reshape(got.shape), "framewise")
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)
    converted.save(tmp_path / "td.keras")
    assert_bits_equal(keras.saving.load_model(tmp_path / "td.keras")(x), got, ".keras round trip")


def test_convert_rejects_subclassed_and_converts_single_layers(rng):
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.conv = keras.layers.Conv2D(2, 3)

        def call(self, x):
            return self.conv(x)

    sub = Sub()
    sub(np.zeros((1, 5, 5, 1), np.float32))
    with pytest.raises(TypeError, match="Sequential or functional"):
        dk.convert(sub)
    # A stock convolution hidden inside a custom layer cannot be swapped: convert() says so.
    class Wrapper(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv = keras.layers.Conv2D(2, 3, name="hidden")

        def call(self, x):
            return self.conv(x)

    inp = keras.Input((6, 6, 1))
    with pytest.warns(UserWarning, match="hidden"):
        dk.convert(keras.Model(inp, Wrapper()(inp)))
    stock = keras.layers.Conv2D(3, 2, strides=2)
    stock.build((1, 6, 6, 2))
    _randomize(stock, rng)
    layer = dk.convert(stock, accumulation="float32")
    assert type(layer) is dk.Conv2D and layer.accumulation == "float32"
    for a, b in zip(layer.get_weights(), stock.get_weights()):
        assert_bits_equal(a, b, "weights")


# ------------------------------------------------------------------ reproducible training
def test_training_is_bitwise_reproducible_across_processes():
    """The demo CNN trained from one seed in two fresh processes, and here: the same final weights.

    Also under MirroredStrategy over two logical CPU devices, run to run.
    """
    from detconv import _train_demo

    first, second = _train_demo.run_processes(["--models", "detconv", "--mirrored"])
    assert set(first) == {"detconv", "detconv_mirrored"}
    assert first == second, (first, second)
    # This process has run many other tests: its state must not matter either.
    assert _train_demo.train_hash(True) == first["detconv"]


def test_convert_every_layer_kind_and_report(rng, capsys):
    """Every stock convolution kind is swapped; the report names them and the layers outside the contract."""
    inp2, inp1 = keras.Input((12, 12, 3)), keras.Input((16, 4))
    a = keras.layers.Conv2D(4, 3, padding="same", name="conv2d")(inp2)
    a = keras.layers.DepthwiseConv2D(3, name="dw2d")(a)
    a = keras.layers.SeparableConv2D(5, 3, name="sep2d")(a)
    a = keras.layers.Conv2DTranspose(3, 3, strides=2, name="ct2d")(a)
    a = keras.layers.BatchNormalization(name="bn")(a)
    a = keras.layers.GlobalAveragePooling2D(name="gap2d")(a)
    b = keras.layers.Conv1D(4, 3, name="conv1d")(inp1)
    b = keras.layers.DepthwiseConv1D(3, name="dw1d")(b)
    b = keras.layers.SeparableConv1D(4, 3, name="sep1d")(b)
    b = keras.layers.Conv1DTranspose(2, 3, strides=2, name="ct1d")(b)
    b = keras.layers.Flatten(name="flat")(b)
    inp3 = keras.Input((4, 6, 6, 2))
    c = keras.layers.Conv3D(3, 3, padding="same", name="conv3d")(inp3)
    c = keras.layers.Conv3DTranspose(2, 2, strides=2, name="ct3d")(c)
    c = keras.layers.Flatten(name="flat3")(c)
    out = keras.layers.Dense(3, name="head")(keras.layers.Concatenate(name="cat")([a, b, c]))
    model = keras.Model([inp2, inp1, inp3], out)
    for layer in model.layers:
        _randomize(layer, rng)
    converted = dk.convert(model, verbose=True)
    _check_converted(model, converted)
    rep = converted.detconv_report
    kinds = {name: det for name, _, det in rep.swapped}
    assert kinds == {n: type(converted.get_layer(n)).__name__ for n in
                     ("conv2d", "dw2d", "sep2d", "ct2d", "conv1d", "dw1d", "sep1d", "ct1d", "conv3d", "ct3d")}
    assert sorted(rep.detconv) == sorted(kinds) and not rep.unreplaced
    assert {name for name, _, _ in rep.uncontrolled} == {"bn", "gap2d", "head"}
    assert not rep.fully_controlled
    printed = capsys.readouterr().out
    assert "swapped 10" in printed and "head: Dense" in printed and "bn: BatchNormalization" in printed
    x = [rng.standard_normal((2, 12, 12, 3)).astype(np.float32), rng.standard_normal((2, 16, 4)).astype(np.float32),
         rng.standard_normal((2, 4, 6, 6, 2)).astype(np.float32)]
    np.testing.assert_allclose(converted(x), model(x), rtol=1e-4, atol=1e-4)
    # a model of detconv layers and order-free layers only is fully controlled
    pure = dk.convert(keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(2, 3), keras.layers.ReLU(),
                                        keras.layers.MaxPooling2D()]))
    assert pure.detconv_report.fully_controlled and "No other layer" in str(pure.detconv_report)


def test_report_names_softmax_activations_and_layers_it_does_not_know(rng):
    """Order-free layers pass silently; a softmax or exp/tanh/erf activation (a convolution's too) is outside
    the contract; custom, Lambda and interpolating layers are reported as unknown rather than assumed
    order-free."""
    class Custom(keras.layers.Layer):
        def call(self, x):
            return keras.ops.matmul(x, keras.ops.ones((x.shape[-1], 2)))

    inp = keras.Input((6, 6, 3))
    a = keras.layers.Conv2D(4, 3, activation="softmax", name="conv_sm")(inp)
    a = keras.layers.Activation("softmax", name="act_sm")(a)
    a = keras.layers.Activation("relu", name="act_relu")(a)
    a = keras.layers.Conv2D(4, 1, activation="swish", name="conv_swish")(a)
    a = keras.layers.Activation("hard_sigmoid", name="act_hard")(a)
    a = keras.layers.Activation("gelu", name="act_gelu")(a)
    a = keras.layers.ELU(name="elu")(a)
    lora = keras.layers.Conv2D(4, 1, name="conv_lora")
    a = lora(a)
    lora.enable_lora(2)
    a = keras.layers.Conv2D(4, 1, activation=lambda t: t * 2, name="conv_own_act")(a)  # the user's callable
    a = keras.layers.Activation("sparsemax", name="act_sparsemax")(a)
    a = keras.layers.UpSampling2D(interpolation="bilinear", name="up_bilinear")(a)
    a = keras.layers.UpSampling2D(name="up_nearest")(a)
    a = keras.layers.Lambda(lambda t: t * 2, name="lam")(a)  # convert() copies it (stock clone_model refuses)
    a = Custom(name="custom")(a)
    out = keras.layers.Dense(3, activation="softmax", name="dense_sm")(a)
    model = keras.Model(inp, out)
    for layer in model.layers:
        _randomize(layer, rng)
    converted = dk.convert(model)
    rep = converted.detconv_report
    assert [n for n, _, _ in rep.swapped] == ["conv_sm", "conv_swish", "conv_lora", "conv_own_act"]
    transcendental = "exp/tanh/erf (CPU and GPU libraries round them differently)"
    assert {n: why for n, _, why in rep.uncontrolled} == {
        "conv_sm": "softmax sum (its activation)", "act_sm": "softmax sum (its activation)",
        "conv_swish": f"{transcendental} (its activation)", "act_gelu": f"{transcendental} (its activation)",
        "elu": transcendental, "conv_lora": "LoRA kernel update (a matrix product, BLAS/cuBLAS order)",
        "act_sparsemax": "cumulative sum (a scan's order) (its activation)",
        "dense_sm": "matrix product (BLAS/cuBLAS order); softmax sum (its activation)"}
    assert {n for n, _ in rep.unclassified} == {"up_bilinear", "lam", "custom", "conv_own_act"}
    assert not rep.fully_controlled and "unknown   lam: Lambda" in str(rep)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(converted(x), model(x), rtol=1e-4, atol=1e-5)


@keras.saving.register_keras_serializable(package="detconv_test")
def _halve(t):
    return t * 0.5


def test_convert_user_activation_saves_when_registered(tmp_path, rng):
    """A convolution whose activation is a registered function of the user's converts (its clone shares the
    function) and round-trips through .keras under Keras' safe mode; a lambda would save but not load, for
    a stock model too (docs/keras.md)."""
    inp = keras.Input((6, 6, 3))
    y = keras.layers.Conv2D(4, 3, activation=_halve, name="conv_halve")(inp)
    y = keras.layers.Activation(_halve, name="act_halve")(y)
    model = keras.Model(inp, y)
    for layer in model.layers:
        _randomize(layer, rng)
    converted = dk.convert(model)
    assert isinstance(converted.get_layer("conv_halve"), dk.Conv2D)
    assert converted.get_layer("conv_halve").activation is _halve
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    converted.save(tmp_path / "act.keras")
    loaded = keras.saving.load_model(tmp_path / "act.keras")
    assert isinstance(loaded.get_layer("conv_halve"), dk.Conv2D)
    assert_bits_equal(loaded(x), converted(x), ".keras round trip, the user's activation")


def test_3d_layers_keras_file_and_saved_model(tmp_path, rng):
    inp = keras.Input((4, 6, 6, 2))
    y = dk.Conv3D(3, 3, padding="same", name="c3d", accumulation="float32")(inp)
    y = dk.Conv3DTranspose(2, 2, strides=(1, 2, 2), name="ct3d")(y)
    model = keras.Model(inp, y)
    for layer in model.layers:
        _randomize(layer, rng)
    x = rng.standard_normal((2, 4, 6, 6, 2)).astype(np.float32)
    _keras_round_trip(model, x, tmp_path / "m3.keras", "c3d", ".keras round trip (3-D)")
    model.export(str(tmp_path / "sm3"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "sm3"))
    assert_bits_equal(served.serve(x), model(x), "SavedModel (3-D)")
