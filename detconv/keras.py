"""Deterministic drop-in replacements for Keras 3 convolution layers.

``Conv1D``, ``Conv2D``, ``DepthwiseConv2D`` and ``Conv2DTranspose`` subclass
the stock ``keras.layers`` classes: constructor arguments, defaults, weight
names, shapes and order are theirs, so ``set_weights(get_weights())`` works
in both directions. Only the convolution itself is replaced by the detconv op
(bias fused: one add in the accumulator before the single rounding). The one
extra keyword is ``accumulation`` (None, "float32" or "float16").

``convert(model)`` copies a Sequential or functional model (nested models
included) with every stock convolution swapped for its detconv twin.

The layers set ``supports_jit = False``: Keras' ``jit_compile="auto"`` then
resolves to False, and ``jit_compile=True`` falls back to False with Keras'
warning ("Model doesn't support `jit_compile=True`"). XLA cannot compile
custom ops; a detconv layer traced inside an XLA context (e.g. a
``tf.function(jit_compile=True)``) raises an error instead of running.
"""

import warnings

import keras
import tensorflow as tf

from detconv import ops as _ops
from detconv._loader import load_ops as _load_ops

# Register the ops now: a SavedModel holding them can then be loaded after `import detconv.keras`.
_load_ops()

__all__ = ["Conv1D", "Conv2D", "DepthwiseConv2D", "Conv2DTranspose", "convert", "XLAUnsupportedError"]

_ACCUMULATIONS = (None, "float32", "float16")


class XLAUnsupportedError(RuntimeError):
    """A detconv layer was traced for XLA compilation, which cannot run custom ops."""


def _in_xla_context():
    # tf.function(jit_compile=True) traces inside an XLAControlFlowContext.
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _check_accumulation(accumulation):
    if accumulation not in _ACCUMULATIONS:
        raise ValueError(f"accumulation: expected None, 'float32' or 'float16', got {accumulation!r}")
    return accumulation


class _DetConvMixin:
    """What the four layers share: the accumulation keyword, casting, no XLA."""

    def _det_init(self, accumulation):
        self.accumulation = _check_accumulation(accumulation)
        # Keras' model_supports_jit() checks this on every layer: auto-jit off.
        self.supports_jit = False

    def _det_prepare(self, inputs):
        if _in_xla_context():
            raise XLAUnsupportedError(
                f"detconv layer '{self.name}' cannot be compiled with XLA (jit_compile=True): XLA has no "
                "kernel for detconv's custom ops. Compile the model with jit_compile=False (Keras' default "
                "'auto' already resolves to False for models with detconv layers).")
        dtype = self.compute_dtype
        # The op is called on compute-dtype copies of the variables (float16 under mixed_float16).
        kernel = tf.cast(self.kernel, dtype)
        bias = tf.cast(self.bias, dtype) if self.use_bias else None
        inputs = tf.convert_to_tensor(inputs)
        return inputs, kernel, bias

    def _finish(self, outputs):
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def get_config(self):
        config = super().get_config()
        config["accumulation"] = self.accumulation
        return config


