"""The mask prover on near-misses: masks that look causal / windowed / padded but are not, or that are and must keep
every part. Each gives eager's numbers, whatever structure is (or is not) proven. Static shapes (the mask subgraph
run once) and dynamic=True (the mask as a formula of its indices: patterns/mask_algebra.py)."""
import pytest
import torch
import torch.nn.functional as F

import mojo_compile
from conftest import DEVICE, TARGETS as KERNEL_TARGETS, WITH_INDUCTOR, mojo_options

TARGETS = WITH_INDUCTOR  # every prover case also through Inductor
B, H, S, D = 2, 2, 7, 8


def compiled(fn, target, dynamic):
    return torch.compile(fn, backend="mojo", dynamic=dynamic, options=mojo_options(target))


def qkv():
    return tuple(torch.randn(B, H, S, D, device=DEVICE) for _ in range(3))


def check(fn, target, dynamic, *extra):
    q, k, v = qkv()
    got = compiled(fn, target, dynamic)(q, k, v, *extra)
    torch.testing.assert_close(got, fn(q, k, v, *extra), rtol=1e-5, atol=1e-5)  # fp32 in both, another order
    return mojo_compile.last_report()


def causal_and_bool_padding(q, k, v, am):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = (j <= i)[None, None] & (am[:, None, None, :] != 0)  # am is bool: `!= 0` is am itself
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_causal_and_bool_attention_mask_keeps_the_padding(dynamic, target):
    am = torch.ones(B, S, dtype=torch.bool, device=DEVICE)
    am[1, :3] = False  # left padding in row 1
    report = check(causal_and_bool_padding, target, dynamic, am)
    assert report.counts() == {"mojo.attention": 1}


def window_with_sink(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = (j <= i) & (j > i - 3)
    mask[:, 0] = True  # a sink token every query sees, written after the window was built
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_mask_written_in_place_after_it_was_built(target):
    report = check(window_with_sink, target, False)
    for site in report.sites:  # fused with the tensor, or not at all: never "causal, window 3"
        assert "window" not in site.detail, site


def causal_then_foreach_bias(q, k, v, bias):
    s = q.shape[2]
    above = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    mask = torch.zeros(s, s, dtype=q.dtype, device=q.device).masked_fill(above, float("-inf"))
    torch._foreach_add_([mask], [bias])  # a write through a list argument (`Tensor(a!)[]`), after it was built
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_mask_written_through_a_foreach_list_keeps_the_write(target):
    """The mask is causal only until a `_foreach_add_` adds a bias to it: a prover that reads writes off single
    tensor arguments alone proves it causal and drops the bias."""
    bias = torch.randn(S, S, device=DEVICE) * 3
    report = check(causal_then_foreach_bias, target, False, bias)
    for site in report.sites:
        assert "causal" not in site.detail, site


def broadcast_arange_of_one(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None] + torch.arange(1, device=q.device)  # + 0, broadcast
    j = torch.arange(s, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i)[None, None])  # 4-D: the prover's form


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_size_one_dim_reads_element_zero(dynamic, target):
    """`arange(1)` broadcast against a row index is 0 at every row, not the row's index: the mask is causal (and
    proven so, on the symbolic path too)."""
    report = check(broadcast_arange_of_one, target, dynamic)
    assert [s.detail for s in report.sites] == ["mask: causal (proven from the mask subgraph)"]


