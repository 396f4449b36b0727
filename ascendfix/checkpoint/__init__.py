"""checkpoint: distributed checkpoints, checked offline, without torch.

A torch.distributed.checkpoint folder (``.metadata``, ``*.distcp``) and Megatron's layout around it
(``metadata.json``, ``common.pt``), read without running any pickle's code: ``pickles`` reads the
pickles through an allow-list of stand-ins; ``layout`` turns ``.metadata`` into plain records;
``geometry`` checks each tensor's chunks (bounds, overlap, exact cover) with the fast-validate
template's own scan; ``check`` checks the files and runs the whole ``ckpt check``; ``megatron``
holds Megatron's files and the HF config's layer and expert counts; ``views`` is one node's file
view for ``--ray``.

May import: the loose modules ``errors``, ``states``, ``resources``, ``fsutil``, ``jsonable``, ``tuples``. Never torch.
"""
