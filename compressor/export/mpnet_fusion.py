"""MPNet's self-attention fused into ``com.microsoft.MultiHeadAttention``.

onnxruntime's transformer optimizer (and optimum's O2, which calls it) fuses no
attention in MPNet: the scores carry a second Add, the relative position bias
that the encoder computes once from position buckets and hands to every layer::

    q, k, v = MatMul(x, Wq) + bq, MatMul(x, Wk) + bk, MatMul(x, Wv) + bv   # Reshape, Transpose
    scores  = MatMul(q, k^T) / sqrt(head size)
    probs   = Softmax(scores + position_bias + mask)     # [batch, heads, seq, seq] + [batch, 1, 1, seq]
    out     = Reshape(Transpose(MatMul(probs, v)))      # -> the output projection

``fuse_mpnet_attention`` matches this from each Softmax and writes one
``MultiHeadAttention`` per layer: query, key and value are the Q/K/V MatMuls'
outputs (the MatMuls stay separate, so dynamic INT8 still quantises them as
MatMulInteger; a packed ``Attention`` would become a ``QAttention``, which has
no attention-bias input and drops the bias), input 3 their three biases, and
input 5 (``attention_bias``, broadcast over batch and heads by the CPU kernel)
the sum of the two addends. The sum is one Add per distinct (bias, mask) pair:
once for the whole graph when every layer adds the same bias; per layer when
pruning left layers with their own heads (each layer then Gathers its columns
of the shared bias). The head count of each node is its own layer's: the query
width over the head size. A layer whose graph is not exactly this pattern stays
unfused, and the report says how many fused.

A layer whose attention probabilities are also read elsewhere (token pruning's
deciding layers score the tokens with them) fuses too: the node's fourth output
``qk`` (the scaled scores plus ``attention_bias``, what the Softmax takes) feeds
the original Softmax, which now serves only those readers, so the probabilities
are the same as before and the report lists the layer under ``probs_output``.
"""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np

_LAYER = re.compile(r"layer[._/](\d+)")


def fuse_mpnet_attention(model, head_size: int, probs_output: bool = True) -> dict:
    """Fuse every matching attention block of ``model`` (an onnxruntime ``OnnxModel``) in place.

    ``probs_output``: also fuse blocks whose probabilities have other readers (through the
    node's ``qk`` output and the kept Softmax); False leaves those unfused.
    Returns ``{"tool", "fused": n, "softmax": m, "nodes": [{"name", "layer", "num_heads"}],
    "per_layer": {layer: count}, "probs_output": [layer, ...]}``; ``skipped`` says why a
    Softmax did not fuse.
    """
    from onnx import helper, numpy_helper

    report = {"tool": "compressor.export.mpnet_fusion (MultiHeadAttention with attention_bias)",
              "fused": 0, "softmax": 0, "nodes": [], "per_layer": {}, "probs_output": []}
    if head_size <= 0:
        report["skipped"] = ["no head size"]
        return report
    out_to_node = model.output_name_to_node()
    in_to_nodes = model.input_name_to_nodes()
    summed: dict = {}          # (addend, addend) -> the Add node output already made
    remove, add, skipped = [], [], []
    for softmax in [n for n in model.model.graph.node if n.op_type == "Softmax"]:
        report["softmax"] += 1
        match = _match(model, softmax, out_to_node, in_to_nodes, head_size, probs_output)
        if isinstance(match, str):
            skipped.append(f"{softmax.name}: {match}")
            continue
        prefix = softmax.name.rsplit("/", 1)[0] if "/" in softmax.name else softmax.name
        name = model.create_node_name("MultiHeadAttention", prefix + "/MultiHeadAttention")
        key = tuple(sorted(match["addends"]))
        if key not in summed:
            bias_sum = model.create_node_name("Add", prefix + "/AttentionBiasAdd")
            node = helper.make_node("Add", list(match["addends"]), [bias_sum + "_output_0"], name=bias_sum)
            add.append(node)
            summed[key] = node.output[0]
        qkv_bias = numpy_helper.from_array(
            np.concatenate([match["q_bias"], match["k_bias"], match["v_bias"]]).astype(np.float32),
            name + "_qkv_bias")
        model.add_initializer(qkv_bias)
        outputs = [match["output"]]
        if match["probs_read"]:   # the Softmax stays, fed by the fused node's scores (qk)
            scores = name + "_qk"
            outputs += ["", "", scores]
            softmax.input[0] = scores
            # qk's type is a constraint of its own, which onnxruntime cannot infer from the inputs
            model.model.graph.value_info.append(
                helper.make_tensor_value_info(scores, _elem_type(model, softmax.output[0]), None))
        mha = helper.make_node(
            "MultiHeadAttention",
            [match["q"], match["k"], match["v"], qkv_bias.name, "", summed[key]],
            outputs, name=name, domain="com.microsoft",
            num_heads=match["num_heads"], scale=match["scale"])
        add.append(mha)
        remove.extend(match["nodes"])
        layer = _LAYER.search(softmax.name)
        layer = int(layer.group(1)) if layer else None
        if match["probs_read"]:
            report["probs_output"].append(layer)
        report["nodes"].append({"name": name, "layer": layer, "num_heads": match["num_heads"]})
        report["per_layer"][str(layer)] = report["per_layer"].get(str(layer), 0) + 1
        report["fused"] += 1
    if add:
        model.remove_nodes(remove)
        model.add_nodes(add)
        if not any(o.domain == "com.microsoft" for o in model.model.opset_import):
            model.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        model.prune_graph()
        model.topological_sort()
    if skipped:
        report["skipped"] = skipped
    return report


