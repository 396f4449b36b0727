"""verify: ``ckpt verify``, a converted checkpoint proven byte for byte against the one it came from.

``mapping`` reads the reviewed mapping (``mappings/*.toml``: each Hugging Face tensor's mcore key,
region and byte arrangement) and the HF ``config.json``; ``sides`` locates every tensor's bytes on
both sides without loading any (safetensors headers; a DCP's ``.metadata`` and each record's zip,
never running a pickle); ``compare`` streams the mapped regions of both sides through two reused
buffers and compares them directly; ``run`` ties them into the report.
"""