def shifted_with_alpha(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = j <= torch.add(i, i, alpha=-1) + i  # i - i + i: causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])  # 4-D: the prover's form


def alpha_two(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    mask = j <= torch.add(i, i, alpha=2) - i  # i + 2i - i = 2i: not causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [shifted_with_alpha, alpha_two], ids=["alpha=-1", "alpha=2"])
def test_add_with_alpha_in_a_mask(fn, dynamic, target):
    """The prover gives up on an alpha (the static path runs the subgraph, which honours it); the numbers are
    eager's either way."""
    report = check(fn, target, dynamic)
    if fn is alpha_two:
        assert [s.detail for s in report.sites] == ["mask: tensor"]


# -------------------------------------------------------------------------------- runtime query positions
# A StaticCache's masks: key j (a cache slot) is allowed for query i iff j <= its position, the positions being
# runtime data (cache_position, or the cache's write counter). Proven, they become causal attention at those
# positions (the op's q_pos), so the kernels read only the keys up to the last position.
CACHE = 13  # Skv: the whole cache, longer than the queries


class CounterCache(torch.nn.Module):
    """A cache with a write counter, as transformers' static cache layers keep one: the step builds its mask from
    the counter, then writes its keys at the counter and increments it (in place, after the mask was built)."""

    def __init__(self, window=0, additive=False, bump_first=False):
        super().__init__()
        self.register_buffer("k", torch.zeros(B, H, CACHE, D, device=DEVICE))
        self.register_buffer("v", torch.zeros(B, H, CACHE, D, device=DEVICE))
        self.register_buffer("count", torch.tensor(0, device=DEVICE))
        self.window, self.additive, self.bump_first = window, additive, bump_first

    def forward(self, q, k, v):
        s = q.shape[2]
        if self.bump_first:  # the counter moved before the mask reads it: the mask sees the new value
            self.count.add_(s)
        positions = self.count + torch.arange(s, device=q.device) - (s if self.bump_first else 0)
        j = torch.arange(CACHE, device=q.device)
        mask = j[None, None, None, :] <= positions[None, None, :, None]
        if self.window:
            mask = mask & (j[None, None, None, :] > positions[None, None, :, None] - self.window)
        slots = positions.clamp(max=CACHE - 1)
        self.k.index_copy_(2, slots, k)
        self.v.index_copy_(2, slots, v)
        if not self.bump_first:
            self.count.add_(s)
        if self.additive:
            mask = torch.where(mask, 0.0, torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask.expand(q.shape[0], 1, -1, -1))


def run_steps(cache, compiled_cache, lengths):
    """Prefill then decode steps, the compiled cache against the eager one (each step's fresh q, k, v)."""
    for s in lengths:
        q, k, v = (torch.randn(B, H, s, D, device=DEVICE) for _ in range(3))
        got, want = compiled_cache(q, k, v), cache(q, k, v)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # fp32 in both, another order
    torch.testing.assert_close(compiled_cache.count, cache.count, rtol=0, atol=0)
    return mojo_compile.last_report()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("window", [0, 3])
def test_write_counter_positions_become_causal_at_those_positions(window, target):
    """The counter is incremented in place after the mask read it: the positions are the value it had there (the
    steps' outputs would be one key off otherwise). Prefill 4 and 1-token steps, past the window."""
    eager, module = CounterCache(window), CounterCache(window)
    compiled_module = torch.compile(module, backend="mojo", options=mojo_options(target))
    report = run_steps(eager, compiled_module, [4, 1, 1, 1, 1])
    expected = "causal" + (f", window {window}" if window else "") + " at the query positions from"
    details = [s.detail for s in report.sites]
    assert details and all(d.startswith(f"mask: {expected}") for d in details), details


@pytest.mark.parametrize("target", TARGETS)
def test_counter_moved_before_the_mask_keeps_the_tensor(target):
    """Written in place before the mask reads it: not a function of the graph's input value, never proven."""
    eager, module = CounterCache(bump_first=True), CounterCache(bump_first=True)
    report = run_steps(eager, torch.compile(module, backend="mojo", options=mojo_options(target)), [3, 1, 1])
    assert {s.detail for s in report.sites} == {"mask: tensor"}


@pytest.mark.parametrize("target", TARGETS)
def test_additive_mask_at_runtime_positions_keeps_the_tensor(target):
    """Additive: a row with no allowed key (a position before the first slot) is uniform in eager, empty under a
    structure; the positions are data, so such a row cannot be ruled out."""
    eager, module = CounterCache(additive=True), CounterCache(additive=True)
    report = run_steps(eager, torch.compile(module, backend="mojo", options=mojo_options(target)), [3, 1])
    assert {s.detail for s in report.sites} == {"mask: tensor"}


def at_positions(q, k, v, positions):
    mask = torch.arange(k.shape[2], device=q.device)[None, :] <= positions[:, None]  # 2-D: broadcast by SDPA
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def at_batch_positions(q, k, v, positions):
    mask = torch.arange(k.shape[2], device=q.device)[None, None, None, :] <= positions[:, None, :, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_positions_in_any_order_and_out_of_range(dynamic, target):
    """Positions as data: unordered, past the last key (every key allowed) and before the first (a row with no key:
    0, as eager's SDPA gives)."""
    q, k, v = torch.randn(B, H, 5, D, device=DEVICE), *(torch.randn(B, H, 11, D, device=DEVICE) for _ in range(2))
    positions = torch.tensor([6, 2, 30, -1, 9], device=DEVICE)
    got = compiled(at_positions, target, dynamic)(q, k, v, positions)
    torch.testing.assert_close(got, at_positions(q, k, v, positions), rtol=1e-5, atol=1e-5)
    details = [s.detail for s in mojo_compile.last_report().sites]
    assert details and all(d.startswith("mask: causal at the query positions from arg") for d in details), details


@pytest.mark.parametrize("target", TARGETS)
def test_positions_per_batch_keep_the_tensor(target):
    """position_ids-style [B, Sq] positions: the op has one position per query row, so this is not proven."""
    q, k, v = torch.randn(B, H, 4, D, device=DEVICE), *(torch.randn(B, H, 9, D, device=DEVICE) for _ in range(2))
    positions = torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]], device=DEVICE)
    got = compiled(at_batch_positions, target, False)(q, k, v, positions)
    torch.testing.assert_close(got, at_batch_positions(q, k, v, positions), rtol=1e-5, atol=1e-5)
    assert {s.detail for s in mojo_compile.last_report().sites} == {"mask: tensor"}


