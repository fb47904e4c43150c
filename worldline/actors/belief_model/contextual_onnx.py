"""The contextual channel's forward pass as an ONNX graph, run by onnxruntime: the
same all-MiniLM-L6-v2 computation as :meth:`.contextual.ContextualEmbedder._run`
(to about 1e-7), built here from the same weights (no torch, no exported file),
about 3.5 times faster on a query than numpy's matrix products on this project's
2-core machine (docs/benchmarks.md, "The contextual channel").

Used when ``onnxruntime`` and ``onnx`` are installed (the ``semantic`` extra brings
both); one thread per run, so a query never waits for a pool.

``quantized``: every linear layer's weights in 8 bits, one scale per output column
(symmetric), and its input quantized per run (``DynamicQuantizeLinear``, then
``MatMulInteger``): what onnxruntime's own ``quantize_dynamic(per_channel=True)``
makes of the model, built here directly. A query's pass is about 3 times faster on
this project's machine, and its vectors keep a cosine of about 0.99 with the float
pass's (docs/benchmarks.md, "The contextual channel in 8 bits")."""

from __future__ import annotations

import importlib
from typing import Any, Final

import numpy as np

__all__ = ["HEADS", "Session", "available"]

HEADS: Final = 12
WIDTH: Final = 384
LAYERS: Final = 6


def available() -> bool:
    """Whether onnxruntime and onnx can be imported."""
    try:
        importlib.import_module("onnxruntime")
        importlib.import_module("onnx")
    except ImportError:
        return False
    return True


class _Graph:
    """Nodes and initializers of the graph being built."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def const(self, array: np.ndarray) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def weight(self, array: np.ndarray) -> str:
        return self.const(np.ascontiguousarray(array, dtype=np.float32))

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        return self.ops(kind, 1, *inputs, **attributes)[0]

    def ops(
        self, kind: str, outputs: int, *inputs: str, **attributes: Any
    ) -> list[str]:
        names = [f"n{len(self.nodes)}_{j}" for j in range(outputs)]
        node = self.onnx.helper.make_node(kind, list(inputs), names, **attributes)
        self.nodes.append(node)
        return names

    def matmul(self, x: str, weight: np.ndarray, *, quantized: bool) -> str:
        """``x @ weight`` (``weight``: ``[in, out]``), in 8 bits when ``quantized``."""
        if not quantized:
            return self.op("MatMul", x, self.weight(weight))
        column = np.abs(weight).max(axis=0)
        scale = np.where(column > 0, column / 127.0, 1.0).astype(np.float32)
        q = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
        zero = np.zeros(weight.shape[1], dtype=np.int8)
        xq, x_scale, x_zero = self.ops("DynamicQuantizeLinear", 3, x)
        product = self.op("MatMulInteger", xq, self.const(q), x_zero, self.const(zero))
        product = self.op("Cast", product, to=self.onnx.TensorProto.FLOAT)
        return self.op("Mul", product, self.op("Mul", x_scale, self.weight(scale)))


def _model(w: dict[str, np.ndarray], onnx: Any, *, quantized: bool = False) -> Any:
    """The ONNX model: token ids ``[n, length]`` (no padding) to the mean of the
    last hidden states ``[n, 384]`` (not yet normalized)."""
    g = _Graph(onnx)

    def norm(x: str, prefix: str) -> str:
        return g.op(
            "LayerNormalization",
            x,
            g.weight(w[prefix + "LayerNorm.weight"]),
            g.weight(w[prefix + "LayerNorm.bias"]),
            axis=-1,
            epsilon=1e-12,
        )

    e = "embeddings."
    length = g.op("Shape", "ids", start=1, end=2)
    zero = g.const(np.array([0], dtype=np.int64))
    positions = g.op(
        "Slice", g.weight(w[e + "position_embeddings.weight"]), zero, length, zero
    )
    x = g.op("Gather", g.weight(w[e + "word_embeddings.weight"]), "ids")
    x = g.op(
        "Add",
        g.op("Add", x, positions),
        g.weight(w[e + "token_type_embeddings.weight"][0]),
    )
    x = norm(x, e)
    split = g.const(np.array([0, 0, HEADS, WIDTH // HEADS], dtype=np.int64))
    joined = g.const(np.array([0, 0, WIDTH], dtype=np.int64))
    scale = g.weight(np.array(1 / np.sqrt(WIDTH // HEADS)))
    half, one, root2 = (g.weight(np.array(v)) for v in (0.5, 1.0, np.sqrt(2.0)))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def linear(x: str, name: str, p: str = p) -> str:
            weight = w[p + name + ".weight"].T
            product = g.matmul(x, weight, quantized=quantized)
            return g.op("Add", product, g.weight(w[p + name + ".bias"]))

        q, k, v = (
            g.op("Transpose", g.op("Reshape", linear(x, f"attention.self.{n}"), split),
                 perm=[0, 2, 1, 3])
            for n in ("query", "key", "value")
        )  # fmt: skip
        scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
        weights = g.op("Softmax", g.op("Mul", scores, scale), axis=-1)
        context = g.op("Transpose", g.op("MatMul", weights, v), perm=[0, 2, 1, 3])
        context = g.op("Reshape", context, joined)
        x = norm(g.op("Add", x, linear(context, "attention.output.dense")),
                 p + "attention.output.")  # fmt: skip
        h = linear(x, "intermediate.dense")
        gelu = g.op("Add", g.op("Erf", g.op("Div", h, root2)), one)
        h = g.op("Mul", g.op("Mul", h, half), gelu)
        x = norm(g.op("Add", x, linear(h, "output.dense")), p + "output.")
    g.nodes.append(
        onnx.helper.make_node("ReduceMean", [x], ["pooled"], axes=[1], keepdims=0)
    )
    tensor = onnx.TensorProto
    graph = onnx.helper.make_graph(
        g.nodes,
        "all-minilm-l6-v2",
        [onnx.helper.make_tensor_value_info("ids", tensor.INT64, [None, None])],
        [onnx.helper.make_tensor_value_info("pooled", tensor.FLOAT, [None, WIDTH])],
        g.inits,
    )
    return onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17)]
    )


class Session:
    """An onnxruntime session of the model built from ``weights`` (the safetensors'
    tensors, names without a ``bert.`` prefix), its linear layers in 8 bits when
    ``quantized``."""

    def __init__(self, weights: dict[str, np.ndarray], *, quantized: bool) -> None:
        onnx: Any = importlib.import_module("onnx")
        ort: Any = importlib.import_module("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        model = _model(weights, onnx, quantized=quantized).SerializeToString()
        self._session = ort.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )

    def pooled(self, ids: np.ndarray) -> np.ndarray:
        """``[n, 384]`` float32 means of the last hidden states of ``ids``."""
        found: np.ndarray = self._session.run(None, {"ids": ids})[0]
        return found
