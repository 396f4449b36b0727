"""patching: plan → verify → one write transaction → journal; revert; recover; upgrade-check.

``locate`` finds a package's files in the target interpreter without importing it; ``engine``
evaluates each file of each patch and plans the writes; ``proof`` says which bytes from a state
folder may be written back (a known original, or the forward transform of one); ``journal`` owns
the one write transaction (locks, temp-file sweep, journal, backups, atomic writes, records,
rollback, recovery) and ``records`` what its state files hold and the checks they must pass;
``upgrade`` judges candidate releases in memory, and ``index`` fetches them (and pinned releases'
requirements) into the private cache.

May import: ``profile``, ``transforms``, ``checkpoint`` (upgrade-check's drop probe) and the
loose modules ``errors``, ``states``, ``resources``, ``fsutil``.
"""
