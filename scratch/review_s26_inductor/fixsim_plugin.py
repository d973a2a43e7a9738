"""pytest plugin: simulates the suggested fix (compile_piece gives each placeholder the value it is compiled on)."""
import torch._inductor.compile_fx as cfx

_orig = cfx.compile_fx


def compile_fx(gm, inputs, *args, **kwargs):
    import torch
    for node, value in zip(gm.graph.find_nodes(op="placeholder"), inputs):
        if isinstance(value, torch.Tensor) and isinstance(node.meta.get("val"), torch.Tensor):
            node.meta["val"] = value
    return _orig(gm, inputs, *args, **kwargs)


cfx.compile_fx = compile_fx
