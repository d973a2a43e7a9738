"""Attention spellings -> `mojo::attention` (../shared/reference/hf-spellings.md, section 5).

    SDPA     F.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa) -- after
             repeat_kv (HF under torch.compile with a materialised mask), with enable_gqa, or plain (MHA, or a
             hand-written model); with or without a mask, is_causal, an explicit or the default scale
    A1       HF eager: matmul(q, repeat_kv(k)^T) * scale (+ mask) -> softmax(fp32) -> .to(q.dtype) -> matmul(., v)
             (dropout with p = 0 or in eval mode is gone after canonicalisation)
    A2       Gemma2: the same with a logit softcap: (s / c).tanh() * c before the mask
    A3       gpt-oss: a per-head sink logit concatenated to the scores, max-subtracted, softmax, sliced off

Every spelling reads k and v before repeat_kv: the op reads each kv head once for its group of q heads.

The mask is an input of the pattern. After the rewrite, `analyse_masks` looks at each op's mask subgraph: where
it depends on no runtime input (the masks HF builds from aranges for a prefill), it is a function of the sizes
alone. Static sizes: it is a constant of the compiled graph, evaluated once and compared. Symbolic sizes, or the
user's attention_mask among its inputs: it is evaluated as a formula of its indices (mask_algebra.py, the
attention_mask an uninterpreted function of its own) and the formula compared. If it is exactly causal
(bottom-right aligned) or causal with a sliding window -- and, for a bool mask, also `attention_mask[b, j] != 0`
(key padding) -- the op gets that structure (and a [B, 1, 1, S] key mask) and the S x S tensor is dropped: proven,
not assumed. Anything else (an additive padding mask, whose fully padded rows eager makes uniform; a StaticCache
decode mask built from cache_position) keeps the tensor. Not covered here: Falcon's handwritten eager path (A5),
other sink spellings (flint, granite_swa).
"""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..canonicalize import _touched_by_mutation
from ..tuner import real_tensors
from . import mask_algebra, match_value, needs_grad, refuse, register_pattern, symbolic_scalar, with_signature

log = logging.getLogger("mojo_compile")
aten = torch.ops.aten
mojo = torch.ops.mojo

SCALE, SOFTCAP = 0.3125, 47.25  # trace values of the captured scalars
TELL_TALES = (aten.scaled_dot_product_attention.default,)


