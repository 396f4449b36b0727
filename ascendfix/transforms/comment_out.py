"""Comment a module-level assignment out and assign another value below it, as a hand edit does."""

from __future__ import annotations

import ast

from ascendfix.transforms.base import Outcome, Transform, TransformError


def _ending(line: bytes) -> bytes:
    return line[len(line.rstrip(b"\r\n")) :]


class CommentOutAssignment(Transform):
    """Matches a module-level one-line ``<target> = <original>``; comments it out and writes ``<target> = <value>``.

    The form the guide's 5.1 has a team type: the line kept behind ``#`` (no space), the new
    assignment on the next line, no marker. A done site is exactly that pair of lines; the
    inverse drops the new line and the ``#``, byte for byte.
    """

    name = "comment-out-assignment"

    def __init__(self, target: str, original: str, value: str):
        self.stmt = f"{target} = {original}".encode()
        self.edited = f"{target} = {value}".encode()

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError) as e:
            raise TransformError(f"not valid Python ({e})") from None
        one_line = {n.lineno for n in tree.body if isinstance(n, ast.Assign) and n.lineno == n.end_lineno}
        lines = source.splitlines(keepends=True)
        bare = [line.rstrip(b"\r\n") for line in lines]
        pending = [i for i, text in enumerate(bare) if i + 1 in one_line and text == self.stmt]
        done = [
            i
            for i, text in enumerate(bare)
            if i and i + 1 in one_line and text == self.edited and bare[i - 1] == b"#" + self.stmt
        ]
        out = list(lines)
        if forward:
            for i in pending:
                ending = _ending(lines[i])
                # the last line of a file without a final newline: the new line ends the file the same way
                out[i] = b"#" + lines[i] + (b"" if ending else b"\n") + self.edited + ending
        else:
            for i in done:
                out[i - 1], out[i] = lines[i - 1][1:], b""
        return Outcome(b"".join(out), len(pending), len(done))
