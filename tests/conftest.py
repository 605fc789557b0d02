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


@pytest.fixture
def tiny_llama():
    """A factory of small random-weight Hugging Face Llamas (float32, seed 0, eager attention)."""
    transformers = pytest.importorskip("transformers")

    def make():
        import torch

        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            attn_implementation="eager",
        )
        return transformers.LlamaForCausalLM(cfg).float()

    return make
