import sys
import warnings, traceback
def show(message, category, filename, lineno, file=None, line=None):
    if "erase_node" in str(message):
        print("WARN", message)
        f = sys._getframe()
        while f:
            if f.f_code.co_name == "rewrite" and "item" in f.f_locals: print("ITEM", getattr(f.f_locals["item"], "name", f.f_locals["item"]))
            if f.f_code.co_name == "replace_with_graph": print("MATCH", f.f_locals.get("match"), "OUT", getattr(f.f_locals.get("match"), "nodes", None)[-6:])
            f = f.f_back
warnings.showwarning = show
import sys; sys.argv = ["p6.py", "llama_q"]
import os; os.environ["TGTS"] = "torch"
exec(open("p6.py").read())