def repeat_kv(x, n_rep):
    """HF's repeat_kv, with the repeat count computed from the shapes (so the matcher re-derives it per site)."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


# ------------------------------------------------------------------------------------------------------- checks
def _attention_check(match, causal: bool = False, additive: bool = False) -> bool:
    """What the op computes exactly: 4-D q, k, v of one float dtype, GQA head counts, one head size for q, k and v
    (the kernels' output has q's), a constant scale and softcap, and a mask that takes no gradient.
    causal (SDPA's is_causal): torch aligns it top-left, the op bottom-right; the two agree only when there are as
    many queries as keys, so other shapes (decode's one query, a prefix cache) stay SDPA.
    additive (the eager spellings' `scores + mask`): the mask must be a float; a bool one adds 0 / 1 there."""
    q, k, v = (match_value(match, n) for n in ("q", "k", "v"))
    if any(t is None for t in (q, k, v)):
        return refuse("q, k or v has no tensor value")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return refuse(f"q, k, v are {q.dim()}-D, {k.dim()}-D, {v.dim()}-D: the op takes 4-D [B, H, S, D]")
    if not (q.dtype.is_floating_point and q.dtype == k.dtype == v.dtype):
        return refuse(f"q, k, v are {q.dtype}, {k.dtype}, {v.dtype}: not one float dtype")
    if q.shape[1] % k.shape[1]:
        return refuse(f"q's {q.shape[1]} heads are not a multiple of k's {k.shape[1]}")
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0]:
        return refuse(f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}: batch, heads or keys differ")
    if q.shape[-1] != k.shape[-1] or v.shape[-1] != q.shape[-1]:
        return refuse(f"head sizes differ: q {q.shape[-1]}, k {k.shape[-1]}, v {v.shape[-1]}")
    if causal and not statically_known_true(q.shape[-2] == k.shape[-2]):
        return refuse(f"is_causal with {q.shape[-2]} queries and {k.shape[-2]} keys: SDPA aligns the causal mask "
                      f"top-left, the op bottom-right (they agree only for as many queries as keys)")
    if symbolic_scalar(match, "scale") or symbolic_scalar(match, "softcap"):
        return refuse("scale / softcap is a graph input (dynamic=True), not a constant")
    if "mask" in match.kwargs:
        mask = match_value(match, "mask")
        if mask is None:
            return refuse("the mask has no tensor value")
        if mask.dim() > 4:
            return refuse(f"the mask is {mask.dim()}-D (more than 4)")
        if needs_grad(match.kwargs["mask"]):
            # the op takes no gradient for the mask (a learnable bias stays eager's)
            return refuse("the mask needs a gradient (a learnable bias): the op gives it none")
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            return refuse(f"the mask is {mask.dtype}, neither bool nor float")
        if additive and mask.dtype == torch.bool:
            return refuse("a bool mask added to the scores (adds 0 / 1, not a mask)")
    return True


def _sinks_check(match) -> bool:
    sinks, q = match_value(match, "sinks"), match_value(match, "q")
    if not _attention_check(match, additive=True):
        return False
    if sinks is None:
        return refuse("sinks has no tensor value")
    if sinks.dim() != 1 or sinks.shape[0] != q.shape[1]:
        return refuse(f"sinks {list(sinks.shape)} is not one value per q head ({q.shape[1]})")
    return True


# ----------------------------------------------------------------------------------------------------- spellings
def _kv(k, v, q, kv_form):
    if kv_form == "repeat_kv":
        n_rep = q.shape[1] // k.shape[1]
        return repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    return k, v


def _sdpa_pattern(kv_form, has_mask, is_causal, has_scale):
    gqa = {"enable_gqa": True} if kv_form == "gqa" else {}

    def search(q, k, v, mask, scale):
        ks, vs = _kv(k, v, q, kv_form)
        scale_kw = {"scale": scale} if has_scale else {}
        return F.scaled_dot_product_attention(q, ks, vs, attn_mask=mask if has_mask else None, dropout_p=0.0,
                                              is_causal=is_causal, **scale_kw, **gqa)

    def replace(q, k, v, mask, scale):
        s = scale if has_scale and scale is not None else 1.0 / math.sqrt(q.shape[-1])  # SDPA's default
        return mojo.attention(q, k, v, mask if has_mask else None, None, s, is_causal)[0]

    params = ["q", "k", "v", *(["mask"] if has_mask else []), *(["scale"] if has_scale else [])]
    return with_signature(search, params), with_signature(replace, params)


def _eager_pattern(kv_form, has_mask, softcap, cast):
    def search(q, k, v, mask, scale, softcap_value):
        ks, vs = _kv(k, v, q, kv_form)
        w = torch.matmul(q, ks.transpose(2, 3)) * scale
        if softcap:
            w = torch.tanh(w / softcap_value) * softcap_value
        if has_mask:
            w = w + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32)
        if cast:
            w = w.to(q.dtype)
        return torch.matmul(w, vs)

    def replace(q, k, v, mask, scale, softcap_value):
        out, lse = mojo.attention(q, k, v, mask if has_mask else None, None, scale, False, 0,
                                  softcap_value if softcap else 0.0)
        return _nan_where_empty(out, lse) if has_mask else out

    params = ["q", "k", "v", *(["mask"] if has_mask else []), "scale", *(["softcap_value"] if softcap else [])]
    return with_signature(search, params), with_signature(replace, params)


def _nan_where_empty(out, lse):
    """Eager's softmax of a row with every score -inf is 0/0 = NaN, where the op's contract (SDPA's) gives 0 and lse
    -inf: the eager spellings put the NaN back, on exactly those rows (an elementwise epilogue Inductor fuses into
    the output's transpose). Its gradient passes through unchanged: the op's backward gives such a row none."""
    return out + torch.where(lse.isneginf(), float("nan"), 0.0).unsqueeze(-1).to(out.dtype)


def _sinks_pattern(kv_form, has_mask):
    """gpt-oss: a per-head sink logit joins the softmax (max-subtracted, in the logits' dtype) and is dropped."""
    def search(q, k, v, mask, sinks, scale):
        ks, vs = _kv(k, v, q, kv_form)
        w = torch.matmul(q, ks.transpose(2, 3)) * scale
        if has_mask:
            w = w + mask
        s = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
        logits = torch.cat([w, s], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(logits, dim=-1, dtype=logits.dtype)
        return torch.matmul(probs[..., :-1], vs)

    def replace(q, k, v, mask, sinks, scale):
        return mojo.attention(q, k, v, mask if has_mask else None, None, scale, False, 0, 0.0, sinks)[0]

    params = ["q", "k", "v", *(["mask"] if has_mask else []), "sinks", "scale"]
    return with_signature(search, params), with_signature(replace, params)


def _examples(kv_form, has_mask, dtypes, sinks=False):
    heads_kv = 4 if kv_form == "plain" else 2
    out = []
    for dtype in dtypes:
        q = torch.randn(2, 4, 5, 8, dtype=dtype)
        k, v = torch.randn(2, heads_kv, 5, 8, dtype=dtype), torch.randn(2, heads_kv, 5, 8, dtype=dtype)
        mask = torch.randn(2, 1, 5, 5, dtype=dtype if sinks else torch.float32)
        out.append((q, k, v, *([mask] if has_mask else []), *([torch.randn(4, dtype=dtype)] if sinks else [])))
    return out


def _register():
    for kv_form in ("repeat_kv", "gqa", "plain"):
        for has_mask, is_causal in ((True, False), (False, True), (False, False)):
            for has_scale in (True, False):
                name = f"attention.sdpa.{kv_form}" + (".mask" if has_mask else "") + (".causal" if is_causal else "") \
                    + ("" if has_scale else ".default_scale")
                register_pattern(name, *_sdpa_pattern(kv_form, has_mask, is_causal, has_scale),
                                 _examples(kv_form, has_mask, [torch.float32]),
                                 scalars={"scale": SCALE} if has_scale else {},
                                 extra_check=functools.partial(_attention_check, causal=is_causal),
                                 priority=20, family="attention", tell_tales=TELL_TALES, lazy=True)
    for kv_form in ("repeat_kv", "plain"):
        for has_mask in (True, False):
            for softcap in (False, True):
                for cast, dtype in ((True, torch.bfloat16), (False, torch.float32)):
                    name = f"attention.eager.{kv_form}" + (".mask" if has_mask else "") \
                        + (".softcap" if softcap else "") + ("" if cast else ".fp32")
                    register_pattern(name, *_eager_pattern(kv_form, has_mask, softcap, cast),
                                     _examples(kv_form, has_mask, [dtype]),
                                     scalars={"scale": SCALE, **({"softcap_value": SOFTCAP} if softcap else {})},
                                     extra_check=functools.partial(_attention_check, additive=True), priority=20,
                                     family="attention", lazy=True)
            register_pattern(f"attention.sinks.{kv_form}" + (".mask" if has_mask else ""),
                             *_sinks_pattern(kv_form, has_mask),
                             _examples(kv_form, has_mask, [torch.bfloat16, torch.float32], sinks=True),
                             scalars={"scale": SCALE}, extra_check=_sinks_check, priority=20, family="attention",
                             lazy=True)


_register()


# ------------------------------------------------------------------------------------------------ mask analysis
@dataclass
class MaskStructure:
    causal: bool
    window: int = 0
    keys: Optional[Node] = None  # a runtime [B, Skv] tensor: key j of batch b is allowed iff keys[b, j] != 0

    def describe(self) -> str:
        kind = ("causal" if self.causal else "") + (f", window {self.window}" if self.window else "")
        if self.keys is not None:
            kind = f"{kind} + key padding" if kind else "key padding"
        return kind or "none"


def _ancestors(node: Node) -> Optional[list[Node]]:
    """The nodes the mask is computed from, in graph order; None if any is a runtime input or has symbolic sizes."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return None  # depends on a runtime input (attention_mask, cache_position, a symbolic size)
        val = n.meta.get("val")
        for t in (val if isinstance(val, (tuple, list)) else [val]):
            if isinstance(t, torch.Tensor) and any(not isinstance(s, int) for s in t.shape):
                return None
        if n.op == "call_function" and _mutates(n) and n.target is not aten.detach_.default:
            return None  # (detach_ changes autograd metadata only: HF 5.17 detaches a lifted `torch.tensor(0.0)`)
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def _mutates(node: Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def evaluate_constant(gm: GraphModule, node: Node) -> Optional[torch.Tensor]:
    """The value of `node` when it depends on no runtime input: its subgraph copied and run once."""
    nodes = _ancestors(node)
    if nodes is None or any(_touched_by_mutation(n) for n in nodes):
        return None  # (a tensor written in place later, `m[:, 0] = True`, has another value where it is read)
    graph = torch.fx.Graph()
    env: dict = {}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[node])
    try:
        with real_tensors():  # whatever mode the compiler is in, this runs for real (small: index arithmetic)
            return GraphModule(gm, graph)()
    except Exception as e:  # a subgraph we cannot run at compile time stays a tensor
        log.debug("mojo attention: mask subgraph not evaluable: %s", e)
        return None


def classify(mask: torch.Tensor, sq: int, skv: int) -> Optional[MaskStructure]:
    """The structure `mask` is exactly, for every batch and head: causal (bottom-right), causal + sliding window,
    or no mask at all; None if it is anything else (or a row is fully masked, which the structure cannot express)."""
    if mask.dtype != torch.bool:
        values = mask.float().unique()
        if values.numel() > 2 or (values != 0).logical_and(values > -1e30).any():
            return None  # an additive mask that is not 0 / a huge negative (finfo.min, -inf)
        mask = mask == 0
    if mask.dim() > 4 or mask.shape[-2:] not in ((sq, skv), (1, skv), (sq, 1), (1, 1)):
        return None
    full = mask.expand(*mask.shape[:-2], sq, skv).reshape(-1, sq, skv)
    m = full[0]
    if not bool((full == m).all()):
        return None  # differs between batches or heads (padding): keep the tensor
    if bool(m.all()):
        return MaskStructure(causal=False)
    rows = torch.arange(skv - sq, skv, device=m.device)[:, None]
    cols = torch.arange(skv, device=m.device)[None, :]
    causal = cols <= rows
    if not bool(m.any(-1).all()):
        return None
    if torch.equal(m, causal):
        return MaskStructure(causal=True)
    window = int(m[-1].sum())  # the last row's allowed keys: the window
    if window > 0 and torch.equal(m, causal & (cols > rows - window)):
        return MaskStructure(causal=True, window=window)
    return None


def _arguments(node: Node) -> dict:
    """The op node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        else:
            values[arg.name] = node.kwargs.get(arg.name, arg.default_value)
    return values


def _boolean_part(gm: GraphModule, mask: Node) -> Optional[Node]:
    """The bool tensor an additive mask is made of: `where(allowed, 0, finfo.min or -inf)` -> allowed (the 0 a
    literal, a zeros tensor, or a constant 0-d tensor such as `torch.tensor(0.0)`)."""
    if mask.meta.get("val") is not None and mask.meta["val"].dtype == torch.bool:
        return mask
    if mask.target is aten.where.ScalarOther and len(mask.args) == 3:
        cond, zero, other = mask.args
        if isinstance(zero, Node) and zero.target not in (aten.zeros.default, aten.zeros_like.default):
            value = evaluate_constant(gm, zero)
            zero = 0 if value is not None and value.dim() == 0 and value.item() == 0 else zero
        zero_ok = zero == 0 or (isinstance(zero, Node) and zero.target in (aten.zeros.default, aten.zeros_like.default))
        if zero_ok and isinstance(other, (int, float)) and other <= -1e30:
            return cond
    return None


def _prove(gm: GraphModule, mask: Node, sq, skv) -> Optional[MaskStructure]:
    """Static sizes and no runtime input: run the subgraph once and compare. Otherwise (symbolic sizes, or the
    user's attention_mask among the inputs): evaluate it as a formula of the indices (mask_algebra) and compare the
    formulas."""
    if isinstance(sq, int) and isinstance(skv, int):
        value = evaluate_constant(gm, mask)
        if value is not None:
            return classify(value, sq, skv)
    allowed = _boolean_part(gm, mask)
    formula = mask_algebra.evaluate(allowed) if allowed is not None else None
    found = mask_algebra.structure(formula, sq, skv) if formula is not None else None
    if found is None:
        return None
    causal, window, keys = found
    if keys is None:
        return MaskStructure(causal, window)
    if allowed is not mask:
        return None  # additive: eager gives a fully padded row 1/n per key, a structure gives it nothing
    return MaskStructure(causal, window, next(n for n in gm.graph.nodes if n.name == keys))


def _key_padding_mask(gm: GraphModule, keys: Node, q: Node, k: Node, before: Node) -> Node:
    """`keys[:B, :Skv] != 0` as a [B, 1, 1, Skv] bool tensor, the key-padding form the kernels read one row of per
    key tile. The slices are there only where the graph does not say keys is [B, Skv]: the mask read keys[b, j]
    for b < B, j < Skv, and nothing more is known of its size."""
    graph, value = gm.graph, keys.meta["val"]
    node = keys
    with graph.inserting_before(before):
        for dim, (source, source_dim) in enumerate(((q, 0), (k, 2))):
            size = source.meta["val"].shape[source_dim]
            if mask_algebra.same_size(value.shape[dim], size):
                continue
            length = size
            if not isinstance(size, int):
                length = graph.call_function(aten.sym_size.int, (source, source_dim))
                length.meta["val"] = size
            node = graph.call_function(aten.slice.Tensor, (node, dim, 0, length))
            value = value.narrow(dim, 0, size)
            node.meta["val"] = value
        node = graph.call_function(aten.ne.Scalar, (node, 0))
        for dim in (1, 2):
            node = graph.call_function(aten.unsqueeze.default, (node, dim))
    node.meta["val"] = value.ne(0)[:, None, None, :]
    return node


def analyse_masks(gm: GraphModule) -> dict[Node, MaskStructure]:
    """Give each mojo.attention node whose mask is proven causal / sliding-window (+ key padding) that structure
    instead of the tensor. Returns node -> structure, for the report."""
    proven, cache, padding = {}, {}, {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not mojo.attention.default:
            continue
        args = _arguments(node)
        mask, q, k = args["mask"], args["q"].meta.get("val"), args["k"].meta.get("val")
        if not isinstance(mask, Node) or args["q_pos"] is not None or args["causal"] or args["window"] \
                or q is None or k is None:
            continue
        key = (mask, str(q.shape[2]), str(k.shape[2]))
        if key not in cache:
            cache[key] = _prove(gm, mask, q.shape[2], k.shape[2])
        structure = cache[key]
        if structure is None:
            continue
        mask_arg = None
        if structure.keys is not None:
            if key not in padding:
                padding[key] = _key_padding_mask(gm, structure.keys, args["q"], args["k"], node)
            mask_arg = padding[key]
        args.update(mask=mask_arg, causal=structure.causal, window=structure.window)
        target = args.pop("target")
        node.args = tuple(args.values())
        node.kwargs = {"target": target}
        proven[node] = structure
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return proven
