"""profile: a profile as data — pins, patches, the job's environment, rules.

``records`` is what a profile is (immutable records); ``manifest`` loads a profile's TOML (its
``extends`` chain and patch files) into them, reading each table through ``schema``'s validating
helper; ``parsecache`` keeps a TOML file's parse; ``rules`` parses and evaluates the profile's
``[[rules]]``; ``jobenv`` resolves the job's environment; ``device`` names the devices;
``rl_plugin`` re-derives the edits MindSpeed-RL's rl-plugin installer makes.

May import: ``transforms`` (a patch file's parameters are checked against its transform) and
the loose modules ``errors``, ``states``, ``resources``, ``fsutil``, ``tuples``. Nothing else.
"""