def additive_window_with_sink(q, k, v):
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    allowed = (j <= i) & (j > i - 3)
    allowed[:, 0] = True  # written after it was built, before the additive mask reads it
    zero = torch.zeros((), device=q.device)  # HF's spelling, where(allowed, tensor 0, finfo.min): where.ScalarOther
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(allowed, zero, torch.finfo(q.dtype).min))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_bool_part_of_an_additive_mask_written_in_place(dynamic, target):
    """The additive mask is computed from the bool one after the in-place write: its formula is not the window's."""
    report = check(additive_window_with_sink, target, dynamic)
    for site in report.sites:
        assert "window" not in site.detail, site


# ------------------------------------------------------------------------------------------------------------------
# A negative index in the mask's subgraph, a mask larger than the scores, a NaN in a constant mask.
def wrapped_positions(q, k, v):
    """Row i may attend keys j <= rows[i - 1] + 1; at i = 0 torch wraps the index -1 to the last row, so row 0
    attends every key: not causal."""
    rows = torch.arange(q.shape[2], device=q.device)
    cols = torch.arange(k.shape[2], device=q.device)
    mask = cols[None, :] <= (rows[rows - 1] + 1)[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", KERNEL_TARGETS)
def test_a_negative_index_in_the_mask_wraps_as_torch_does(target):
    """dynamic=True: mask_algebra substitutes an index not provably >= 0 with torch's wrap (`i + size where
    i < 0`). It substituted `X - 1` as is and proved the mask causal: row 0 attended key 0 alone (error ~2)."""
    check(wrapped_positions, target, True)


def eager_attention(q, k, v, mask):
    """HF's eager spelling: scores + mask, fp32 softmax, cast, @ v."""
    w = q @ k.transpose(2, 3) * q.shape[-1] ** -0.5 + mask
    return F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype) @ v


@pytest.mark.parametrize("target", KERNEL_TARGETS)
@pytest.mark.parametrize("q_shape,mask_shape", [((1, 4, 5, 8), (2, 1, 5, 5)), ((2, 1, 5, 8), (2, 4, 5, 5)),
                                                ((2, 4, 1, 8), (2, 1, 3, 5))], ids=["batch", "heads", "rows"])
def test_a_mask_larger_than_the_scores_is_eagers(q_shape, mask_shape, target):
    """`scores + mask` with a mask larger than the scores in a dim where they have 1 (a batch-1 q under a batch-2
    mask, one head under per-head biases, one query row under three): eager broadcasts the scores up and returns
    the larger output. The site is refused; it fused, and the op raised "mask does not broadcast" at run time."""
    q = torch.randn(q_shape, device=DEVICE)
    k, v = (torch.randn(*q_shape[:2], 5, 8, device=DEVICE) for _ in range(2))
    mask = torch.randn(mask_shape, device=DEVICE)
    got = compiled(eager_attention, target, False)(q, k, v, mask)
    torch.testing.assert_close(got, eager_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert "mojo.attention" not in mojo_compile.last_report().counts()


def nan_above_the_diagonal(q, k, v):
    s = q.shape[2]
    above = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(s, s, device=q.device).masked_fill(
        above, float("nan")))


