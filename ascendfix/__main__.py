"""``python -m ascendfix`` and the ``ascendfix`` console script: :func:`run`."""

import gc


def run() -> None:
    """The ``ascendfix`` command: :func:`ascendfix.cli.entry`, the garbage collector paused from the first import.

    click's import and the command line's own make thousands of objects that live as long as the process and
    hold no garbage; the collector would walk them again and again while they are made (3% of what ``status``
    executes). ``entry`` keeps it paused through the command's own imports and then resumes it.
    """
    gc.disable()
    from ascendfix.cli import entry

    entry()


if __name__ == "__main__":
    run()