def _match(model, softmax, out_to_node, in_to_nodes, head_size: int, probs_output: bool = True):
    """The parts of one attention block around ``softmax``, or a string saying what did not match.

    ``probs_read``: the probabilities have readers besides ``MatMul(probs, v)`` (allowed with
    ``probs_output``; the Softmax is then not among the nodes removed)."""
    # Softmax <- Add <- Add <- Div|Mul <- MatMul(q, k^T): two addends (bias, mask), in either order
    addends, chain, node = [], [], out_to_node.get(softmax.input[0])
    for step in range(2):
        if node is None or node.op_type != "Add":
            return "scores are not Add(Add(scaled QK^T, a), b)"
        producers = [out_to_node.get(i) for i in node.input]
        inner = [k for k, p in enumerate(producers) if p is not None and
                 (p.op_type == "Add" if step == 0 else _scores_matmul(p, out_to_node) is not None)]
        if len(inner) != 1:
            return "not two additive terms (bias, mask) on the scaled scores"
        chain.append(node)
        addends.append(node.input[1 - inner[0]])
        node = producers[inner[0]]
    scale_node = node
    scores = _scores_matmul(scale_node, out_to_node)
    constant = model.get_constant_value(scale_node.input[1])
    if scores is None or constant is None or np.size(constant) != 1:
        return "scores not scaled by a constant"
    factor = float(np.asarray(constant).reshape(-1)[0])
    scale = 1.0 / factor if scale_node.op_type == "Div" else factor
    # q: Transpose(0,2,1,3) <- Reshape <- Add(bias) <- MatMul; k: Transpose(0,2,3,1) <- Reshape <- ...
    q = _projection(model, out_to_node.get(scores.input[0]), [0, 2, 1, 3], out_to_node)
    k = _projection(model, out_to_node.get(scores.input[1]), [0, 2, 3, 1], out_to_node)
    # probs @ v -> Transpose(0,2,1,3) -> Reshape [batch, seq, width]
    users = in_to_nodes.get(softmax.output[0], [])
    contexts = [u for u in users if u.op_type == "MatMul" and u.input[0] == softmax.output[0]]
    probs_read = len(users) > len(contexts) or \
        softmax.output[0] in {o.name for o in model.model.graph.output}
    if len(contexts) != 1 or (probs_read and not probs_output):
        return "Softmax does not feed MatMul(probs, v) alone"
    context = contexts[0]
    v = _projection(model, out_to_node.get(context.input[1]), [0, 2, 1, 3], out_to_node)
    for what, part in (("query", q), ("key", k), ("value", v)):
        if isinstance(part, str):
            return f"{what}: {part}"
    after = in_to_nodes.get(context.output[0], [])
    if len(after) != 1 or after[0].op_type != "Transpose" or _perm(after[0]) != [0, 2, 1, 3]:
        return "context not transposed back"
    reshape = in_to_nodes.get(after[0].output[0], [])
    if len(reshape) != 1 or reshape[0].op_type != "Reshape":
        return "context not reshaped back"
    widths = {q["width"], k["width"], v["width"]}
    if len(widths) != 1 or q["matmul"].input[0] != k["matmul"].input[0] or \
            q["matmul"].input[0] != v["matmul"].input[0]:
        return "query, key and value differ in width or input"
    width = widths.pop()
    if width % head_size:
        return f"width {width} is not a multiple of the head size {head_size}"
    num_heads = width // head_size
    if abs(scale * math.sqrt(head_size) - 1) > 1e-3:
        return f"scale {scale} is not 1/sqrt({head_size})"
    # every node between the projections' MatMuls and the context Reshape goes, unless used elsewhere
    nodes = chain + [scale_node, scores, softmax, context, after[0], reshape[0]]
    for part in (q, k, v):
        nodes += part["nodes"]
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n is reshape[0] or (probs_read and n is softmax):   # outputs that stay
            continue
        for out in n.output:
            if any(id(user) not in inside for user in in_to_nodes.get(out, [])) or \
                    out in {o.name for o in model.model.graph.output}:
                return f"{n.name} is used outside the attention block"
    return {"q": q["matmul"].output[0], "k": k["matmul"].output[0], "v": v["matmul"].output[0],
            "q_bias": q["bias"], "k_bias": k["bias"], "v_bias": v["bias"], "addends": addends,
            "num_heads": num_heads, "scale": scale, "output": reshape[0].output[0],
            "nodes": [n for n in nodes if not (probs_read and n is softmax)], "probs_read": probs_read}


