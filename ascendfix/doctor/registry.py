"""Every check doctor knows, in report order: id -> (title, group, function, preflight). Ids are stable.

The image's build step runs the ``Python environment`` group (:data:`IMAGE_GROUP`: an image holds no NPU,
driver or host to check); ``run``'s preflight runs every check whose ``preflight`` is true.
"""

from __future__ import annotations

from collections.abc import Callable

from ascendfix.doctor import ascend, host, patches, pyenv
from ascendfix.doctor.context import Context
from ascendfix.doctor.model import Finding
from ascendfix.tuples import NamedTuple


class Check(NamedTuple):
    """One registered check."""

    id: str
    title: str
    group: str
    function: Callable[[Context], Finding]
    preflight: bool = True  # run's preflight runs it (False: run does that part itself)


PYTHON, ASCEND, HOST = "Python environment", "Ascend stack", "Host"
IMAGE_GROUP = PYTHON

CHECKS: dict[str, Check] = {
    c.id: c
    for c in (
        Check("python", "Python", PYTHON, pyenv.check_python),
        Check("packages", "Packages", PYTHON, pyenv.check_packages),
        Check("commits", "Source commits", PYTHON, pyenv.check_commits),
        Check("integrity", "Installed-file integrity", PYTHON, pyenv.check_integrity),
        Check("patches", "Patches", PYTHON, patches.check_patches, preflight=False),  # run reads the patch states
        Check("conflicts", "Conflicts", PYTHON, pyenv.check_conflicts),
        Check("cann", "CANN toolkit", ASCEND, ascend.check_cann),
        Check("driver", "Ascend driver", ASCEND, ascend.check_driver),
        Check("npu", "NPUs", ASCEND, ascend.check_npu),
        Check("cuda", "CUDA stack", "CUDA stack", host.check_cuda),
        Check("os", "Operating system", HOST, host.check_os),
        Check("env", "Runtime environment", HOST, host.check_env, preflight=False),  # run sets the environment
        Check("disk", "Checkpoint disk", HOST, host.check_disk),
        Check("hazards", "Known hazards", HOST, host.check_hazards),
    )
}


def image_checks() -> tuple[str, ...]:
    """The ids of the checks the image's build step runs (``doctor --only``)."""
    return tuple(c.id for c in CHECKS.values() if c.group == IMAGE_GROUP)
