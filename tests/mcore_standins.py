"""Stand-ins that let verl's converter and model merger, and megatron-core 0.12.1, run on a CPU-only machine.

Installed only inside the converting (or merging) process (:mod:`tests.convert_main`), never in the
test process. Nothing of verl's, megatron's or torch's files is edited:

- ``transformer_engine``: a module whose ``Linear``, ``LayerNormLinear``, ``GroupedLinear``,
  ``RMSNorm``, ``LayerNorm`` and ``DotProductAttention`` only hold parameters under TE's names
  (``weight``, ``bias``, ``layer_norm_weight``, ``weight{i}``) and an empty ``_extra_state``;
  megatron's own TE wrappers (``megatron/core/extensions/transformer_engine.py``) subclass them and
  their ``sharded_state_dict`` still decides the checkpoint's layout. Every other TE submodule
  megatron imports at import time (fp8 casts, fused kernels) is inert; ``cpu_offload`` answers
  "no offload";
- ``torch.distributed.init_process_group("nccl")`` becomes gloo (and, for the merger, verl's
  ``get_nccl_backend()``, which raises on a CPU);
- the ``torch.cuda`` calls megatron's seed tracker (``tensor_parallel/random.py``), TE kwargs
  (``current_device``), MoE dispatcher (``Stream``) and save (``synchronize``) make answer for the
  CPU, as do ``torch.cpu.current_device``/``empty_cache`` where verl uses them as a device's;
- torch >= 2.7's ``filesystem._write_item`` gets the serialization format megatron-core 0.12.1
  does not pass (``TORCH_SAVE``: one ``torch.save`` record per item, as before).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import inspect
import sys
import types

import torch
from torch import nn

TE_VERSION = "1.13.0"  # a TE before 2.0: its _extra_state is a torch.save'd BytesIO, written as a bytes item


def _device(kwargs):
    return "meta" if kwargs.get("device") == "meta" else "cpu"


class _Module(nn.Module):
    """The TE module surface megatron's wrappers touch outside forward."""

    def __init__(self, **kwargs):
        super().__init__()
        self.fp8 = self.fp8_calibration = False
        self.fp8_meta = {"fp8_checkpoint": False, "recipe": None}
        self.parallel_mode = kwargs.get("parallel_mode")
        self.use_bias = bool(kwargs.get("bias", False))

    def _param(self, *shape, dtype, device, fill=None):
        p = nn.Parameter(torch.empty(*shape, dtype=dtype, device=device))
        if fill is not None and device != "meta":
            with torch.no_grad():
                p.fill_(fill)
        return p

    def get_extra_state(self):
        return None

    def set_extra_state(self, state):
        return None

    def init_fp8_metadata(self, num_gemms=1):
        return None


class Linear(_Module):
    def __init__(self, in_features, out_features, bias=True, params_dtype=torch.float32, init_method=None, **kw):
        super().__init__(bias=bias, **kw)
        d = _device(kw)
        self.weight = self._param(out_features, in_features, dtype=params_dtype, device=d)
        if init_method is not None and d != "meta":
            init_method(self.weight)
        if bias:
            self.bias = self._param(out_features, dtype=params_dtype, device=d, fill=0.0)


class LayerNormLinear(Linear):
    def __init__(self, in_features, out_features, params_dtype=torch.float32, **kw):
        super().__init__(in_features, out_features, params_dtype=params_dtype, **kw)
        self.layer_norm_weight = self._param(in_features, dtype=params_dtype, device=_device(kw), fill=1.0)


class GroupedLinear(_Module):
    def __init__(self, num_gemms, in_features, out_features, bias=True, params_dtype=torch.float32, **kw):
        super().__init__(bias=bias, **kw)
        d = _device(kw)
        self.num_gemms = num_gemms
        init_method = kw.get("init_method")
        for i in range(num_gemms):
            setattr(self, f"weight{i}", self._param(out_features, in_features, dtype=params_dtype, device=d))
            if init_method is not None and d != "meta":
                init_method(getattr(self, f"weight{i}"))
            if bias:
                setattr(self, f"bias{i}", self._param(out_features, dtype=params_dtype, device=d, fill=0.0))


class RMSNorm(_Module):
    def __init__(self, hidden_size, eps=1e-5, params_dtype=torch.float32, **kw):
        super().__init__(**kw)
        self.weight = self._param(hidden_size, dtype=params_dtype, device=_device(kw), fill=1.0)


class LayerNorm(RMSNorm):
    def __init__(self, hidden_size, eps=1e-5, params_dtype=torch.float32, **kw):
        super().__init__(hidden_size, eps, params_dtype, **kw)
        self.bias = self._param(hidden_size, dtype=params_dtype, device=_device(kw), fill=0.0)