def _elem_type(model, name: str) -> int:
    """The element type recorded for tensor ``name`` (float32 where none is)."""
    from onnx import TensorProto

    graph = model.model.graph
    for info in list(graph.value_info) + list(graph.output):
        if info.name == name and info.type.tensor_type.elem_type:
            return info.type.tensor_type.elem_type
    return TensorProto.FLOAT


def _scores_matmul(node, out_to_node):
    if node.op_type not in ("Div", "Mul"):
        return None
    parent = out_to_node.get(node.input[0])
    return parent if parent is not None and parent.op_type == "MatMul" else None


def _perm(node) -> Optional[list]:
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return None


def _projection(model, transpose, perm, out_to_node):
    """MatMul(x, W) [+ b] -> Reshape -> Transpose(perm): the MatMul, its bias and width."""
    if transpose is None or transpose.op_type != "Transpose" or _perm(transpose) != perm:
        return f"no Transpose{perm}"
    reshape = out_to_node.get(transpose.input[0])
    if reshape is None or reshape.op_type != "Reshape":
        return "no Reshape to heads"
    node = out_to_node.get(reshape.input[0])
    bias, nodes = None, [transpose, reshape]
    if node is not None and node.op_type == "Add":
        for i in (0, 1):
            value = model.get_constant_value(node.input[i])
            parent = out_to_node.get(node.input[1 - i])
            if value is not None and np.ndim(value) == 1 and parent is not None and parent.op_type == "MatMul":
                bias, nodes, node = np.asarray(value, np.float32), nodes + [node], parent
                break
        else:
            return "bias Add not on a MatMul"
    if node is None or node.op_type != "MatMul":
        return "no projection MatMul"
    weight = model.get_initializer(node.input[1])
    if weight is None or len(weight.dims) != 2:
        return "projection weight is not a constant matrix"
    width = int(weight.dims[1])
    if bias is None:
        bias = np.zeros(width, np.float32)
    if bias.shape != (width,):
        return "bias does not match the weight"
    return {"matmul": node, "bias": bias, "width": width, "nodes": nodes}
