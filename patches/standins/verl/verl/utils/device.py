import torch


def is_torch_npu_available() -> bool:
    return False


is_cuda_available = torch.cuda.is_available()
is_npu_available = is_torch_npu_available()