class DotProductAttention(_Module):
    def __init__(self, *args, **kw):
        super().__init__()


class CudaRNGStatesTracker:
    def __init__(self):
        self.states_ = {}

    def reset(self):
        self.states_ = {}

    def get_states(self):
        return dict(self.states_)

    def set_states(self, states):
        self.states_ = dict(states)

    def add(self, name, seed):
        self.states_[name] = seed

    def fork(self, name="model-parallel-rng"):
        return contextlib.nullcontext()


class DelayedScaling:
    pass


class _Inert(type):
    """An inert class: any attribute (``_SplitAlongDim.apply``) is a function that does nothing."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _Stub(types.ModuleType):
    """A TE submodule megatron imports at import time but the conversion never uses (fp8 casts, fused
    kernels): any public name is an inert class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Inert(name, (), {})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any other ``transformer_engine.*`` submodule: a :class:`_Stub`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("transformer_engine.") and fullname not in sys.modules:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def _transformer_engine() -> types.ModuleType:
    te = _Stub("transformer_engine")
    te.__version__ = TE_VERSION
    te.__path__ = []  # a package: megatron imports transformer_engine.pytorch.* submodules
    pytorch = _Stub("transformer_engine.pytorch")
    pytorch.__path__ = []
    for cls in (Linear, LayerNormLinear, GroupedLinear, RMSNorm, LayerNorm, DotProductAttention):
        setattr(pytorch, cls.__name__, cls)
    distributed = _Stub("transformer_engine.pytorch.distributed")
    distributed.CudaRNGStatesTracker = CudaRNGStatesTracker
    pytorch.distributed = distributed
    offload = _Stub("transformer_engine.pytorch.cpu_offload")
    offload.get_cpu_offload_context = lambda *args, **kwargs: (contextlib.nullcontext(), None)
    common = _Stub("transformer_engine.common")
    common.__path__ = []
    recipe = _Stub("transformer_engine.common.recipe")
    recipe.DelayedScaling = DelayedScaling
    common.recipe = recipe
    te.pytorch, te.common = pytorch, common
    for module in (te, pytorch, distributed, offload, common, recipe):
        sys.modules[module.__name__] = module
    sys.meta_path.insert(0, _Finder())
    return te


class _CpuIndex(str):
    """The CPU as verl's ``get_device_id()`` (``torch.cpu.current_device()``): ``"cpu"`` where it is passed as a
    device, ``0`` where it is formatted after ``"cpu:"`` (``verl/utils/megatron_utils.py:123``)."""

    def __format__(self, spec):
        return "0"


_CPU = _CpuIndex("cpu")


def install() -> None:
    """Put the stand-ins in place; call before importing megatron or verl."""
    _transformer_engine()
    init = torch.distributed.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        return init("gloo" if backend in (None, "nccl") else backend, *args, **kwargs)

    torch.distributed.init_process_group = init_process_group
    cpu_generator = torch.default_generator
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.manual_seed = lambda seed: None
    torch.cuda.get_rng_state = lambda *a, **k: cpu_generator.get_state()
    torch.cuda.set_rng_state = lambda *a, **k: None
    torch.cuda.random.get_rng_state = torch.cuda.get_rng_state
    torch.cuda.random.set_rng_state = torch.cuda.set_rng_state
    torch.cuda.default_generators = (cpu_generator,)
    torch.cpu.empty_cache = lambda: None  # verl's loader frees the device's cache after loading
    torch.cpu.current_device = lambda: _CPU  # verl: f"{device}:{get_device_id()}" and device=get_device_id()
    torch.cuda.Stream = lambda *a, **k: None  # the MoE dispatcher's device-to-host stream, used only in forward
    _write_item_default_format()


def install_for_merger() -> None:
    """:func:`install`, and verl's ``get_nccl_backend()`` (which the merger calls, and which raises on a CPU)
    answering gloo."""
    install()
    from verl.utils import device

    device.get_nccl_backend = lambda: "gloo"


def _write_item_default_format() -> None:
    """torch >= 2.7's ``filesystem._write_item`` takes a ``serialization_format`` megatron-core 0.12.1's
    ``filesystem_async.py`` (lines 320, 326) does not pass: default it to ``TORCH_SAVE``, the one format
    the torch megatron-core 0.12.1 was written against had (one ``torch.save`` record per item)."""
    from torch.distributed.checkpoint import filesystem

    if "serialization_format" not in inspect.signature(filesystem._write_item).parameters:
        return
    write_item = filesystem._write_item

    def _write_item(*args, serialization_format=filesystem.SerializationFormat.TORCH_SAVE):
        return write_item(*args, serialization_format)

    filesystem._write_item = _write_item
