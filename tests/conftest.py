import os
import subprocess
import sys
import tempfile
import textwrap

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
# KERNELKIT_TEST_TIMES=FILE: each test's phase times, appended as the test ends, so a run cut off by a
# time limit (the GPU machine's) still says where its time went. Written by the controller only.
_TIMES = os.environ.get("KERNELKIT_TEST_TIMES")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_phases: dict = {}


def pytest_runtest_logreport(report):
    if not _TIMES or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    phases = _phases.setdefault(report.nodeid, [])
    phases.append(f"{report.when} {report.outcome} {report.duration:.2f}")
    if report.when == "teardown":
        with open(_TIMES, "a") as f:
            f.write(f"{report.nodeid}\t{' '.join(_phases.pop(report.nodeid))}\n")


@pytest.fixture
def launch_in_subprocess():
    """Runs ``body`` (Python that launches kernels; torch and kernelkit imported) in a fresh process with
    KERNELKIT_LAUNCH_BLOCKING=1, as a fault or trap ends the CUDA context. Returns (its stdout, its stdout and
    stderr): stdout says "LAUNCH_ERROR <message>" for a kernelkit.LaunchError, else "NO ERROR"."""

    def run(body: str):
        code = (
            "import torch, kernelkit\ntry:\n"
            + textwrap.indent(textwrap.dedent(body).strip(), "    ")
            + "\n    torch.cuda.synchronize()\n    print('NO ERROR')\n"
            + "except kernelkit.LaunchError as e:\n    print('LAUNCH_ERROR', e)\n"
        )
        env = dict(os.environ, KERNELKIT_LAUNCH_BLOCKING="1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        return out.stdout, out.stdout + out.stderr

    return run


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
