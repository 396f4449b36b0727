"""verl training metrics: step lines in, Step records and throughput figures out.

verl's console logger prints one line per step, ``step:N - key:value - key:value ...``.
Through Ray the line gains a coloured ``(TaskRunner pid=…)`` prefix and sometimes a
``[repeated Nx across cluster]`` suffix; the raw line also sits in the session's
``worker-*.out`` files, so a step is kept once. verl's ``file`` logger writes the same
data as JSONL (``{"step": N, "data": {...}}``). Files are scanned in large chunks and only
the lines around a ``step:`` match are decoded, so memory stays constant and throughput
stays close to grep's.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ascendfix.jsonable import loads

E2E = "perf/throughput"
TOKENS = "perf/total_num_tokens"
TIME_PER_STEP = "perf/time_per_step"
STEP_TIME = "timing_s/step"
GEN_TIME = "timing_s/gen"
UPDATE_TIME = "timing_s/update_actor"
REWARD = "critic/rewards/mean"
SCORE = "critic/score/mean"
RESPONSE_LENGTH = "response_length/mean"
PROMPT_LENGTH = "prompt_length/mean"
UNSTEADY_KEYS = ("timing_s/testing", "timing_s/save_checkpoint")
# verl's fit() times its phases one after another inside marked_timer("step"), so their shares of a step add
# up to at most 100%; verl@796871d ray_trainer.py:1138-1145. "reshard" and "generate_sequences" are timed by
# the worker inside generate_sequences (megatron_workers.py:637-645, the sharding manager's __enter__ at
# sharding_manager/megatron_vllm.py:143-145), which runs inside marked_timer("gen"): they are parts of gen.
BREAKDOWN = ("gen", "old_log_prob", "ref", "update_actor")
WITHIN_GEN = ("generate_sequences", "reshard")

_ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
_STEP = re.compile(rb"(?:^|[\s)\]])step:(\d+)((?: - [^\n]*)?)$")
_REPEATED = re.compile(rb"\s*\[repeated \d+x across cluster\]\s*$")
_NP_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")
_TOTAL = re.compile(rb"Total training steps: (\d+)")
_CHUNK = 1 << 22
# The longest unfinished line kept (a verl step line is a few KB; tqdm's \r bars never end a line).
MAX_PARTIAL_LINE = 1 << 20


@dataclass
class Step:
    """One logged step: its number and its numeric metrics (nan and inf kept)."""

    step: int
    values: dict[str, float]

    def get(self, key: str) -> float | None:
        """The value of ``key``, or None when the step did not log it."""
        return self.values.get(key)

    @property
    def is_training(self) -> bool:
        """A training step (step 0 and validation-only lines carry no step time)."""
        return STEP_TIME in self.values or TIME_PER_STEP in self.values

    @property
    def is_steady(self) -> bool:
        """Counts towards steady-state figures: not step 1, no validation, no checkpoint save."""
        return self.is_training and self.step != 1 and not any(k in self.values for k in UNSTEADY_KEYS)


@dataclass
class ParseStats:
    """What a parse saw besides the steps it kept."""

    step_lines: int = 0
    duplicates: int = 0
    skipped: int = 0
    files: int = 0
    total_steps: int | None = None


def parse_value(text: str) -> float | None:
    """A logged number as a float (``nan``, ``inf``, ``np.float64(…)`` included), or None if it is not one."""
    text = text.strip()
    m = _NP_SCALAR.match(text)
    if m:
        text = m.group(1)
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text)
    except ValueError:
        return None


def parse_line(line: bytes | str) -> Step | Literal[False] | None:
    """Parse one console line: a Step, None when it is not a step line, False when it is one but malformed."""
    raw = line.encode() if isinstance(line, str) else line
    if b"step:" not in raw:
        return None
    raw = _ANSI.sub(b"", raw.rstrip(b"\r\n"))
    raw = _REPEATED.sub(b"", raw)
    m = _STEP.search(raw)
    if m is None:
        return None
    try:
        body = m.group(2).decode()
    except UnicodeDecodeError:
        return False
    values: dict[str, float] = {}
    for item in body.split(" - ")[1:]:
        key, sep, text = item.rpartition(":")
        value = parse_value(text) if sep and key else None
        if value is None:
            return False
        values[key.strip()] = value
    if not values:
        return False
    return Step(int(m.group(1)), values)


def parse_json_record(line: bytes | str) -> Step | Literal[False] | None:
    """Parse one line of verl's ``file`` logger: a Step, None for a blank line, False when malformed."""
    if not line.strip():
        return None
    try:
        record = loads(line)
        step, data = int(record["step"]), record["data"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(data, dict):
        return False
    values = {}
    for key, value in data.items():
        if value is None:
            values[key] = math.nan  # orjson writes nan and inf as null
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values[key] = float(value)
    return Step(step, values)


@dataclass
class Segment:
    """One run's steps inside a log: a step number that comes again with other values (a resumed or
    restarted run) starts another. ``origin`` is the file it was first seen in; ``order`` sorts the
    segments as they were written."""

    steps: dict[int, Step] = field(default_factory=dict)
    origin: str = ""
    order: tuple[float, int] = (0.0, 0)


class StepParser:
    """Streaming parser: feed lines (from a live job or files); keeps each step once, per segment.

    A step seen again with the same values (prefixed in the driver log, raw in ``worker-*.out``) is
    counted as a duplicate; the record with more metrics wins, so a truncated copy never replaces a
    whole one. A step number that comes again with other values starts a new segment: the same log
    (or Ray session folder) then holds a crashed run and its resumption (``resume_mode=auto``), which
    logs again from its last save, or two runs. Each file follows its own segment; a file whose steps
    repeat a known segment's values joins it.
    """

    def __init__(self, on_step: Callable[[Step], None] | None = None):
        self.segments: list[Segment] = []
        self.stats = ParseStats()
        self.on_step = on_step
        self.source = ""  # the file being read, when reading files
        self.source_time = 0.0  # its modification time: segments of different files sort by it
        self._cursor: dict[str, Segment] = {}  # per source: the segment it feeds

    @property
    def ordered(self) -> list[Segment]:
        """The segments as they were written: by their file's modification time, then by position."""
        return sorted(self.segments, key=lambda s: s.order)

    @property
    def steps(self) -> dict[int, Step]:
        """The latest segment's steps (all steps when the log holds one run)."""
        ordered = self.ordered
        return ordered[-1].steps if ordered else {}

    def feed(self, line: bytes | str) -> Step | None:
        """Parse one console line; returns the Step it added (None for anything else)."""
        raw = line.encode() if isinstance(line, str) else line
        if b"Total training steps" in raw:
            m = _TOTAL.search(raw)
            if m:
                self.stats.total_steps = int(m.group(1))
            return None
        return self._add(parse_line(raw))

    def feed_lines(self, buf: bytes) -> None:
        """Parse a block of complete lines; only the lines that can matter are looked at."""
        for line in _lines_with(buf):
            self.feed(line)

    def feed_json(self, line: bytes | str) -> Step | None:
        """Parse one line of verl's ``file`` logger JSONL."""
        return self._add(parse_json_record(line))

    def _add(self, parsed: Step | Literal[False] | None) -> Step | None:
        if parsed is None:
            return None
        self.stats.step_lines += 1
        if parsed is False:
            self.stats.skipped += 1
            return None
        segment = self._segment_for(parsed)
        known = segment.steps.get(parsed.step)
        self._cursor[self.source] = segment
        if known is not None:
            self.stats.duplicates += 1
            if len(parsed.values) <= len(known.values):
                return None
        segment.steps[parsed.step] = parsed
        if self.on_step is not None and known is None:
            self.on_step(parsed)
        return parsed

    def _segment_for(self, step: Step) -> Segment:
        """The segment ``step`` belongs to: the one this source feeds, unless that one holds the step with
        other values (the run was resumed or restarted); else a known segment holding the same record
        (another copy of that run); else a new one."""
        current = self._cursor.get(self.source)
        if current is not None:
            known = current.steps.get(step.step)
            if known is None or _same_values(known, step):
                return current
        for segment in self.segments:
            known = segment.steps.get(step.step)
            if known is not None and _same_values(known, step):
                return segment
        segment = Segment(origin=self.source, order=(self.source_time, len(self.segments)))
        self.segments.append(segment)
        return segment

    def feed_file(self, path: Path) -> None:
        """Parse a whole log or JSONL file without holding it in memory.

        A partial line is capped as ``run``'s live pump caps it: a line that never ends (tqdm's
        ``\r`` bars) keeps only its last ``MAX_PARTIAL_LINE`` bytes, so time and memory stay linear.
        """
        self.stats.files += 1
        self.source = str(path)
        try:
            self.source_time = path.stat().st_mtime
        except OSError:
            self.source_time = 0.0
        if path.suffix == ".jsonl":
            with open(path, "rb") as f:
                for line in f:
                    self.feed_json(line)
            return
        with open(path, "rb") as f:
            tail = b""
            while chunk := f.read(_CHUNK):
                buf = tail + chunk
                del chunk, tail  # one chunk's copy alive at a time
                cut = buf.rfind(b"\n") + 1
                self.feed_lines(buf[:cut])
                tail = partial_line(buf, cut)
                del buf
            self.feed_lines(tail)


def partial_line(data: bytes, cut: int) -> bytes:
    """What to keep of ``data`` after its last complete line (which ends at ``cut``): at most the last
    ``MAX_PARTIAL_LINE`` bytes, so an unfinished line never grows without bound."""
    return data[max(cut, len(data) - MAX_PARTIAL_LINE) :]


def _same_values(a: Step, b: Step) -> bool:
    """Whether two records of one step agree on every metric both carry (<= 0.4.1 prints 3 decimals)."""
    for key in a.values.keys() & b.values.keys():
        x, y = a.values[key], b.values[key]
        if not (x == y or (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-3)):
            return False
    return True


def _lines_with(buf: bytes) -> Iterator[bytes]:
    """Lines holding ``step:<digit>`` or the total-steps banner; one ``find`` for both keeps it one pass.
    A line is taken from at most ``MAX_PARTIAL_LINE`` bytes before its match (what tqdm's bars left before it)."""
    find, rfind = buf.find, buf.rfind
    pos = find(b"step")
    while pos != -1:
        after = buf[pos + 4 : pos + 6]
        if (after[:1] == b":" and after[1:].isdigit()) or buf.startswith(b"Total training ", pos - 15):
            end = find(b"\n", pos)
            end = len(buf) if end == -1 else end
            yield buf[max(rfind(b"\n", 0, pos) + 1, pos - MAX_PARTIAL_LINE) : end]
            pos = find(b"step", end)
        else:
            pos = find(b"step", pos + 4)


def log_files(path: Path) -> list[Path]:
    """The files to read for PATH: the file itself, or every log/out/err/jsonl file under a directory."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    found = []
    for root, _dirs, names in os.walk(path):
        for name in names:
            candidate = Path(root) / name
            if name.endswith((".log", ".out", ".err", ".jsonl", ".txt")) and candidate.is_file():
                found.append(candidate)  # a dangling link or a vanished file is not a log
    return sorted(found)


def parse_paths(paths: Iterable[Path]) -> StepParser:
    """Parse every log file, Ray session logs directory or JSONL file of one run."""
    parser = StepParser()
    for path in paths:
        for file in log_files(path):
            parser.feed_file(file)
    return parser


def throughput(step: Step) -> dict[str, float | None]:
    """e2e, update and vllm tokens/s per device and the world size, derived from the step's own line.

    e2e_tps is ``perf/throughput`` (total tokens / (step time × devices)); world size is
    total tokens / (throughput × time per step); update_tps and vllm_tps divide the tokens by
    world size × ``timing_s/update_actor`` and × ``timing_s/gen``.
    """
    tokens, e2e = step.get(TOKENS), step.get(E2E)
    step_time = step.get(TIME_PER_STEP) or step.get(STEP_TIME)
    world = None
    if tokens and e2e and step_time and math.isfinite(e2e) and e2e > 0:
        world = round(tokens / (e2e * step_time))

    def per_device(seconds: float | None) -> float | None:
        if not (tokens and world and seconds) or not math.isfinite(seconds) or seconds <= 0:
            return None
        return tokens / (world * seconds)

    return {
        "e2e_tps": e2e,
        "update_tps": per_device(step.get(UPDATE_TIME)),
        "vllm_tps": per_device(step.get(GEN_TIME)),
        "world_size": world,
    }


def median(values: Iterable[float | None]) -> float | None:
    """The median of the finite values, or None when there are none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None


@dataclass
class Series:
    """Training steps of a run, with the steady ones singled out."""

    steps: list[Step]
    steady: list[Step] = field(default_factory=list)

    @classmethod
    def of(cls, steps: Iterable[Step]) -> Series:
        """Training steps (validation-only lines dropped), by step number. The first one is never steady:
        it is step 1's warm-up, or a resumed run's (its first step loads the save and starts the engines)."""
        training = sorted((s for s in steps if s.is_training), key=lambda s: s.step)
        return cls(training, [s for s in training[1:] if s.is_steady])

    def basis(self) -> list[Step]:
        """The steps steady-state figures are taken over: the steady ones, else all (a short run)."""
        return self.steady or self.steps

    def steady_median(self, key: str) -> float | None:
        """The median of ``key`` over the steady steps."""
        return median(s.get(key) for s in self.basis())

    def steady_throughput(self) -> dict[str, float | None]:
        """Median e2e/update/vllm tokens/s and world size over the steady steps."""
        per_step = [throughput(s) for s in self.basis()]
        return {k: median(t[k] for t in per_step) for k in ("e2e_tps", "update_tps", "vllm_tps", "world_size")}
