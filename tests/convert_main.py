"""Run one of verl's scripts with the CPU stand-ins in place (tests/mcore_standins.py):
``python -m tests.convert_main SCRIPT ARGS`` (the converter), or ``python -m tests.convert_main -m MODULE ARGS``
(``verl.model_merger``)."""

import runpy
import sys

from tests import mcore_standins

if sys.argv[1] == "-m":
    mcore_standins.install_for_merger()
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    mcore_standins.install()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