@pytest.mark.parametrize("target", KERNEL_TARGETS)
def test_a_nan_in_a_constant_additive_mask_is_not_a_masked_entry(target):
    """One NaN in a constant additive mask: eager's rows that add it are NaN. mask_analysis.classify let {0, NaN}
    through (NaN is neither != 0 and > -1e30 nor refused) and `mask == 0` made the NaN "masked": proven causal,
    finite rows."""
    q, k, v = (torch.randn(2, 4, 2, 8, device=DEVICE) for _ in range(3))
    want = nan_above_the_diagonal(q, k, v)
    assert want.isnan().any()
    got = compiled(nan_above_the_diagonal, target, False)(q, k, v)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-5)


def offset_positions(q, k, v, cp):
    """Query positions `cp + 100 + i`: `cp + 100` is computed in cp's dtype (a 0-d uint8 / int16 wraps), then
    promoted to int64 by the arange."""
    j = torch.arange(k.shape[2], device=q.device)
    pos = (cp + 100)[None] + torch.arange(q.shape[2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= pos[:, None])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,value", [(torch.uint8, 160), (torch.int16, 32700), (torch.int32, 160),
                                         (torch.int64, 160)], ids=["uint8", "int16", "int32", "int64"])
def test_positions_in_a_narrow_integer_dtype_wrap_as_eager(dtype, value, target):
    """The formulas are exact integers; arithmetic in a narrower dtype wraps (uint8 160 + 100 is 4: keys up to
    4 + i; int16 32700 + 100 is negative: no key, eager's 0), so it is not modelled and the mask stays a tensor.
    Runtime positions of a narrow dtype that are not added to in it are summed in int64, as eager promotes them."""
    q = torch.randn(1, 2, 3, 8, device=DEVICE)
    k, v = (torch.randn(1, 2, 300, 8, device=DEVICE) for _ in range(2))
    cp = torch.tensor(value, dtype=dtype, device=DEVICE)
    got = compiled(offset_positions, target, False)(q, k, v, cp)
    torch.testing.assert_close(got, offset_positions(q, k, v, cp), rtol=1e-5, atol=1e-5)  # fp32, another order
    proven = [s.detail.startswith("mask: causal at the query positions") for s in mojo_compile.last_report().sites]
    assert proven == [dtype == torch.int64], mojo_compile.last_report().sites


