"""``ascendfix watch --json`` beside a running job: started once the job's Ray cluster is reachable.

``run`` asks :meth:`Beside.tick` on each turn of its output loop; it looks for the cluster (the
``ray`` commands' rule: ``RAY_ADDRESS``, else the address ``ray start`` left in the Ray folder) at
most every :data:`CHECK_S` seconds, so a job that starts its own cluster is watched once it is up.
The watch is a process of its own (its crash never touches the job, nor ``run``); its JSON lines
come back through :meth:`read`, each event to ``on_event``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping

CHECK_S = 5.0
MAX_LINE = 1 << 20
END_S = 10.0  # how long the watch may take to see the job end before it is stopped


class Beside:
    """The watch process beside the job (none until the cluster answers)."""

    def __init__(self, env: Mapping[str, str], on_event: Callable[[dict], None]) -> None:
        self.env, self.on_event = dict(env), on_event
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.checked = 0.0
        self.partial = b""
        self.abort = False  # set by the caller: end the job (a stall was named under --on-stall abort)
        self.following = False  # the watch follows a job (else nothing is left for it to say at the end)

    def tick(self) -> int | None:
        """Start the watch when the cluster has become reachable; the fd to read when it just started."""
        if self.proc is not None or self.checked and time.monotonic() - self.checked < CHECK_S:
            return None
        import importlib.util

        from ascendfix.cluster.wait import reachable_address

        self.checked = time.monotonic()
        if importlib.util.find_spec("ray") is None:  # no ray here: nothing to watch with
            self.checked = float("inf")
            return None
        self.address = reachable_address(self.env)
        if self.address is None:
            return None
        argv = [sys.executable, "-m", "ascendfix", "watch", "--json", "--address", self.address]
        self.proc = subprocess.Popen(
            argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None  # stdout=PIPE
        os.set_blocking(self.proc.stdout.fileno(), False)
        return self.proc.stdout.fileno()

    def read(self) -> bool:
        """Hand each complete line's event to ``on_event``; False once the watch closed its output."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return True
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:] if len(data) - cut <= MAX_LINE else b""
        for line in data[:cut].splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and "event" in event:
                    self.following = self.following or event["event"] == "job"
                    self.on_event(event)
        return bool(chunk)

    def close(self) -> None:
        """Let the watch see the job end (it then ends by itself), reading what it says; else (or when it
        follows no job: the command was no Ray job) stop it."""
        if self.proc is None:
            return
        deadline = time.monotonic() + (END_S if self.following else 0)
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.read()
            time.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError, AssertionError):
            while self.read():
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
