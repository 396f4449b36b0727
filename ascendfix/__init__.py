"""ascendfix: declarative, checked and repeatable verl RL training on Huawei Ascend NPUs."""

__version__ = "0.1.0"
