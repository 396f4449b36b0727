"""Comment a module-level assignment out and assign another value below it, as a hand edit does."""

import ast

from ascendfix.transforms.base import MARKER_PREFIX, Outcome, Transform, TransformError


def _ending(line: bytes) -> bytes:
    return line[len(line.rstrip(b"\r\n")) :]


class CommentOutAssignment(Transform):
    """Matches a module-level one-line ``<target> = <original>``; comments it out and writes ``<target> = <value>``.

    The form the guide's 5.1 has a team type: the line kept behind ``#`` (no space), the new
    assignment on the next line, no marker. A done site is ``<target> = <value>`` (any comment after
    it), alone or below the line kept behind ``#`` or ``# `` ("assign False directly" allows each);
    the inverse gives the original line back (dropping the new one and the ``#``), byte for byte.
    """

    name = "comment-out-assignment"

    def __init__(self, target: str, original: str, value: str):
        self.stmt = f"{target} = {original}".encode()
        self.edited = f"{target} = {value}".encode()

    def reproduces(self, original: bytes, code: bytes, patch_id: str) -> bool:
        """Each spelling of a done site (see the class) is undone by its own inverse, line by line."""
        back = self.revert(code, patch_id)
        return back.done > 0 and back.code == original

    def _is_edited(self, text: bytes) -> bool:
        rest = text[len(self.edited) :] if text.startswith(self.edited) else None
        comment = rest.lstrip(b" \t") if rest is not None else b""
        return rest is not None and (not rest or comment.startswith(b"#") and MARKER_PREFIX.encode() not in comment)

    def _is_kept(self, text: bytes) -> bool:
        return text.startswith(b"#") and text[1:].lstrip(b" ") == self.stmt

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError) as e:
            raise TransformError(f"not valid Python ({e})") from None
        one_line = {n.lineno for n in tree.body if isinstance(n, ast.Assign) and n.lineno == n.end_lineno}
        lines = source.splitlines(keepends=True)
        bare = [line.rstrip(b"\r\n") for line in lines]
        pending = [i for i, text in enumerate(bare) if i + 1 in one_line and text == self.stmt]
        done = [i for i, text in enumerate(bare) if i + 1 in one_line and self._is_edited(text)]
        out = list(lines)
        if forward:
            for i in pending:
                ending = _ending(lines[i])
                # the last line of a file without a final newline: the new line ends the file the same way
                out[i] = b"#" + lines[i] + (b"" if ending else b"\n") + self.edited + ending
        else:
            for i in done:
                if i and self._is_kept(bare[i - 1]):
                    out[i - 1], out[i] = self.stmt + _ending(lines[i - 1]), b""
                else:
                    out[i] = self.stmt + _ending(lines[i])
        return Outcome(b"".join(out), len(pending), len(done))
