"""Steps for the bounded child's time limit (a module of their own: a fresh interpreter imports it quickly)."""

from __future__ import annotations

import time

from ascendfix.checkpoint import bounded


def stuck() -> dict:
    """A step that never ends."""
    bounded.step("__1_0.distcp")
    time.sleep(60)
    return {}


def reading_on() -> dict:
    """A step of 5 s that reads a block every 0.5 s."""
    bounded.step("__1_0.distcp")
    for _ in range(10):
        time.sleep(0.5)
        bounded.progress()
    return {"read": 10}