def narrow_positions_read_directly(q, k, v, cp):
    j = torch.arange(k.shape[2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= cp[:, None] + 200)


@pytest.mark.parametrize("target", TARGETS)
def test_narrow_positions_promoted_before_the_sum(target):
    """int16 positions plus a Python int: eager adds in int16 (200 + 32700 wraps); not modelled, eager's numbers."""
    q = torch.randn(1, 2, 2, 8, device=DEVICE)
    k, v = (torch.randn(1, 2, 300, 8, device=DEVICE) for _ in range(2))
    cp = torch.tensor([32700, 5], dtype=torch.int16, device=DEVICE)
    got = compiled(narrow_positions_read_directly, target, False)(q, k, v, cp)
    torch.testing.assert_close(got, narrow_positions_read_directly(q, k, v, cp), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_batch_of_one_with_an_attention_mask_is_causal_with_key_padding(dynamic, target):
    """A single prompt with its attention_mask (`model(**tokenizer(prompt))`): the broadcast reads the mask's row 0,
    which for a batch of 1 is every batch's row: proven causal + key padding, with eager's numbers (padded rows
    included)."""
    q, k, v = (torch.randn(1, H, S, D, device=DEVICE) for _ in range(3))
    am = torch.ones(1, S, dtype=torch.long, device=DEVICE)
    am[0, :2] = 0
    fn = causal_and_bool_padding
    got = compiled(fn, target, dynamic)(q, k, v, am)
    torch.testing.assert_close(got, fn(q, k, v, am), rtol=1e-5, atol=1e-5)
    assert [s.detail for s in mojo_compile.last_report().sites] == \
        ["mask: causal + key padding (proven from the mask subgraph)"]


def row_zero_for_every_batch(q, k, v, am):
    """The mask reads attention_mask's row 0 for every batch: not key padding per batch."""
    s = q.shape[2]
    i = torch.arange(s, device=q.device)[:, None]
    j = torch.arange(s, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i)[None, None] & (am[:1, None, None, :] != 0))


@pytest.mark.parametrize("target", TARGETS)
def test_row_zero_of_the_attention_mask_for_a_batch_of_two(target):
    """Batch 2 with a mask made of the attention_mask's first row: eager's numbers (its rows differ)."""
    q, k, v = qkv()
    am = torch.ones(B, S, dtype=torch.long, device=DEVICE)
    am[0, :2] = 0
    am[1, :4] = 0
    check(row_zero_for_every_batch, target, False, am)


def static_cache_mask(q, k, v, cp, am):
    """HF's mask for a StaticCache: attention_mask padded with 0 to the cache length (the unfilled slots), then
    `kv <= cache_position[q]` and `padding[b, kv]`."""
    am = F.pad(am, (0, k.shape[2] - am.shape[1]))
    j = torch.arange(k.shape[2], device=q.device)
    mask = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("target", TARGETS)
def test_static_cache_mask_with_a_padded_attention_mask(target):
    """The padded attention_mask is a runtime tensor of its own: causal at the query positions + key padding read
    from the padded tensor, with eager's numbers (a padded prompt, the cache's unfilled slots)."""
    q = torch.randn(2, 2, 1, 8, device=DEVICE)
    k, v = (torch.randn(2, 2, 16, 8, device=DEVICE) for _ in range(2))
    cp = torch.tensor([7], device=DEVICE)
    am = torch.ones(2, 8, dtype=torch.long, device=DEVICE)
    am[1, :3] = 0
    got = compiled(static_cache_mask, target, False)(q, k, v, cp, am)
    torch.testing.assert_close(got, static_cache_mask(q, k, v, cp, am), rtol=1e-5, atol=1e-5)
    assert all(s.detail.startswith("mask: causal at the query positions") and "key padding" in s.detail
               for s in mojo_compile.last_report().sites), mojo_compile.last_report().sites


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("side,value", [("right", 0), ("left", 0), ("right", 1)],
                         ids=["unfilled-tail-masked", "padded-on-the-left", "unfilled-tail-allowed"])
def test_padded_attention_mask_is_read_as_padded_whatever_the_pad(side, value, dynamic, target):
    """HF's `F.pad(attention_mask, (0, cache_len - width))`: under symbolic sizes the pad amount is a size the graph
    computes (`sub` of two sizes), read as a size. The pad's output is a runtime tensor of its own, so a pad on the
    other side, or with ones, is read as it is: key padding from that tensor, never from the unpadded one."""
    def fn(q, k, v, cp, am):
        amount = k.shape[2] - am.shape[1]
        am = F.pad(am, (0, amount) if side == "right" else (amount, 0), value=value)
        j = torch.arange(k.shape[2], device=q.device)
        mask = (j[None, None, None, :] <= cp[None, None, :, None]) & am[:, None, None, :].bool()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q = torch.randn(2, 2, 1, 8, device=DEVICE)
    k, v = (torch.randn(2, 2, 16, 8, device=DEVICE) for _ in range(2))
    cp = torch.tensor([9], device=DEVICE)
    am = torch.ones(2, 8, dtype=torch.long, device=DEVICE)
    am[1, :3] = 0
    got = compiled(fn, target, dynamic)(q, k, v, cp, am)
    torch.testing.assert_close(got, fn(q, k, v, cp, am), rtol=1e-5, atol=1e-5)
    details = [s.detail for s in mojo_compile.last_report().sites]
    assert details and all(d.startswith("mask: causal at the query positions from") and "key padding" in d
                           for d in details), details


def look_ahead_through_a_computed_size(q, k, v):
    """`j <= i + 1`, with the queries' arange one longer than the queries (a size computed in the graph)."""
    i = torch.arange(q.shape[2] + 1, device=q.device)[1:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i)[None, None])


@pytest.mark.parametrize("target", TARGETS)
def test_a_size_computed_in_the_graph_is_not_taken_for_another(target):
    """dynamic=True: `arange(s + 1)[1:]` is the query index + 1, whatever s: the mask looks one key ahead, never
    plain causal (as many queries as keys: it stays a tensor); eager's numbers."""
    report = check(look_ahead_through_a_computed_size, target, True)
    assert [s.detail for s in report.sites] == ["mask: tensor"], report.sites


