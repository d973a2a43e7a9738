"""The mojo backend: `torch.compile(model, backend="mojo")`, readable top to bottom.

    Dynamo FX graph
      1. -> pre-dispatch ATen graph   make_fx(pre_dispatch=True) under Dynamo's fake mode: normalised ATen
                                      (aten.linear, aten.silu, aten.to.dtype ...), before autograd, symbolic sizes kept
      2. -> canonical form            exact rewrites only: no-op casts, eval dropout, x*1.0, view chains, x*x ...
      3. -> Mojo ops                  every enabled pattern, supersets first (patterns/); then each attention
                                      mask that is proven causal / sliding-window becomes that structure
      4. -> targets chosen            each Mojo op node gets the target that supports its (fake) inputs (lowering/)
      5. -> report (+ dump)           mojo_compile.last_report()
      6. -> inner compiler            Inductor (default) or plain eager; both run forward and backward. A training
                                      graph with large gradients is compiled in pieces (pieces.py)

Because the Mojo ops are custom ops with autograd formulas, the rewritten graph is still an ordinary
differentiable program: the inner compiler (or eager autograd) builds the backward from it.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable, Optional

import torch
import torch.fx.traceback as fx_traceback
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from . import debug, dtensor, logs, lowering, patterns, pieces, report
from .canonicalize import _touched_by_mutation, canonicalize
from .kernels.common import ttx_device_type_reason
from .patterns.mask_analysis import analyse_masks, share_repeated_kv
from .options import OptionError, Options

log = logging.getLogger("mojo_compile")

# Per device type, the targets a graph on its tensors defaults to, in order of preference: the first usable one.
# On an NPU the Triton kernels need triton-ascend; without it, torch_npu's fused ops.
DEFAULT_TARGETS = {"cuda": ("ttx",), "npu": ("ttx", "torch_npu")}


def mojo_backend(gm: GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The Dynamo backend. kwargs: `mode` and `options` from torch.compile (see options.py)."""
    # The compile's traces run autograd-recording ops on fake tensors. A saved-tensor hook active at the call (a
    # non-reentrant checkpoint around a compiled block, activation offloading) must not see them: the checkpoint
    # would count the compile's saves and fail in the backward. AOTAutograd defers the hooks the same way.
    with _saved_tensors_hooks_deferred(), patterns.compiling():
        return _compile(gm, example_inputs, **kwargs)


