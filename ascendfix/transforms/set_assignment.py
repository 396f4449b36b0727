"""Set the value of a module-level assignment."""

from ascendfix.transforms.base import Outcome, Transform


class SetAssignment(Transform):
    """Matches a module-level ``<target> = <original>`` statement and sets its value to ``value``.

    Only an exact ``original`` (as written) counts as a site: a different expression
    is a file this transform does not understand. The inverse restores ``original``.
    """

    name = "set-assignment"

    def __init__(self, target: str, original: str, value: str):
        self.target, self.original, self.value = target, original, value

    def _rewrite(self, source: bytes, patch_id: str, forward: bool) -> Outcome:
        import libcst as cst

        from ascendfix.transforms import cst_util as u

        module = u.parse(source)
        body = list(module.body)
        pending = done = 0
        for index, stmt in enumerate(module.body):
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
                continue
            assign = stmt.body[0]
            if not (
                isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
                and assign.targets[0].target.value == self.target
            ):
                continue
            written = u.code_of(assign.value)
            is_done = written == self.value and u.has_marker(stmt.trailing_whitespace, patch_id)
            if written != self.original and not is_done:
                continue
            done += is_done
            pending += not is_done
            if forward != is_done:
                new_value, mark = (self.value, u.add_marker) if forward else (self.original, u.drop_marker)
                body[index] = stmt.with_changes(
                    body=[assign.with_changes(value=cst.parse_expression(new_value))],
                    trailing_whitespace=mark(stmt.trailing_whitespace, patch_id),
                )
        return Outcome(module.with_changes(body=body).bytes, pending, done)