# -------------------------------------------------------------------------------- a prefill into a longer cache
# HF's StaticCache prefill with padding: Sq queries at positions 0..Sq-1 of a cache of Skv slots, the mask
# `j <= i & pad(attention_mask)[b, j] != 0` over the whole cache. No runtime position tensor: the positions are
# i + c, which the op gets as q_pos = arange(Sq) + c.
class PrefillIntoCache(torch.nn.Module):
    """`j <= i + offset` (and `j > i + offset - window`) with key padding over a cache of k's length. The ints are
    the module's attributes, which Dynamo keeps constant, as HF's config values are (a closure's int is an input
    of its own under dynamic=True)."""

    def __init__(self, offset, window=0, additive=False, keys_at_query=False):
        super().__init__()
        self.offset, self.window, self.additive, self.keys_at_query = offset, window, additive, keys_at_query

    def forward(self, q, k, v, am):
        am = F.pad(am, (0, k.shape[2] - am.shape[1]))
        i = torch.arange(q.shape[2], device=q.device)[:, None]
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        allowed = j <= i + self.offset
        if self.window:
            allowed = allowed & (j > i + self.offset - self.window)
        padding = am[:, None, :q.shape[2], None] if self.keys_at_query else am[:, None, None, :]
        mask = allowed[None, None] & (padding != 0)
        if self.additive:
            mask = torch.where(mask, 0.0, torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def prefill_inputs(sq=5, skv=CACHE, width=7):
    q = torch.randn(B, H, sq, D, device=DEVICE)
    k, v = (torch.randn(B, H, skv, D, device=DEVICE) for _ in range(2))
    am = torch.ones(B, width, dtype=torch.long, device=DEVICE)
    am[1, :2] = 0  # left padding in row 1
    return q, k, v, am


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("offset,window,expected", [
    (0, 0, "causal at the query positions (i)"), (3, 0, "causal at the query positions (i + 3)"),
    (-2, 0, "causal at the query positions (i - 2)"), (2, 3, "causal, window 3 at the query positions (i + 2)")],
    ids=["top-left", "offset", "rows-before-the-first-key", "window"])
def test_prefill_into_a_longer_cache_is_causal_at_the_query_positions(offset, window, expected, dynamic, target):
    """7 queries under 13 keys: proven at q_pos = arange(Sq) + offset, the offset the mask has (rows whose position is
    before the first key are empty: 0, as eager's SDPA gives); eager's numbers."""
    fn = PrefillIntoCache(offset, window)
    q, k, v, am = prefill_inputs()
    got = compiled(fn, target, dynamic)(q, k, v, am)
    torch.testing.assert_close(got, fn(q, k, v, am), rtol=1e-5, atol=1e-5)
    details = [s.detail for s in mojo_compile.last_report().sites]
    assert details and all(d == f"mask: {expected} + key padding (proven from the mask subgraph)"
                           for d in details), details


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [PrefillIntoCache(-2, additive=True), PrefillIntoCache(0, keys_at_query=True)],
                         ids=["additive", "padding-read-at-the-query"])
def test_prefill_masks_that_are_not_causal_at_positions_keep_the_tensor(fn, target):
    """An additive mask whose first rows have no key (eager gives them 1/n per key, a structure 0), and padding read
    at the query instead of the key: neither is the structure; eager's numbers."""
    q, k, v, am = prefill_inputs()
    got = compiled(fn, target, False)(q, k, v, am)
    torch.testing.assert_close(got, fn(q, k, v, am), rtol=1e-5, atol=1e-5)
    assert {s.detail for s in mojo_compile.last_report().sites} == {"mask: tensor"}


def key_padding_only(q, k, v, am):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=am[:, None, None, :] != 0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_key_padding_alone_is_proven_for_fewer_queries_than_keys(dynamic, target):
    """No causal part (cross-attention over a padded source): key padding whatever the alignment."""
    q, k, v, am = prefill_inputs(width=CACHE)
    got = compiled(key_padding_only, target, dynamic)(q, k, v, am)
    torch.testing.assert_close(got, key_padding_only(q, k, v, am), rtol=1e-5, atol=1e-5)
    assert {s.detail for s in mojo_compile.last_report().sites} == {"mask: key padding (proven from the mask subgraph)"}


def first_row_for_every_batch(q, k, v, am):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=am[:1, None, None, :].bool())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_one_row_of_the_attention_mask_broadcast_to_every_batch_is_not_per_batch_padding(dynamic, target):
    """`am[:1]` (a size-1 batch dim) is row 0 for each batch under SDPA's broadcast: the formula reads element 0
    there, not `am[b, j]` (proven "key padding" per batch, batch 1 read its own row: error ~3)."""
    q, k, v = qkv()
    am = torch.ones(B, S, dtype=torch.long, device=DEVICE)
    am[0, :2] = 0
    am[1, 4:] = 0
    got = compiled(first_row_for_every_batch, target, dynamic)(q, k, v, am)
    torch.testing.assert_close(got, first_row_for_every_batch(q, k, v, am), rtol=1e-5, atol=1e-5)
    assert {s.detail for s in mojo_compile.last_report().sites} == {"mask: tensor"}
