"""An independent stand-in for torch_npu: each op computes its DOCUMENTED formula in fp64 and raises where the
documentation says the input is not supported (op-plugin docs/zh/custom_APIs/torch_npu/*.md, HEAD 517f2e7d).
Raising is the stand-in's way to say "the real op refuses this (or its result is undefined)".

Quoted constraints (docs):
  FIA  query/key/value: "不支持非连续Tensor" (no non-contiguous tensors); "`key`与`value`的shape必须完全一致";
       Q_S > 1: "N轴：≤ 256", "D轴：≤ 512", "D对齐 ... float16/bfloat16 须16字节对齐" (D % 16; the zh source text
       before the rewrite said "输入类型全为float16、bfloat16时，D轴需16对齐"); Q_S = 1: N <= 256, D <= 512;
       "Q_S = 1且不带rope输入时，sparse_mode参数无效" and for sparse 0/1 "Q_S=1支持(B, KV_S)" / (B, 1, Q_S, KV_S);
       sparse 2/3/4: mask (2048, 2048) lower-triangular-style, True = masked; softmax_lse (B, N, Q_S, 1) fp32.
  npu_swiglu  "不支持非连续的Tensor，不支持空Tensor。数据类型支持float32、float16或bfloat16"; A = first half.
  npu_rotary_mul  half: r1/r2 BNSD: 11SD/B1SD/BNSD, BSND: 1S1D/BS1D/BSND, "B, N < 1000";
                  interleave: "B*N < 1000", r1/r2 "x为BNSD: 11SD; x为BSND: 1S1D" only.
  npu_rms_norm  y in x's dtype; gamma dtype table (fp16/bf16 x with fp32 or same-dtype gamma; fp32/fp32).
  npu_add_rms_norm  "不支持空Tensor"; gamma dtype = x1's; returns (y, rstd, x1 + x2).
"""
import types

import torch

CALLS = []


class Refused(RuntimeError):
    """The documented op does not take this input."""


def _contiguous(name, *tensors):
    for t in tensors:
        if not t.is_contiguous():
            raise Refused(f"{name}: non-contiguous input {tuple(t.shape)} stride {t.stride()}")


def npu_fused_infer_attention_score(query, key, value, *, atten_mask=None, num_heads=1, scale=1.0,
                                    input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                    softmax_lse_flag=False, pre_tokens=2147483647, next_tokens=2147483647,
                                    inner_precise=0, **unused):
    assert input_layout == "BNSD" and not unused, (input_layout, unused)
    CALLS.append(dict(op="fia", scale=scale, sparse_mode=sparse_mode, mask=atten_mask, q=query.shape))
    _contiguous("FIA", query, key, value)
    if atten_mask is not None:
        _contiguous("FIA atten_mask", atten_mask)
    if key.shape != value.shape:
        raise Refused(f"FIA: key {tuple(key.shape)} and value {tuple(value.shape)} must have the same shape")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise Refused(f"FIA: query dtype {query.dtype}")
    batch, heads, s_q, d = query.shape
    kv_heads = num_key_value_heads or heads
    if heads != num_heads or key.shape[1] != kv_heads or heads % kv_heads or heads // kv_heads > 64:
        raise Refused("FIA: heads")
    if heads > 256 or d > 512 or (s_q > 1 and d % 16):
        raise Refused(f"FIA: N={heads} D={d} outside N <= 256, D <= 512 (and D % 16 == 0 for Q_S > 1)")
    s_kv = key.shape[2]
    if s_q == 1:  # IncreFlashAttention branch: sparse_mode is ignored; a mask is (B, KV_S) / (B, 1, 1, KV_S)
        sparse_mode = 0
        if atten_mask is not None and (atten_mask.shape[0] != batch or atten_mask.shape[-1] < s_kv
                                       or atten_mask.dim() not in (2, 3, 4) or atten_mask.numel() != batch
                                       * atten_mask.shape[-1]):
            raise Refused(f"FIA Q_S=1: atten_mask {tuple(atten_mask.shape)} is not (B, KV_S)-like for B={batch}")
    group = heads // kv_heads
    k, v = (t.double().repeat_interleave(group, 1) for t in (key, value))
    scores = query.double() @ k.transpose(-1, -2) * scale
    if sparse_mode == 3:  # rightDownCausal: query i sees keys up to i + (Skv - Sq)
        assert atten_mask is not None and tuple(atten_mask.shape[-2:]) == (2048, 2048)
        assert torch.equal(atten_mask.reshape(2048, 2048), torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1))
        masked = torch.arange(s_kv)[None, :] > torch.arange(s_q)[:, None] + (s_kv - s_q)
    elif sparse_mode == 0:
        if atten_mask is None:
            masked = torch.zeros(s_q, s_kv, dtype=torch.bool)
        else:
            assert atten_mask.dtype == torch.bool
            masked = atten_mask[..., :s_kv]
            if s_q == 1 and masked.dim() == 2:
                masked = masked[:, None, None, :]
    else:
        raise Refused(f"sparse_mode {sparse_mode} not modelled")
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores, -1, keepdim=True)
    out = torch.exp(scores - lse) @ v  # NaN on a row with no key: what a kernel may return there
    return out.to(query.dtype), (lse.float() if softmax_lse_flag else torch.zeros(1))


