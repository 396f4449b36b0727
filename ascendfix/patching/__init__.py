"""patching: plan → verify → one write transaction → journal; revert; recover; upgrade-check.

``engine`` evaluates each file of each patch (its package located by the command's
:class:`~ascendfix.site.Site`) and plans the writes; ``journal`` owns the one write
transaction (locks, temp-file sweep, journal, backups, atomic writes, records, rollback,
recovery); ``upgrade`` judges candidate releases in memory, and ``drop_probes`` is the registry
of the checks of a patch's ``drop_when`` it runs on them (``scan_probe``: torch's own overlap
check run on stand-in types, its work counted — the torch patches' probe).

May import: ``profile``, ``transforms`` and the loose modules ``site`` (where the packages are),
``errors``, ``states``, ``resources``, ``fsutil``.
"""
