"""patching: plan → verify → one write transaction → journal; revert; recover; upgrade-check.

``engine`` selects the patches (their packages located by the command's
:class:`~ascendfix.site.Site`) and makes the plan, a value: ``evaluate`` gives each file's state and
the writes apply would make, by package root, ``revert`` revert's plan; ``proof`` says which bytes from a state
folder may be written back (a known original, or the forward transform of one); ``journal`` owns
the one write transaction (locks, temp-file sweep, journal, backups, atomic writes, records,
rollback, recovery) on ``tree``'s primitives (a root's files reached without following a link, atomic
writes, root locks), and ``records`` what its state files hold and the checks they must pass;
``hand_edits`` tells the guide's own edits of a patch's files; ``upgrade`` judges candidate
releases in memory, ``index`` fetches them (and pinned releases' requirements) into the private
cache, and ``drop_probes`` is the registry of the checks of a patch's ``drop_when`` it runs on
them (``scan_probe``: torch's own overlap check run on stand-in types in a jailed child, its work counted — the
torch patches' probe).

May import: ``profile``, ``transforms`` and the loose modules ``site`` (where the packages are),
``errors``, ``states``, ``resources``, ``fsutil``, ``tuples``.
"""