@keras.saving.register_keras_serializable(package="detconv")
class Conv1D(_DetConvMixin, keras.layers.Conv1D):
    """keras.layers.Conv1D computed by detconv.conv1d (bias fused, "causal" padding supported)."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, accumulation=None,
                 **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate, groups=groups,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        if self.padding == "causal":
            # Zero taps on the left only: the same bits as Keras' explicit pad, without the copy.
            padding = [[self.dilation_rate[0] * (self.kernel_size[0] - 1), 0]]
        else:
            padding = self.padding.upper()
        outputs = _ops.conv1d(x, kernel, list(self.strides), padding,
                              data_format="NWC" if self.data_format == "channels_last" else "NCW",
                              dilations=list(self.dilation_rate), bias=bias, accumulation=self.accumulation)
        return self._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
class Conv2D(_DetConvMixin, keras.layers.Conv2D):
    """keras.layers.Conv2D computed by detconv.conv2d (bias fused, groups supported)."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 accumulation=None, **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         data_format=data_format, dilation_rate=dilation_rate, groups=groups,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def convolution_op(self, inputs, kernel):
        # Kept for callers of the public hook; call() fuses the bias instead.
        return _ops.conv2d(inputs, kernel, list(self.strides), self.padding.upper(),
                           data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                           dilations=list(self.dilation_rate), accumulation=self.accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        outputs = _ops.conv2d(x, kernel, list(self.strides), self.padding.upper(),
                              data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                              dilations=list(self.dilation_rate), bias=bias, accumulation=self.accumulation)
        return self._finish(outputs)


@keras.saving.register_keras_serializable(package="detconv")
class DepthwiseConv2D(_DetConvMixin, keras.layers.DepthwiseConv2D):
    """keras.layers.DepthwiseConv2D computed by detconv.depthwise_conv2d (bias fused)."""

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, depthwise_constraint=None, bias_constraint=None, accumulation=None,
                 **kwargs):
        super().__init__(kernel_size=kernel_size, strides=strides, padding=padding,
                         depth_multiplier=depth_multiplier, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         depthwise_initializer=depthwise_initializer, bias_initializer=bias_initializer,
                         depthwise_regularizer=depthwise_regularizer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, depthwise_constraint=depthwise_constraint,
                         bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        outputs = _ops.depthwise_conv2d(x, kernel, list(self.strides), self.padding.upper(),
                                        data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
                                        dilations=list(self.dilation_rate), bias=bias,
                                        accumulation=self.accumulation)
        return self._finish(outputs)


def _transpose_length(size, kernel, stride, padding, output_padding, dilation):
    """Keras' conv-transpose output length (TensorFlow backend rule); size may be a tensor."""
    k = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(k, stride) - k if output_padding is None else output_padding
        return (size - 1) * stride + k + extra
    if output_padding is None:
        return size * stride
    return (size - 1) * stride + k % 2 + output_padding


@keras.saving.register_keras_serializable(package="detconv")
class Conv2DTranspose(_DetConvMixin, keras.layers.Conv2DTranspose):
    """keras.layers.Conv2DTranspose computed by detconv.conv2d_transpose.

    The transposed convolution has no fused bias: the bias is a separate add
    after the op's rounding (two roundings, exactly as stock Keras does it).
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 accumulation=None, **kwargs):
        super().__init__(filters=filters, kernel_size=kernel_size, strides=strides, padding=padding,
                         output_padding=output_padding, data_format=data_format, dilation_rate=dilation_rate,
                         activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        self._det_init(accumulation)

    def call(self, inputs):
        x, kernel, bias = self._det_prepare(inputs)
        channels_last = self.data_format == "channels_last"
        spatial_axes = (1, 2) if channels_last else (2, 3)
        dyn = tf.shape(x)
        static = []
        dynamic = []
        for i, axis in enumerate(spatial_axes):
            op = None if self.output_padding is None else self.output_padding[i]
            args = (self.kernel_size[i], self.strides[i], self.padding, op, self.dilation_rate[i])
            size = x.shape[axis]
            static.append(None if size is None else _transpose_length(size, *args))
            dynamic.append(static[-1] if size is not None else _transpose_length(dyn[axis], *args))
        n = x.shape[0] if x.shape[0] is not None else dyn[0]
        dims = [n, dynamic[0], dynamic[1], self.filters] if channels_last else [n, self.filters, *dynamic]
        output_shape = tf.stack([tf.cast(d, tf.int32) for d in dims])
        outputs = _ops.conv2d_transpose(x, kernel, output_shape, list(self.strides), self.padding.upper(),
                                        data_format="NHWC" if channels_last else "NCHW",
                                        dilations=list(self.dilation_rate), accumulation=self.accumulation)
        outputs.set_shape([x.shape[0], static[0], static[1], self.filters] if channels_last
                          else [x.shape[0], self.filters, static[0], static[1]])
        if bias is not None:
            shape = (1, 1, 1, self.filters) if channels_last else (1, self.filters, 1, 1)
            outputs = outputs + tf.reshape(bias, shape)
        return self._finish(outputs)


# ------------------------------------------------------------------ conversion
_STOCK_TO_DET = {
    keras.layers.Conv1D: Conv1D,
    keras.layers.Conv2D: Conv2D,
    keras.layers.DepthwiseConv2D: DepthwiseConv2D,
    keras.layers.Conv2DTranspose: Conv2DTranspose,
}
_DET_CLASSES = tuple(_STOCK_TO_DET.values())


def _convert_layer(layer, accumulation):
    target = _STOCK_TO_DET.get(type(layer))
    if target is None and isinstance(layer, _DET_CLASSES):
        target = type(layer)
    if target is None:
        return layer.__class__.from_config(layer.get_config())
    config = layer.get_config()
    if not isinstance(layer, _DET_CLASSES):  # detconv layers keep their own setting
        config["accumulation"] = accumulation
    return target.from_config(config)


def _is_graph_model(model):
    # Sequential, or functional (Keras' Functional class is private: recognise it by its graph).
    return isinstance(model, keras.Sequential) or (
        isinstance(model, keras.Model) and hasattr(model, "_run_through_graph") and hasattr(model, "_operations"))


def convert(model, accumulation=None):
    """Returns a copy of ``model`` with every stock convolution replaced by its detconv layer.

    ``model``: a Keras 3 Sequential or functional model (nested Sequential and
    functional models, e.g. a ``keras.applications`` backbone, are converted
    too) or a single layer. Every ``keras.layers.Conv1D``, ``Conv2D``,
    ``DepthwiseConv2D`` and ``Conv2DTranspose`` (exact class, not a user
    subclass) becomes the detconv layer with the same config, name and
    weights, plus ``accumulation``. Other layers are cloned with their weights;
    the original model is left untouched and shares no variables with the copy.
    detconv layers already present keep their own ``accumulation``.
    """
    _check_accumulation(accumulation)
    if isinstance(model, keras.layers.Layer) and not isinstance(model, keras.Model):
        clone = _convert_layer(model, accumulation)
        if model.built:
            clone.build_from_config(model.get_build_config())
            clone.set_weights(model.get_weights())
        return clone
    if not _is_graph_model(model):
        raise TypeError(
            f"convert: expected a Sequential or functional keras.Model (or a layer), got "
            f"{type(model).__name__}. Subclassed models cannot be cloned layer by layer; build their "
            "convolutions from detconv.keras directly.")
    if not model.built:
        raise ValueError("convert: the model must be built (give it an Input or call it once) so its weights "
                         "can be copied.")

    pairs = []

    def clone_function(layer):
        new = _convert_layer(layer, accumulation)
        pairs.append((layer, new))
        return new

    with warnings.catch_warnings():
        # A model compiled where "auto" meant XLA (a GPU) is recompiled without it: expected, not news.
        warnings.filterwarnings("ignore", message="Model doesn't support `jit_compile=True`")
        new_model = keras.models.clone_model(model, clone_function=clone_function, recursive=True)
    for old, new in pairs:
        if getattr(old, "weights", None):  # graph nodes may be plain operations (e.g. x[..., None])
            new.set_weights(old.get_weights())

    leftovers = [layer.name for layer in new_model._flatten_layers(include_self=False, recursive=True)
                 if isinstance(layer, tuple(_STOCK_TO_DET)) and not isinstance(layer, _DET_CLASSES)]
    if leftovers:
        warnings.warn(
            "convert: these convolution layers were not replaced (they are user subclasses of the stock "
            f"layers or live inside a subclassed layer): {leftovers}", stacklevel=2)
    return new_model
