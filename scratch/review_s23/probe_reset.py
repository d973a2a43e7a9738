import sys, threading, torch, mojo_compile
OPT = {"inner_compiler": sys.argv[2] if len(sys.argv) > 2 else "eager", "target": "torch"}
def search(x):
    return torch.sigmoid(x) * 3.0
def plus(offset):
    return lambda x: 3.0 / (1.0 + torch.exp(-x)) + offset
mode = sys.argv[1]
if mode == "graph_break":
    @torch._dynamo.disable
    def register():
        mojo_compile.register_pattern("user.sig3", search, plus(100), [(torch.randn(4, 8),)])
    def f(x):
        y = search(x) + 1
        register()
        return search(y)
    x = torch.randn(3, 8)
    out = torch.compile(f, backend="mojo", options=OPT)(x)
    print("DIFF", round((out - f.__wrapped__(x) if hasattr(f, "__wrapped__") else out - search(search(x) + 1)).mean().item()))
elif mode == "pending_backward":
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(3, 4, 8)
    step = lambda x: (search(lin(x)) ** 2).sum()
    c = torch.compile(step, backend="mojo", options=OPT)
    c(x).backward(); lin.zero_grad()   # one compile done
    loss = c(x)
    mojo_compile.register_pattern("user.other", lambda x: torch.tanh(x) * 7.0, lambda x: torch.tanh(x) * 7.0,
                                  [(torch.randn(4, 8),)])
    loss.backward()
    g = lin.weight.grad.clone(); lin.zero_grad(); step(x).backward()
    print("GRADOK", torch.allclose(g, lin.weight.grad, atol=1e-5))
elif mode == "thread":
    started, go = threading.Event(), threading.Event()
    def waiter(gm):
        if threading.current_thread().name == "T":
            started.set(); go.wait(60)
        return []
    mojo_compile.register_graph_pass("user.waiter", waiter)
    x = torch.randn(3, 8)
    compiled = torch.compile(search, backend="mojo", options=OPT)
    compiled(x)
    t = threading.Thread(target=lambda: torch.compile(lambda x: torch.tanh(x) + 1, backend="mojo", options=OPT)(x), name="T")
    t.start(); started.wait(60)
    mojo_compile.register_pattern("user.sig3", search, plus(100), [(torch.randn(4, 8),)])
    go.set(); t.join()
    print("DIFF", round((compiled(x) - search(x)).mean().item()), "(100 expected: the pattern registered after the compile)")
if mode == "inline_register":
    def f(x):
        y = search(x) + 1
        mojo_compile.register_pattern("user.sig3", search, plus(100), [(torch.randn(4, 8),)])
        return search(y)
    x = torch.randn(3, 8)
    out = torch.compile(f, backend="mojo", options=OPT)(x)
    print("DIFF", round((out - search(search(x) + 1)).mean().item()))
    out = torch.compile(f, backend="mojo", options=OPT)(x)
if mode == "compiled_autograd":
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(3, 4, 8)
    step = lambda x: (search(lin(x)) ** 2).sum()
    c = torch.compile(step, backend="mojo", options=OPT)
    c(x).backward(); lin.zero_grad()
    def hook(g):
        mojo_compile.register_pattern("user.other", lambda x: torch.tanh(x) * 7.0, lambda x: torch.tanh(x) * 7.0,
                                      [(torch.randn(4, 8),)])
        return g
    lin.weight.register_hook(hook)
    from torch._dynamo import compiled_autograd
    with compiled_autograd._enable(torch.compile(backend="eager")):
        c(x).backward()
    g = lin.weight.grad.clone(); lin.zero_grad(); step(x).backward()
    print("GRADOK", torch.allclose(g, lin.weight.grad, atol=1e-5))
