import os
import tempfile

import pytest

# Every test run gets its own compile cache, so cache tests see cold and warm states they made.
os.environ.setdefault("KERNELKIT_CACHE_DIR", tempfile.mkdtemp(prefix="kernelkit-test-cache-"))


def _gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
