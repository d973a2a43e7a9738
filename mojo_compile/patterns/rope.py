"""RoPE spellings -> `mojo::rope` (q and k in one op), and qk-norm + RoPE -> `mojo::qk_norm_rope`
(docs/hf-spellings.md, section 4.2 and Q).

HF's `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)` unsqueezes cos/sin once for q and k; each pattern is
that whole function, so one op rotates both:

    R1        q * cos + rotate_half(q) * sin                  Llama, Qwen, Mistral, Gemma, OLMo (fp32 cos) ...
    R2 / R3   cat([rope(q[..., :r]), q[..., r:]], -1)         GPT-NeoX, Phi, StableLM, GLM-4-MoE (partial rotary)
    R4a       rotate_every_two: stack((-x[1::2], x[::2])).flatten(-2)
                                                              Cohere (full); cos/sin already repeat-interleaved
                                                              by the rotary module
    R4b       R4a after cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, -1) (and sin) inside apply
                                                              GLM, GLM-4, moonshine (partial, cat even when full),
                                                              Helium, ERNIE-4.5 in fp32 (full)
for unsqueeze_dim 1 (q as [B, H, S, D]) and 2 ([B, S, H, D]). The rotated width is cos's last dim and rotate_half
splits it in the middle: the patterns compute both from the shapes, as HF does, so Inductor's re-trace of each
candidate with the real shapes checks the graph's slice bounds exactly (no scalar to capture and check by hand).
R4b's half of the table is computed the same way, and its replacement repeats the same columns of the [B, S, R]
table for the op, so a table whose two halves differ rotates as eager's does.
Not covered (left unfused, as eager): R5 DeepSeek's de-interleaving output permutation, R6 complex
multiplication (`view_as_complex`, Llama4 / DeepSeek-V2), R8 GPT-OSS's half-width cos with `chunk`, ERNIE-4.5's R4b
in bf16 (`q.float() * cos + rotate_half(q).float() * sin`, cast back: casts the pattern has not).

qk-norm then RoPE (Q1: Qwen3, `q_norm(q.view(B, S, H, D)).transpose(1, 2)`; Q2: Gemma3, norm after the transpose)
is a second-stage pattern over the Mojo ops the first stage put there: rms_norm of q and of k feeding one rope
becomes one qk_norm_rope (q and k read once, normalised, rotated, written once). Q3 (OLMo2) normalises each token's
q over all heads (H * D), then views it as heads: the same op with norm_heads_together.
"""
from __future__ import annotations

import torch

from ..kernels.common import FLOAT_DTYPES
from . import match_value, needs_grad, refuse, register_pattern, symbolic_scalar, with_signature

mojo = torch.ops.mojo

EPS, OFFSET = 1.2345e-5, 3.125  # trace values: unlike any other literal in these patterns
ROT, HEAD_DIM = 74, 106  # trace shapes: the partial spellings pass 32 dims through


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


# One op returns both rotated q and k: where autograd wants a gradient through one only, eager's other result
# requires none, the op's would.
GRAD_SPLIT = "a gradient flows into q's side or k's side only: eager's other result requires none, the op's would"


