"""pytest plugin: simulates fix variant 2 -- compile_piece hides the placeholders' traced values from compile_fx
(restored after), so Inductor's cpp_wrapper / fx_wrapper path compiles on the inputs it is given, as for Dynamo's
own graph (whose placeholders carry no meta["val"])."""
import torch._inductor.compile_fx as cfx

_orig = cfx.compile_fx


def compile_fx(gm, inputs, *args, **kwargs):
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    hidden = {node: node.meta.pop("val") for node in placeholders if "val" in node.meta}
    try:
        return _orig(gm, inputs, *args, **kwargs)
    finally:
        for node, value in hidden.items():
            node.meta["val"] = value


cfx.compile_fx = compile_fx
