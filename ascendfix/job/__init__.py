"""job: run a job and read its figures.

``preflight`` checks a job before it starts; ``launch`` prepares, starts and follows it (log
folder, run.json, process group, signals), and ``redact`` keeps run.json to the job's own
variables with no secret in it; ``metrics`` parses verl's step lines; ``report`` turns them
into the guide's throughput figures, and compares two runs; ``triage`` names the first failure
in a job's logs and counts what followed.

May import: ``profile``, ``patching``, ``doctor``, ``cluster``, ``checkpoint`` and the loose
modules ``site``, ``errors``, ``states``, ``resources``, ``fsutil``, ``jsonable``, ``tuples``.
"""