def npu_rms_norm(x, gamma, epsilon=1e-6):
    CALLS.append(dict(op="rms_norm", gamma=gamma.dtype))
    ok = {(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float16, torch.float16),
          (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)}
    if (x.dtype, gamma.dtype) not in ok or x.dim() < 2:
        raise Refused(f"npu_rms_norm: {x.dtype}/{gamma.dtype}, {x.dim()}-d")
    rstd = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + epsilon)
    return (x.double() * rstd * gamma.double()).to(x.dtype), rstd.float()


def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6):
    CALLS.append(dict(op="add_rms_norm"))
    if x1.numel() == 0 or gamma.dtype != x1.dtype:
        raise Refused("npu_add_rms_norm: empty or gamma dtype")
    x = x1.double() + x2.double()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return (x * rstd * gamma.double()).to(x1.dtype), rstd.float(), x.to(x1.dtype)


def npu_swiglu(x, dim=-1):
    CALLS.append(dict(op="swiglu", contiguous=x.is_contiguous()))
    _contiguous("npu_swiglu", x)
    if x.numel() == 0 or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Refused(f"npu_swiglu: empty or {x.dtype}")
    a, b = x.double().chunk(2, dim)
    return (a * torch.sigmoid(a) * b).to(x.dtype)


def npu_rotary_mul(x, r1, r2, rotary_mode="half", rotate=None):
    CALLS.append(dict(op="rotary_mul", mode=rotary_mode, r=tuple(r1.shape), x=tuple(x.shape)))
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or x.dim() != 4:
        raise Refused("npu_rotary_mul: dtype / dims")
    d = x.shape[-1]
    if d >= 896 or d % 2:
        raise Refused("npu_rotary_mul: D")
    # the layout is read from the tables: accepted where r1 has a documented shape for x read as BNSD or BSND
    shapes = {("half", "BNSD"): ("11SD", "B1SD", "BNSD"), ("half", "BSND"): ("1S1D", "BS1D", "BSND"),
              ("interleave", "BNSD"): ("11SD",), ("interleave", "BSND"): ("1S1D",)}
    fits = []
    for layout in ("BNSD", "BSND"):
        b, n, s = (x.shape[0], x.shape[1], x.shape[2]) if layout == "BNSD" else (x.shape[0], x.shape[2], x.shape[1])
        letters = {"B": b, "N": n, "S": s, "D": d, "1": 1}
        if any(tuple(letters[c] for c in form) == tuple(r1.shape) for form in shapes[rotary_mode, layout]):
            fits.append((layout, b, n))
    if not fits:
        raise Refused(f"npu_rotary_mul {rotary_mode}: r1 {tuple(r1.shape)} for x {tuple(x.shape)} is not a "
                      f"documented table shape")
    _, b, n = fits[0]
    if (rotary_mode == "half" and max(b, n) >= 1000) or (rotary_mode == "interleave" and b * n >= 1000):
        raise Refused(f"npu_rotary_mul {rotary_mode}: B={b}, N={n}")
    x64 = x.double()
    if rotary_mode == "half":
        x1, x2 = x64.chunk(2, -1)
        rotated = torch.cat((-x2, x1), -1)
    else:
        rotated = torch.stack((-x64[..., 1::2], x64[..., ::2]), -1).flatten(-2)
    return (x64 * r1.double() + rotated * r2.double()).to(x.dtype)


def npu_add_layer_norm(x1, x2, gamma, beta, epsilon=1e-5, additional_output=False):
    CALLS.append(dict(op="add_layer_norm"))
    x = x1.double() + x2.double()
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + epsilon)
    y = ((x - mean) * rstd * gamma.double() + beta.double()).to(x1.dtype)
    return y, mean.float(), rstd.float(), x.to(x1.dtype) if additional_output else torch.empty(0)


def module():
    m = types.ModuleType("torch_npu")
    for name in ("npu_fused_infer_attention_score", "npu_rms_norm", "npu_add_rms_norm", "npu_swiglu",
                 "npu_rotary_mul", "npu_add_layer_norm"):
        setattr(m, name, globals()[name])
    return m


class OnNpu(torch.Tensor):
    """A meta tensor that says it is on an NPU (tests/test_npu.py's trick): for the `supports` checks only."""
    DEVICE = types.SimpleNamespace(type="npu", index=0)

    @property
    def device(self):
        return self.DEVICE


def on_npu(t):
    """A meta stand-in of t (same shape, strides, dtype) that reports device npu."""
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return torch.Tensor._make_subclass(OnNpu, meta)
