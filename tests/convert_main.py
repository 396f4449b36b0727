"""Run one of verl's scripts (argv[1]) with the CPU stand-ins in place: ``python -m tests.convert_main SCRIPT ARGS``."""

import runpy
import sys

from tests import mcore_standins

mcore_standins.install()
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
