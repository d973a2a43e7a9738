"""The Mojo ops: functional torch.library custom ops in the `mojo` namespace (torch.ops.mojo.*). Every module of this
package defines its family's ops when imported; all are imported here, found by name (no list to edit)."""
import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    importlib.import_module(f".{_info.name}", __name__)
