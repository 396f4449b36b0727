"""Which accelerator this machine has, when the user did not say."""

from __future__ import annotations

from pathlib import Path

from ascendfix.errors import UsageError

ASCEND_HOME = Path("/usr/local/Ascend")
DEVICES = ("npu", "cuda")  # the device kinds a profile can define


def detect_device(ascend_home: Path = ASCEND_HOME) -> str | None:
    """``npu`` if the Ascend driver or npu-smi is present, ``cuda`` if nvidia-smi is, else None."""
    import shutil

    if (ascend_home / "driver").is_dir() or shutil.which("npu-smi"):
        return "npu"
    if shutil.which("nvidia-smi"):
        return "cuda"
    return None


def require_device(device: str | None, ascend_home: Path = ASCEND_HOME) -> str:
    """``device`` as given, else detected; a UsageError asking for --device when neither works."""
    found = device or detect_device(ascend_home)
    if found is None:
        raise UsageError("no Ascend driver, npu-smi or nvidia-smi found: pass --device npu or --device cuda")
    return found
