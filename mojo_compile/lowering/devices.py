"""What a device the ttx kernels run on can take: its cores by kind, the grid a launch may ask for, the on-chip
buffer a program's tiles live in, the alignment vector accesses want, and the precisions `tl.dot` accepts.

Every kernel launcher computes its launch config from a `DeviceCaps` (kernels/*.py, through `device_caps`), never
from `torch.cuda` calls, so the configs for any device can be computed and checked on any machine:
`assume("Ascend910B3")` makes every launcher plan for that device (tests/test_devices.py, scripts/ascend_check.py).

Known devices are listed in DEVICES; a CUDA or NPU device that is not falls back to what its runtime reports.
Sources: NVIDIA's H100/H200 and A100 data sheets (SMs, shared memory per block with opt-in); Ascend: the
triton-ascend docs (grid limit 65535, 192 KB unified buffer, 32-byte vector alignment, "ieee" / "hf32" dots;
docs/ascend.md)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Iterator, Optional

import torch


@dataclasses.dataclass(frozen=True)
class DeviceCaps:
    name: str
    vendor: str  # "nvidia" | "ascend" | "interpreter"
    vector_cores: int  # programs that fill the device with vector work: SMs; Ascend's vector cores (AIV)
    matrix_cores: int  # the same for kernels with tl.dot: SMs; Ascend's AI cores (AIC)
    max_programs: int  # the flattened grid of one launch
    persistent: bool  # the grid maps to physical cores: launch at most one program per core, each looping
    onchip_bytes: int  # what one program's tiles may take: shared memory per block; Ascend's unified buffer
    alignment: int  # bytes a vector load or store wants
    dot_precisions: tuple[str, ...]  # tl.dot input_precision values it takes; [0] is its default for fp32
    vector_gathers: bool = True  # addresses computed per element (a division, a gather) still load as vectors;
    # Ascend's compiler lowers such an access to a loop of scalar loads, so the launchers pick affine layouts there

    def programs(self, tasks: int, *, matrix: bool = False) -> int:
        """Programs to launch for `tasks` independent pieces of work: one each, or on a persistent device at most
        one per core (each program then loops over tasks with a stride of the program count)."""
        if not self.persistent:
            return tasks
        return torch.sym_max(1, torch.sym_min(tasks, self.matrix_cores if matrix else self.vector_cores))

    def dot_precision(self, exact: bool) -> str:
        """tl.dot's input_precision: "ieee" where fp32 must not be rounded, else the device's fast default
        ("tf32" on NVIDIA, which bf16 / fp16 operands ignore; Ascend's "tf32" is an error)."""
        return "ieee" if exact else self.dot_precisions[0]


_NVIDIA_GRID = 2 ** 31 - 1  # grid x; the launchers keep y and z within 65535
DEVICES = {
    "H200": DeviceCaps("H200", "nvidia", 132, 132, _NVIDIA_GRID, False, 232448, 16, ("tf32", "ieee")),
    "H100": DeviceCaps("H100", "nvidia", 132, 132, _NVIDIA_GRID, False, 232448, 16, ("tf32", "ieee")),
    "A100": DeviceCaps("A100", "nvidia", 108, 108, _NVIDIA_GRID, False, 166912, 16, ("tf32", "ieee")),
    "Ascend910B2": DeviceCaps("Ascend910B2", "ascend", 48, 24, 65535, True, 196608, 32, ("ieee", "hf32"), False),
    "Ascend910B3": DeviceCaps("Ascend910B3", "ascend", 40, 20, 65535, True, 196608, 32, ("ieee", "hf32"), False),
    "Ascend910B4": DeviceCaps("Ascend910B4", "ascend", 40, 20, 65535, True, 196608, 32, ("ieee", "hf32"), False),
    # TRITON_INTERPRET=1: programs run one after another, so one core for the row kernels (every program's loop
    # runs on small tests); four for decode's split-K planning, so that its split path runs on small tests too.
    "interpreter": DeviceCaps("interpreter", "interpreter", 1, 4, _NVIDIA_GRID, False, 1 << 30, 1,
                              ("ieee",)),
}

_ASSUMED: list[DeviceCaps] = []


@contextlib.contextmanager
def assume(name_or_caps) -> Iterator[DeviceCaps]:
    """Within the block every launcher plans for this device, whatever its tensors are on (config checks)."""
    caps = DEVICES[name_or_caps] if isinstance(name_or_caps, str) else name_or_caps
    _ASSUMED.append(caps)
    try:
        yield caps
    finally:
        _ASSUMED.pop()


def assumed() -> Optional[DeviceCaps]:
    return _ASSUMED[-1] if _ASSUMED else None


def device_caps(device: torch.device, interpreting: bool = False) -> DeviceCaps:
    """The capabilities a launch on `device` plans with: an assumed device, else the interpreter's, else the
    device's own (from DEVICES by name, or from what its runtime reports)."""
    if _ASSUMED:
        return _ASSUMED[-1]
    if device.type == "cpu" or (interpreting and device.type == "cuda"):  # the interpreter runs them on the CPU
        return DEVICES["interpreter"]
    if device.type == "cuda":
        return _cuda_caps(device.index if device.index is not None else torch.cuda.current_device())
    if device.type == "npu":
        return _npu_caps(device.index if device.index is not None else torch.npu.current_device())
    raise ValueError(f"mojo ttx: no device capabilities for {device.type} devices")


@functools.lru_cache(maxsize=None)
def _cuda_caps(index: int) -> DeviceCaps:
    props = torch.cuda.get_device_properties(index)
    known = next((caps for name, caps in DEVICES.items() if caps.vendor == "nvidia" and name in props.name), None)
    sms = props.multi_processor_count  # what the part has (an H200 NVL or a MIG slice has fewer than its name's)
    smem = getattr(props, "shared_memory_per_block_optin", None) or (known.onchip_bytes if known else 49152)
    return DeviceCaps(props.name, "nvidia", sms, sms, _NVIDIA_GRID, False, smem, 16, ("tf32", "ieee"))


@functools.lru_cache(maxsize=None)
def _npu_caps(index: int) -> DeviceCaps:
    try:
        name = torch.npu.get_device_name(index)
    except (AttributeError, RuntimeError):  # a device module without the call (a stand-in): the default 910B
        name = "npu"
    known = next((caps for key, caps in DEVICES.items() if caps.vendor == "ascend" and key in name),
                 DEVICES["Ascend910B3"])
    try:  # triton-ascend's driver reports the cores of the part at hand
        import triton
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        return dataclasses.replace(known, name=name, vector_cores=int(props["num_vectorcore"]),
                                   matrix_cores=int(props["num_aicore"]))
    except (ImportError, AttributeError, KeyError, TypeError, RuntimeError):  # no NPU driver here: the table's
        return dataclasses.replace(known, name=name)