def _compile(gm: GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    options = Options.parse(**kwargs)
    target = resolve_target(options.target, example_inputs)
    of_dtensors = dtensor.in_graph(gm, example_inputs)  # decided once: the trace, its checks and the compile ask
    why_not = _untraceable(gm, example_inputs, of_dtensors)
    if why_not is not None:
        return _compile_unfused(gm, example_inputs, options, target, f"not rewritten: {why_not}; the graph runs as "
                                                                     f"Dynamo gave it")

    try:
        aten_gm = to_pre_dispatch_aten(gm, example_inputs, of_dtensors=of_dtensors)   # 1
    except Exception as e:  # noqa: BLE001 - never a failure where eager runs: the graph as Dynamo gave it (a DTensor
        if _is_dynamo_restart(e):  # call the global view does not know; a compiled optimizer step's in-place
            raise                  # updates of the real parameters Dynamo holds, which the fake re-trace cannot run)
        what = "graph of DTensors" if of_dtensors else "graph"
        return _compile_unfused(gm, example_inputs, options, target, f"not rewritten: the trace of this {what} "
                                f"failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); the graph runs as "
                                f"Dynamo gave it")
    watch = debug.Watch.start(gm, aten_gm, kwargs)  # inert unless a mojo-compile verify / bisect / diff watches
    logs.traced(aten_gm, target)
    patterns.mark_grad_inputs(aten_gm, example_inputs)
    if of_dtensors:
        dtensor.mark_values(gm, aten_gm, example_inputs)  # which values are DTensors at run time (patterns ask)
    patterns.load_fusions()  # first: a fusion may add canonicalisation rules for its patterns
    logs.canonicalized(canonicalize(aten_gm))                             # 2
    watch.canonical(aten_gm)
    matches = patterns.rewrite(aten_gm, options.disable)                  # 3
    masks = analyse_masks(aten_gm)
    share_repeated_kv(aten_gm)
    dtensor.restore_boundaries(gm, aten_gm)  # (a graph of DTensors: their calls, traced as opaque boundaries)
    logs.matched(matches, masks)
    sites = choose_targets(aten_gm, matches, target, masks)               # 4
    why_not = relayout_views(aten_gm, _example_outputs(gm)) if matches and not of_dtensors else None
    if why_not is not None:
        return _compile_unfused(gm, example_inputs, options, target, f"not rewritten: {why_not}; the graph runs as "
                                                                     f"Dynamo gave it")
    logs.targets_chosen(sites, target)
    notes, near_misses = unfused_notes(aten_gm, options.disable)
    graph_report = report.GraphReport(_compile_id(), target, options.inner_compiler, sites, notes, aten_gm.code,
                                      near_misses)
    report.add_graph(graph_report)                                        # 5
    watch.rewritten(aten_gm, graph_report)
    logs.rewritten(aten_gm, graph_report)
    if options.dump_dir:
        dump(options.dump_dir, gm, graph_report)
    compiled = inner_compile(aten_gm, example_inputs, options, of_dtensors)   # 6
    graph_report.pieces = getattr(compiled, "mojo_pieces", 1)
    if sites:
        compiled = _unfused_for_tangents(compiled, gm)
    return watch.wrap(compiled)


def _saved_tensors_hooks_deferred():
    from torch._dynamo import utils as dynamo_utils

    defer = getattr(dynamo_utils, "_disable_saved_tensors_hooks_during_tracing", None)
    return defer() if defer is not None else contextlib.nullcontext()


def _unfused_for_tangents(compiled: Callable, gm: GraphModule) -> Callable:
    """Forward-mode AD: the Mojo ops have no forward-AD (jvp) formula, so a fused graph would drop an input's tangent
    without a word. Dynamo does not recompile when an input becomes a dual tensor, so the choice is made per call:
    inside a `forward_ad.dual_level()` with a dual input, the graph runs as Dynamo gave it (eager ops carry the
    tangent). Outside one the cost is one module attribute read."""
    import torch.autograd.forward_ad as forward_ad

    def run(*args):  # the graph's inputs, positional (how Dynamo calls a backend's callable: see _positional_call)
        if forward_ad._current_level >= 0:
            if any(isinstance(t, torch.Tensor) and forward_ad.unpack_dual(t).tangent is not None for t in args):
                log.info("mojo: graph run unfused: an input carries a forward-mode tangent, which the Mojo ops "
                         "do not propagate")
                return gm(*args)
        return compiled(*args)

    return _positional_call(run)


def _positional_call(fn: Callable) -> Callable:
    """Mark a callable the backend returns as taking the graph's inputs as positional arguments, which is how Dynamo
    calls it. The inner compiler's result may carry `_boxed_call = True` without being boxed (AOTAutograd's forward
    copies the attribute from the boxed function it wraps, and takes *args): a wrapper that believed it read the
    first input as the list of all inputs."""
    fn._boxed_call = False
    return fn


# Regions of Dynamo's graph (higher-order ops) that the pre-dispatch re-trace does not keep as eager runs them.
_UNTRACEABLE_REGIONS = {
    # the re-trace inlines the Function's forward and drops its backward: its inputs would get no gradient
    "autograd_function_apply": "a torch.autograd.Function inside the graph, whose backward the re-trace would drop",
    # torch.utils.checkpoint: the re-trace needs a checkpoint policy that plain checkpointing does not set
    "tag_activation_checkpoint": "an activation-checkpointed region (torch.utils.checkpoint) inside the graph",
    # torch.compiler.nested_compile_region: the re-traced subgraph call no longer compiles under Inductor
    "invoke_subgraph": "a nested compile region (torch.compiler.nested_compile_region) inside the graph",
}


def _untraceable(gm: GraphModule, example_inputs, of_dtensors: bool) -> Optional[str]:
    """Why the pre-dispatch trace cannot take the graph (None: it can). It does not take tensor subclasses; a graph of
    DTensors is traced in the global view (dtensor.py) unless it makes DTensor calls that view cannot show."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    subclasses = {type(x).__name__ for x in example_inputs if isinstance(x, torch.Tensor)
                  and is_traceable_wrapper_subclass(x) and not dtensor.is_dtensor(x)}
    if subclasses:
        return f"an input is a {', '.join(sorted(subclasses))} (a tensor subclass), which the pre-dispatch trace " \
               f"does not take"
    if of_dtensors:
        why = dtensor.unsupported(gm)
        if why is not None:
            return f"a graph of DTensors with a call the global view cannot trace ({why})"
    enter_autocast = getattr(torch.amp.autocast_mode, "_enter_autocast", None)
    if enter_autocast is not None and any(len(n.args) < 3 or n.args[2] for n in gm.graph.find_nodes(
            op="call_function", target=enter_autocast)):
        # autocast acts below the pre-dispatch trace, and neither the patterns (traced without it) nor the Mojo ops
        # (no autocast rules) follow it: a fused op inside the region would not be cast as the ops it replaced.
        # (An enabled=False region, as HF's rotary angles open, is traced in its own dtypes: _AutocastRegions.)
        return "an autocast region inside the graph, which the patterns and the Mojo ops do not follow"
    for name, what in _UNTRACEABLE_REGIONS.items():
        op = getattr(torch.ops.higher_order, name, None)
        if op is not None and gm.graph.find_nodes(op="call_function", target=op):
            return what
    if _writes_held_tensors(gm):
        # a compiled optimizer step: the fake re-trace cannot run the writes to the real tensors Dynamo holds
        return "the graph writes in place to tensors Dynamo holds as attributes (a compiled optimizer step)"
    if any(n.op == "call_function" and _is_functorch_call(n) for n in gm.graph.nodes):
        # torch.func.grad / vmap inlined by Dynamo: the re-trace would run their level changes (grad_increment_nesting,
        # wrap_for_grad ...) instead of recording them, leaving functorch's state changed under Dynamo's guards
        return "a torch.func transform (functorch levels) inside the graph, which the pre-dispatch trace does not keep"
    enter_inference_mode = getattr(torch.autograd.grad_mode, "_enter_inference_mode", None)
    if enter_inference_mode is not None and gm.graph.find_nodes(op="call_function", target=enter_inference_mode):
        # the pre-dispatch re-trace runs Dynamo's inference-mode calls instead of recording them: the region's outputs
        # would come back requiring grad where eager's do not
        return "an inference_mode region inside the graph, which the pre-dispatch trace does not keep"
    return None


def _is_functorch_call(node) -> bool:
    module = getattr(node.target, "__module__", None) or ""
    return module.startswith(("torch._C._functorch", "torch._functorch"))


def _writes_held_tensors(gm: GraphModule) -> bool:
    """Whether Dynamo's graph writes in place (`p.add_(...)`, `torch._foreach_mul_([...])`) to a tensor it holds as an
    attribute (an optimizer's parameters and state), not to a graph input."""
    def in_place(node) -> bool:
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        return node.op in ("call_method", "call_function") and isinstance(name, str) and name.endswith("_") \
            and not name.endswith("__")
    return any(in_place(user) for node in gm.graph.find_nodes(op="get_attr") for user in node.users)


def _compile_unfused(gm: GraphModule, example_inputs: list, options: Options, target: str, why: str) -> Callable:
    """The graph left as it is, to the inner compiler (Inductor's own handling of subclasses), with the reason in
    the report: never a failure where eager runs."""
    log.warning("mojo: graph %s %s", _compile_id(), why)
    report.add_graph(report.GraphReport(_compile_id(), target, options.inner_compiler, [], [why], gm.code))
    if options.inner_compiler == "eager":
        return gm
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs, config_patches=options.inductor_config)


# ------------------------------------------------------------------------------------------------------ 1. trace
def _fake_mode(example_inputs):
    from torch._guards import TracingContext, detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    context = TracingContext.try_get()
    if context is not None and context.fake_mode is not None:
        return context.fake_mode
    return detect_fake_mode(example_inputs) or FakeTensorMode()


def to_pre_dispatch_aten(gm: GraphModule, example_inputs: list, of_dtensors: Optional[bool] = None) -> GraphModule:
    """Retrace Dynamo's graph to pre-dispatch ATen under Dynamo's own fake mode, so symbolic sizes survive, and
    through an Interpreter with preserve_node_meta, so each node keeps its nn_module_stack (for the report).
    of_dtensors: whether the graph computes on DTensors (dtensor.in_graph; asked here where not given)."""
    from torch._subclasses.fake_tensor import FakeTensor

    fake_mode = _fake_mode(example_inputs)
    interpreter = torch.fx.Interpreter(gm)
    if dtensor.in_graph(gm, example_inputs) if of_dtensors is None else of_dtensors:  # global shapes, plain
        example_inputs, interpreter = dtensor.global_inputs(example_inputs, fake_mode), dtensor.GlobalView(gm)
    with fake_mode:
        fake_inputs = [x if not isinstance(x, torch.Tensor) or isinstance(x, FakeTensor)
                       else fake_mode.from_tensor(x) for x in example_inputs]
    with fake_mode, fx_traceback.preserve_node_meta(), _AutocastRegions(interpreter):
        aten_gm = make_fx(interpreter.run, pre_dispatch=True)(*fake_inputs)
    _refuse_traced_constants(aten_gm)
    keep_dynamo_input_metadata(gm, aten_gm)
    return aten_gm


_ENTER_AUTOCAST = getattr(torch.amp.autocast_mode, "_enter_autocast", None)
_AUTOCAST_CALLS = (_ENTER_AUTOCAST, getattr(torch.amp.autocast_mode, "_exit_autocast", None))


class _AutocastRegions:
    """Has `interpreter` enter and leave each autocast region of Dynamo's graph as the model's `with
    torch.autocast(...)` does, so that the values inside follow the region's dtypes (an fp32 product in an
    `enabled=False` region under ambient bf16 autocast stays fp32, and its `.to(bf16)` is kept). The pre-dispatch
    trace records the region either way (torch.autocast tells make_fx's mode); Dynamo's bare `_enter_autocast` call
    would only be recorded. Regions still open when the trace fails are left, so the caller's state is restored."""

    def __init__(self, interpreter: torch.fx.Interpreter):
        self.interpreter, self.open = interpreter, []

    def __enter__(self):
        run_node = self.interpreter.run_node

        def run_node_in_regions(node):
            if node.op != "call_function" or _ENTER_AUTOCAST is None or node.target not in _AUTOCAST_CALLS:
                return run_node(node)
            with self.interpreter._set_current_node(node):  # (the recorded node keeps this node's metadata)
                args, _ = self.interpreter.fetch_args_kwargs_from_env(node)
                if node.target is _ENTER_AUTOCAST:
                    region = torch.amp.autocast(*args)
                    region.__enter__()
                    self.open.append(region)
                    return region
                self.open.remove(args[0])
                args[0].__exit__(None, None, None)
                return None

        self.interpreter.run_node = run_node_in_regions
        return self

    def __exit__(self, *exc):
        del self.interpreter.run_node
        while self.open:
            self.open.pop().__exit__(None, None, None)
        return False


class TracedConstantError(RuntimeError):
    pass


def _refuse_traced_constants(aten_gm: GraphModule) -> None:
    """A constant the trace made of a fake tensor or a tensor subclass (a DTensor built in the graph by a call the
    trace did not see as one) would be baked into every call: refuse the graph instead."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    for node in aten_gm.graph.find_nodes(op="get_attr"):  # (every constant the graph reads: buffers included)
        value = getattr(aten_gm, node.target, None)
        if isinstance(value, FakeTensor) or (isinstance(value, torch.Tensor) and is_traceable_wrapper_subclass(value)):
            raise TracedConstantError(f"the trace made a constant of a traced value ({node.target}: "
                                      f"{type(value).__name__})")


def keep_dynamo_input_metadata(dynamo_gm: GraphModule, aten_gm: GraphModule) -> None:
    """AOTAutograd learns from fields Dynamo sets on its GraphModule which inputs are parameters or static addresses
    (`mark_static_address`: HF's StaticCache). CUDA graphs keep those in place instead of copying them in at every
    replay, and allow their in-place updates (the cache writes); without them a `reduce-overhead` decode step copies
    every weight per call or is not captured at all. make_fx's new GraphModule has none of the fields: carry them
    over, placeholder by placeholder (make_fx keeps Dynamo's inputs, in order)."""
    names = getattr(dynamo_gm, "_param_name_to_source", None)
    src = list(dynamo_gm.graph.find_nodes(op="placeholder"))
    dst = list(aten_gm.graph.find_nodes(op="placeholder"))
    own = [n for n, _ in aten_gm.named_parameters()] + [n for n, _ in aten_gm.named_buffers()]
    if "dynamo_compile_id" not in dynamo_gm.meta or names is None or len(src) != len(dst) \
            or any(n not in names for n in own):
        return  # not a Dynamo graph, or one whose inputs we cannot map: AOTAutograd treats every input as dynamic
    for a, b in zip(src, dst):
        if hasattr(a, "_dynamo_source"):
            b._dynamo_source = a._dynamo_source
        if "tensor_dict" in a.meta:
            b.meta["tensor_dict"] = a.meta["tensor_dict"]
    aten_gm._param_name_to_source = names
    aten_gm.meta["dynamo_compile_id"] = dynamo_gm.meta["dynamo_compile_id"]


# ------------------------------------------------------------------------------------------------------ 3b. layouts
_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
_SCALARS_OF_TENSORS = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)


def _example_outputs(gm: GraphModule) -> list:
    """The values of Dynamo's graph outputs as Dynamo traced them (eager's layouts), in order."""
    flat, _ = torch.utils._pytree.tree_flatten(gm.graph.output_node().args[0])
    return [n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None for n in flat]


def relayout_views(gm: GraphModule, eager_outputs: Optional[list] = None) -> Optional[str]:
    """The Mojo ops return contiguous results where eager's may follow a strided input's layout (RoPE and attention
    of HF's transposed q and k, a norm of a transposed x). A `view` the trace recorded for eager's layout may not
    fit the op's: propagate the fake values through the rewritten graph and make each such view a `reshape`, which
    gives the same values (a view never reorders elements). A reshape copies where a view aliased, so where such a
    view or its base is written in place, the graph is left unrewritten instead (the reason returned). Graph
    outputs whose layout changed are copied into eager's. The values' metadata is refreshed on the way."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    values = [n.meta.get("val") for n in placeholders]
    fake_mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
    if fake_mode is None or any(v is None for v in values):
        return None  # (nothing to propagate: a graph without traced values)
    changed = []

    class Relayout(FakeTensorProp):
        def run_node(self, node):
            if node.op == "get_attr":  # a constant or parameter the graph holds: its fake twin
                value = super().run_node(node)
                if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
                    value = fake_mode.from_tensor(value, static_shapes=True)
                    node.meta["val"] = value
                return value
            if node.op == "call_function" and node.target in _SCALARS_OF_TENSORS and "val" in node.meta:
                return node.meta["val"]  # (a data-dependent scalar, `.item()` of a float Dynamo made an input under
                #                           dynamic=True: the symbol the trace gave it; fake tensors have no value)
            if node.op == "call_function" and node.target in _VIEWS:
                try:
                    return super().run_node(node)
                except (RuntimeError, ValueError):  # "view size is not compatible" / "Cannot view a tensor ..."
                    node.target = torch.ops.aten.reshape.default  # (a reshape that fails too raises below)
                    changed.append(node)
            return super().run_node(node)

    propagation = Relayout(gm, mode=fake_mode)
    try:  # (the graph's own grad-mode and autocast calls run: each is left as it was found, also on a failure)
        # The Python dispatcher runs composite ops (aten.linear -> matmul) through their symbolic decompositions:
        # without it torch 2.11's C++ matmul asks a dynamic-shape fake tensor for its numel() and fails.
        with torch.set_grad_enabled(torch.is_grad_enabled()), _AutocastRegions(propagation), \
                enable_python_dispatcher():
            propagation.propagate_dont_convert_inputs(*values)
    except Exception as e:  # noqa: BLE001 - the rewritten graph must run where Dynamo's did: leave it unrewritten
        return f"the rewritten graph's values did not propagate ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
    gm.graph.__dict__.pop("_mojo_touched", None)  # (_touched_by_mutation's memo: computed for this graph)
    written = any(_touched_by_mutation(n) or _touched_by_mutation(n.args[0]) for n in changed)
    gm.graph.__dict__.pop("_mojo_touched", None)
    if written:
        return "a fused op's result is viewed for eager's strided layout, and the view or its base is written in " \
               "place (a reshape would copy where the view aliased)"
    changed += _outputs_in_eager_layout(gm, eager_outputs or [])
    if changed:
        gm.recompile()
        log.debug("mojo: %d views and outputs relaid for eager's layouts: %s", len(changed), [n.name for n in changed])
    return None


def _outputs_in_eager_layout(gm: GraphModule, eager_outputs: list) -> list:
    """A graph output whose layout the rewrite changed (a fused op's contiguous result where eager's followed a
    strided input) is copied into eager's layout, which the caller sees. Static strides only."""
    output = gm.graph.output_node()
    flat, spec = torch.utils._pytree.tree_flatten(output.args[0])
    if len(flat) != len(eager_outputs):
        return []
    added = []
    for i, (node, eager) in enumerate(zip(flat, eager_outputs)):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not (isinstance(value, torch.Tensor) and isinstance(eager, torch.Tensor)) or value.shape != eager.shape:
            continue
        strides = (*eager.stride(), *value.stride(), *eager.shape)
        if any(not isinstance(x, int) for x in strides) or all(  # (a dim of size 1 has no layout: no copy for it)
                a == b or n == 1 for a, b, n in zip(value.stride(), eager.stride(), eager.shape)):
            continue
        # eager's result is dense in some order of its dims: permute to that order, make it contiguous, permute
        # back (differentiable, one copy). Kept only where that gives eager's strides exactly.
        order = sorted(range(value.dim()), key=lambda d: (-eager.stride()[d], d))
        back = sorted(range(value.dim()), key=lambda d: order[d])
        laid = torch.empty(tuple(eager.shape[d] for d in order), device="meta").permute(back)
        if laid.stride() != eager.stride():
            continue
        with gm.graph.inserting_before(output):
            permuted = gm.graph.call_function(torch.ops.aten.permute.default, (node, order))
            dense = gm.graph.call_function(torch.ops.aten.clone.default, (permuted,),
                                           {"memory_format": torch.contiguous_format})
            flat[i] = gm.graph.call_function(torch.ops.aten.permute.default, (dense, back))
        added.append(flat[i])
    if added:
        output.args = (torch.utils._pytree.tree_unflatten(flat, spec),)
    return added


# ------------------------------------------------------------------------------------------------------ 4. targets
def resolve_target(requested: Optional[str], example_inputs: list) -> str:
    """The target asked for, which must be usable, or the default for the device of the graph's inputs."""
    if requested is not None:
        reason = lowering.unavailable(requested)
        if reason:
            raise OptionError(f"mojo target {requested!r} was requested (options['target'] or MOJO_BACKEND) "
                              f"but {reason}")
        return requested
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    for device, candidates in DEFAULT_TARGETS.items():
        if device not in devices:
            continue
        for target in candidates:
            reason = lowering.unavailable(target) or (ttx_device_type_reason(device) if target == "ttx" else None)
            if reason is None:
                return target
            log.warning("mojo: %s inputs would use target %s, but %s", device, target, reason)
        log.warning("mojo: %s inputs: no target of %s is usable; using torch", device, ", ".join(candidates))
    return "torch"


def _op_arguments(node) -> list:
    """The node's arguments in schema order (defaults filled in), as fake values, without `target`."""
    schema = node.target._schema
    values = []
    for i, arg in enumerate(schema.arguments):
        if arg.name == "target":
            continue
        if i < len(node.args):
            value = node.args[i]
        elif arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        else:
            value = arg.default_value
        values.append(value.meta.get("val") if isinstance(value, torch.fx.Node) else value)
    return values


def choose_targets(gm: GraphModule, matches, target: str, masks=None) -> list[report.FusedSite]:
    """Give each new Mojo op the target that supports its inputs; the torch reference otherwise (reason kept).
    `masks`: attention node -> the mask structure proven for it (shown in the report)."""
    sites = []
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    for pattern, node in sorted(matches, key=lambda m: order[m[1]]):
        op = node.target._schema.name.split("::")[-1]
        chosen, reason = lowering.choose(op, target, *_op_arguments(node))  # (fallbacks logged)
        node.update_kwarg("target", chosen)
        detail = _attention_detail(node, masks or {}) if op == "attention" else ""
        kernel = lowering.describe(op, chosen, *_op_arguments(node))
        sites.append(report.FusedSite(pattern.name, f"mojo.{op}", chosen, report.module_path(node), reason, detail,
                                      kernel, node.name))
    gm.recompile()
    return sites


def _attention_detail(node, masks) -> str:
    q, k, v, mask, q_pos, scale, causal, window, softcap, sinks = _op_arguments(node)
    if node in masks:
        kind = masks[node].describe()
    else:
        kind = ("tensor" if mask is not None else "causal" if causal else "none") + (f", window {window}" if window
                                                                                     else "")
    kind += f", softcap {softcap:g}" if softcap else ""
    return f"mask: {kind}" + (" (proven from the mask subgraph)" if node in masks else "")


# ------------------------------------------------------------------------------------------------------ 5. report
def unfused_notes(gm: GraphModule, disabled) -> tuple[list[str], list[report.NearMiss]]:
    """The sites of enabled families that the rewrite left unfused (their tell-tale ops are still in the graph),
    one near miss each -- the pattern that came closest and what refused it (near_miss.py) -- and one note each."""
    from . import near_miss

    near_misses = near_miss.explain(gm, disabled)
    return [near_miss.note(m) for m in near_misses], near_misses


def _compile_id() -> str:
    """Dynamo's compile id ("0/0": frame 0, its first compile), with a suffix where the report already has it
    (Dynamo restarts its ids after torch._dynamo.reset()): "0/0#2"."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    return report.unique_compile_id(str(compile_id) if compile_id is not None else str(len(report._REPORT.graphs)))


_DUMPED: set = set()  # the file stems this process wrote: a later graph with the same compile id gets a suffix


def dump(directory: str, gm: GraphModule, graph_report: report.GraphReport) -> None:
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, "graph_" + graph_report.compile_id.replace("/", "_").replace("#", "-"))
    stem, n = base, 1
    while os.path.abspath(stem) in _DUMPED:  # the same id after reset_report(): never overwrite this process's files
        n += 1
        stem = f"{base}-{n}"
    _DUMPED.add(os.path.abspath(stem))
    with open(stem + ".dynamo.py", "w") as f:
        f.write(gm.code)
    with open(stem + ".mojo.py", "w") as f:
        f.write(graph_report.graph)
    with open(stem + ".report.txt", "w") as f:
        f.write(report.Report([graph_report]).table() + "\n")


# ------------------------------------------------------------------------------------------------------ 6. compile
def inner_compile(aten_gm: GraphModule, example_inputs: list, options: Options, of_dtensors: bool = False) -> Callable:
    """The inner compiler on the rewritten graph: whole, or for a training graph with large gradients, in pieces
    (pieces.py: each piece's parameter gradients reach `.grad` before the next piece's backward runs)."""
    if options.inner_compiler == "eager":
        return aten_gm  # an ordinary differentiable program: Mojo ops carry their own autograd
    from torch._inductor.compile_fx import compile_fx

    lowering.tag_recomputed(aten_gm)  # cheap elementwise outputs: recomputed in the backward, not kept (memory)

    def compile_piece(gm: GraphModule, inputs: list) -> Callable:
        # Compiled on `inputs`, as Dynamo's own graph is (its placeholders carry no traced value): with cpp_wrapper /
        # fx_wrapper, Inductor would take the inputs from the placeholders' values instead -- make_fx's detached
        # snapshots (an inference graph: no parameter gradient) and sizes it drops (misaligned inputs).
        traced = {node: node.meta.pop("val") for node in gm.graph.find_nodes(op="placeholder") if "val" in node.meta}
        try:
            return compile_fx(gm, inputs, config_patches=lowering.inductor_config(options.inductor_config),
                              decompositions=lowering.inductor_decompositions())
        finally:
            for node, value in traced.items():
                node.meta["val"] = value

    assignment = None if _uses_cudagraphs(options) or of_dtensors else \
        pieces.plan(aten_gm, example_inputs, options.backward_piece_mb)  # (pieces' fake runs take no DTensor)
    if assignment is not None:
        try:
            return pieces.compile_in_pieces(aten_gm, example_inputs, assignment, compile_piece,
                                            _fake_mode(example_inputs))
        except Exception as e:  # noqa: BLE001 - pieces save memory; a graph they fail on still compiles whole
            if _is_dynamo_restart(e):
                raise  # Dynamo's own control flow (a restart with what the compile learnt), not a failure
            log.warning("mojo: compiling the graph in pieces failed (%s: %s); compiling it whole", type(e).__name__,
                        str(e).splitlines()[0] if str(e) else "")
    return compile_piece(aten_gm, example_inputs)


def _is_dynamo_restart(e: Exception) -> bool:
    try:
        from torch._dynamo.exc import RestartAnalysis
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, RestartAnalysis)


def _uses_cudagraphs(options: Options) -> bool:
    """CUDA graphs replay one captured graph per step: pieces would be several, each with its own static inputs."""
    from torch._inductor import config as inductor_config

    return bool(options.inductor_config.get("triton.cudagraphs", inductor_config.triton.cudagraphs))


def _register_by_name() -> None:
    """`backend="mojo"` without installing: register by name unless the installed entry point will."""
    from importlib.metadata import entry_points
    from torch._dynamo.backends import registry

    if "mojo" in registry._COMPILER_FNS:
        return
    if any(ep.name == "mojo" for ep in entry_points(group="torch_dynamo_backends")):
        return
    torch._dynamo.register_backend(mojo_backend, name="mojo")


_register_by_name()