def _rope_check(seq_dim, partial, interleaved):
    def check(match) -> bool:
        q, k, cos, sin = (match_value(match, n) for n in ("q", "k", "cos", "sin"))
        if any(t is None for t in (q, k, cos, sin)):
            return refuse("q, k, cos or sin has no tensor value")
        if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3:
            return refuse(f"q {q.dim()}-D, k {k.dim()}-D, cos {cos.dim()}-D: the op takes 4-D q, k and 3-D cos")
        if not (q.dtype in FLOAT_DTYPES and k.dtype in FLOAT_DTYPES and cos.dtype.is_floating_point):
            # (the backward computes in fp32: fp64 q and k would lose digits)
            return refuse(f"q {q.dtype}, k {k.dtype}, cos {cos.dtype}: not bf16 / fp16 / fp32 q and k, float cos")
        if needs_grad(match.kwargs["q"]) != needs_grad(match.kwargs["k"]):
            return refuse(GRAD_SPLIT)
        if cos.shape != sin.shape or cos.dtype != sin.dtype:
            return refuse(f"cos {cos.dtype}{list(cos.shape)} and sin {sin.dtype}{list(sin.shape)} differ")
        if needs_grad(match.kwargs["cos"]) or needs_grad(match.kwargs["sin"]):
            # the op takes no gradient for cos/sin (a learnable table stays eager's)
            return refuse("cos / sin need a gradient (a learnable table): the op gives them none")
        head_dim, rotary_dim = q.shape[-1], cos.shape[-1]
        if k.shape[-1] != head_dim:
            return refuse(f"q's head dim {head_dim} and k's {k.shape[-1]} differ")
        if rotary_dim % 2:
            return refuse(f"the rotary dim {rotary_dim} is odd")
        if not partial and rotary_dim != head_dim:
            return refuse(f"the rotary dim {rotary_dim} is not the head dim {head_dim} (a partial rotary)")
        if partial and not 0 < rotary_dim < head_dim:
            return refuse(f"the rotary dim {rotary_dim} is not between 0 and the head dim {head_dim}")
        seq = q.shape[seq_dim]
        if not (cos.shape[1] == seq and k.shape[seq_dim] == seq):
            return refuse(f"q's {seq} positions, k's {k.shape[seq_dim]} and cos's {cos.shape[1]} differ")
        if not (cos.shape[0] in (1, q.shape[0]) and k.shape[0] == q.shape[0]):
            return refuse(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, cos {cos.shape[0]}")
        return True
    return check


def _embed(x, c, s, rotate, partial):
    """HF's rotation of q or k by the broadcast cos / sin `c`, `s`: over the whole head, or (partial) over the
    first c.shape[-1] dims with the rest concatenated back."""
    if not partial:
        return x * c + rotate(x) * s
    rot = c.shape[-1]  # R2: the rotated width is cos's
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat([x_rot * c + rotate(x_rot) * s, x_pass], dim=-1)


def _rope_pattern(seq_dim, partial, interleaved):
    rotate = rotate_every_two if interleaved else rotate_half
    unsqueeze_dim = 3 - seq_dim  # cos [B, S, R] broadcast over the heads dim

    def search(q, k, cos, sin):
        c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return _embed(q, c, s, rotate, partial), _embed(k, c, s, rotate, partial)

    def replace(q, k, cos, sin):
        q_out, k_out = mojo.rope(q, k, cos, sin, cos.shape[-1], interleaved, seq_dim, False)
        return q_out, k_out

    return search, replace


def _first_half_repeated(table):
    """R4b's table: the first half of cos / sin's columns, each repeated twice in place (c0 c0 c1 c1 ...). The half
    is read from the shape, as GLM does: a literal in the trace, which Inductor's re-trace of each candidate with the
    real shapes checks against the graph's slice (start 0, end half the width) and repeat count exactly."""
    return table[..., : table.shape[-1] // 2].repeat_interleave(2, dim=-1)


def _half_table_pattern(seq_dim, partial):
    """R4b: the model unsqueezes cos / sin, keeps the first half of their columns repeat-interleaved, then rotates
    interleaved pairs over that width (GLM's apply_rotary_pos_emb). The replacement makes the same table from the
    [B, S, R] one and hands it to the op, which rotates by each column's own value."""
    unsqueeze_dim = 3 - seq_dim

    def search(q, k, cos, sin):
        c, s = _first_half_repeated(cos.unsqueeze(unsqueeze_dim)), _first_half_repeated(sin.unsqueeze(unsqueeze_dim))
        return _embed(q, c, s, rotate_every_two, partial), _embed(k, c, s, rotate_every_two, partial)

    def replace(q, k, cos, sin):
        c, s = _first_half_repeated(cos), _first_half_repeated(sin)
        q_out, k_out = mojo.rope(q, k, c, s, c.shape[-1], True, seq_dim, False)
        return q_out, k_out

    return search, replace


def _rope_examples(seq_dim, partial):
    head_dim = HEAD_DIM if partial else ROT
    rotary = ROT if partial else head_dim
    shape = (2, 4, 3, head_dim) if seq_dim == 2 else (2, 3, 4, head_dim)
    kshape = (2, 2, 3, head_dim) if seq_dim == 2 else (2, 3, 2, head_dim)
    return [(torch.randn(shape), torch.randn(kshape), torch.randn(2, 3, rotary), torch.randn(2, 3, rotary))]


for _seq_dim, _layout in ((2, "bhsd"), (1, "bshd")):
    for _partial in (False, True):
        for _interleaved in (False, True):
            _name = ("rope.interleaved" if _interleaved else "rope.rotate_half") + (".partial" if _partial else "") \
                + ("" if _seq_dim == 2 else f".{_layout}")
            register_pattern(_name, *_rope_pattern(_seq_dim, _partial, _interleaved),
                             _rope_examples(_seq_dim, _partial), priority=5 if _partial else 4,
                             extra_check=_rope_check(_seq_dim, _partial, _interleaved), family="rope", lazy=True)

# R4b. _rope_check is exact for it: it refuses a table R of odd width, so the repeated half is 2 * (R // 2) = R wide,
# the rotary width the check compares with the head dim (R == D, or 0 < R < D when partial) and the op is given.
for _seq_dim, _layout in ((2, "bhsd"), (1, "bshd")):
    for _partial in (False, True):
        _name = "rope.interleaved.half_table" + (".partial" if _partial else "") \
            + ("" if _seq_dim == 2 else f".{_layout}")
        register_pattern(_name, *_half_table_pattern(_seq_dim, _partial), _rope_examples(_seq_dim, _partial),
                         priority=5 if _partial else 4, extra_check=_rope_check(_seq_dim, _partial, True),
                         family="rope", lazy=True)


# ------------------------------------------------------------------------------------------- qk-norm + RoPE (stage 2)
def _qk_check(match) -> bool:
    q, k, qw, kw, cos = (match_value(match, n) for n in ("q", "k", "q_weight", "k_weight", "cos"))
    if any(t is None for t in (q, k, qw, kw, cos)):
        return refuse("q, k, a norm weight or cos has no tensor value")
    if symbolic_scalar(match, "eps") or symbolic_scalar(match, "offset"):
        return refuse("eps / offset is a graph input (dynamic=True), not a constant")
    if qw.dim() != 1 or kw.dim() != 1:
        return refuse(f"the norm weights are {qw.dim()}-D and {kw.dim()}-D, not one value per column")
    if any(needs_grad(match.kwargs[n]) for n in ("q", "q_weight")) != any(
            needs_grad(match.kwargs[n]) for n in ("k", "k_weight")):
        return refuse(GRAD_SPLIT)
    if q.dim() == 3:  # Q3: one weight over the token's H*D
        head_dim = cos.shape[-1]
        if not (qw.shape == q.shape[-1:] and kw.shape == k.shape[-1:]):
            return refuse(f"the norm weights {list(qw.shape)}, {list(kw.shape)} are not one value per column of "
                          f"q {list(q.shape)}, k {list(k.shape)}")
        if not (q.shape[-1] % head_dim == 0 and k.shape[-1] % head_dim == 0):
            return refuse(f"q's {q.shape[-1]} or k's {k.shape[-1]} columns are not whole heads of {head_dim}")
        return True
    if not (qw.shape[0] == q.shape[-1] and kw.shape[0] == k.shape[-1]):
        return refuse(f"the norm weights {list(qw.shape)}, {list(kw.shape)} are not one value per column of "
                      f"q {list(q.shape)}, k {list(k.shape)}")
    return True


def _heads(x, head_dim):
    """Q3: [B, S, H*D] -> [B, S, H, D], as OLMo2's `.view(*input_shape, -1, head_dim)` (full rotary: D is cos's)."""
    return x.view(x.shape[0], x.shape[1], -1, head_dim)


def _qk_pattern(cast, layout, with_offset):
    """Q1: q, k [B, S, H, D], normalised per head, transposed for a seq_dim=2 rope (Qwen3).
    Q2: q, k already [B, H, S, D] (Gemma3).  Q3: q, k [B, S, H*D] normalised per token, viewed as heads,
    transposed (OLMo2). Without `with_offset` the norms carry the defaults (offset 0, "normed"), which the graph's
    op nodes leave out of their arguments (an fp32 graph matches that form whatever its spelling: the same math)."""
    def norm(x, weight, eps, offset):
        return (mojo.rms_norm(x, weight, eps, offset, cast) if with_offset else mojo.rms_norm(x, weight, eps))[0]

    def search(q, k, q_weight, k_weight, cos, sin, eps, offset):
        rot = cos.shape[-1]  # a literal in the trace: Inductor's re-trace with the real shapes checks it
        qn, kn = norm(q, q_weight, eps, offset), norm(k, k_weight, eps, offset)
        if layout == "q3":
            qn, kn = _heads(qn, rot), _heads(kn, rot)
        if layout != "q2":
            qn, kn = qn.transpose(1, 2), kn.transpose(1, 2)
        q_out, k_out = mojo.rope(qn, kn, cos, sin, rot, False, 2, False)
        return q_out, k_out

    def replace(q, k, q_weight, k_weight, cos, sin, eps, offset):
        rot = cos.shape[-1]
        if layout == "q3":
            q, k = _heads(q, rot), _heads(k, rot)
        q_out, k_out, _, _ = mojo.qk_norm_rope(q, k, q_weight, k_weight, eps, offset if with_offset else 0.0, cast,
                                               cos, sin, rot, False, 2 if layout == "q2" else 1, layout == "q3")
        if layout == "q2":
            return q_out, k_out
        return q_out.transpose(1, 2), k_out.transpose(1, 2)

    params = ["q", "k", "q_weight", "k_weight", "cos", "sin", "eps", *(["offset"] if with_offset else [])]
    return with_signature(search, params, {"offset": 0.0}), with_signature(replace, params, {"offset": 0.0})


def _qk_examples(layout):
    d = ROT
    if layout == "q3":
        q, k, qw, kw = torch.randn(2, 3, 4 * d), torch.randn(2, 3, 2 * d), torch.randn(4 * d), torch.randn(2 * d)
    else:
        q, k = ((torch.randn(2, 3, h, d) if layout == "q1" else torch.randn(2, h, 3, d)) for h in (4, 2))
        qw, kw = torch.randn(d), torch.randn(d)
    return [(q, k, qw, kw, torch.randn(2, 3, d), torch.randn(2, 3, d))]


for _cast, _with_offset in (("normed", False), ("normed", True), ("output", True)):
    for _layout in ("q1", "q2", "q3"):
        _scalars = {"eps": EPS, **({"offset": OFFSET} if _with_offset else {})}
        register_pattern(f"qk_norm_rope.{_layout}.{_cast}" + ("" if _with_offset else ".no_offset"),
                         *_qk_pattern(_cast, _layout, _with_offset), _qk_examples(_layout), scalars=_scalars,
                         extra_check=_qk_check, priority=-10, family="qk_norm_rope", lazy=True)
