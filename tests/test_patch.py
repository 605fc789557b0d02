"""kernelkit.patch on a small random-weight Llama from transformers (CPU)."""

import copy
import types

import pytest
import torch

import kernelkit

transformers = pytest.importorskip("transformers")


def test_patch_reports_and_matches_the_unpatched_model(tiny_llama):
    base = tiny_llama()
    patched = copy.deepcopy(base)
    report = kernelkit.patch(patched)
    assert report.replaced["RMSNorm -> kernelkit.ops.rms_norm"] == 5
    assert report.replaced["MLP -> kernelkit.ops.swiglu"] == 2
    assert report.replaced["causal-LM loss -> kernelkit.ops.cross_entropy"] == 1
    assert any("apply_rotary_pos_emb" in k for k in report.replaced)
    assert "kernelkit.patch replaced" in str(report)

    ids = torch.randint(0, 128, (2, 24))
    labels = ids.clone()
    labels[:, :3] = -100
    out_b = base(input_ids=ids, labels=labels)
    out_p = patched(input_ids=ids, labels=labels)
    torch.testing.assert_close(out_p.logits, out_b.logits, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out_p.loss, out_b.loss, atol=2e-5, rtol=2e-5)
    out_b.loss.backward()
    out_p.loss.backward()
    for (n, pb), (_, pp) in zip(base.named_parameters(), patched.named_parameters()):
        torch.testing.assert_close(pp.grad, pb.grad, atol=5e-5, rtol=5e-4, msg=n)


@pytest.mark.parametrize("items", [50, "tensor"])
def test_patched_loss_divides_by_the_accumulated_batchs_tokens(tiny_llama, items):
    """As transformers' Trainer calls the loss under gradient accumulation: a sum over this micro-batch divided by
    num_items_in_batch, the tokens of the whole accumulated batch (an int or a tensor)."""
    base = tiny_llama()
    patched = copy.deepcopy(base)
    kernelkit.patch(patched)
    ids = torch.randint(0, 128, (2, 24))
    labels = ids.clone()
    labels[:, :3] = -100
    num = 50 if items == 50 else torch.tensor(50)
    out_b = base(input_ids=ids, labels=labels, num_items_in_batch=num)
    out_p = patched(input_ids=ids, labels=labels, num_items_in_batch=num)
    torch.testing.assert_close(out_p.loss, out_b.loss, atol=2e-5, rtol=2e-5)
    out_b.loss.backward()
    out_p.loss.backward()
    for (n, pb), (_, pp) in zip(base.named_parameters(), patched.named_parameters()):
        torch.testing.assert_close(pp.grad, pb.grad, atol=5e-5, rtol=5e-4, msg=n)


def test_training_losses_agree_over_steps(tiny_llama):
    base = tiny_llama()
    patched = copy.deepcopy(base)
    kernelkit.patch(patched)
    losses = {}
    for tag, model in (("base", base), ("patched", patched)):
        torch.manual_seed(1)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        curve = []
        for _ in range(5):
            ids = torch.randint(0, 128, (4, 16))
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses[tag] = curve
    assert max(abs(a - b) for a, b in zip(losses["base"], losses["patched"])) < 1e-4, losses


@pytest.mark.parametrize("heads", [(4, 2), (4, 4)], ids=["gqa", "mha"])
def test_patched_rope_takes_the_attention_layout(heads):
    """The replacement apply_rotary_pos_emb on q and k as LlamaAttention makes them (transposed projections,
    fewer k heads under GQA): the original's values and output strides."""
    from transformers.models.llama import modeling_llama

    from kernelkit.patching import _make_rope

    original = getattr(modeling_llama.apply_rotary_pos_emb, "_kernelkit_original", modeling_llama.apply_rotary_pos_emb)
    calls = []
    patched = _make_rope(lambda *a, **kw: calls.append(a) or "original")
    (hq, hk), b, s, d = heads, 2, 7, 16
    q = torch.randn(b, s, hq * d).view(b, s, hq, d).transpose(1, 2)
    k = torch.randn(b, s, hk * d).view(b, s, hk, d).transpose(1, 2)
    cos, sin = torch.randn(b, s, d), torch.randn(b, s, d)
    for out, ref in zip(patched(q, k, cos, sin), original(q, k, cos, sin)):
        torch.testing.assert_close(out, ref)
        assert out.stride() == ref.stride()
    assert not calls
    # Tables narrower than head_dim (partial rotary) and mixed dtypes are left to the original.
    assert patched(q, k, cos[..., : d // 2], sin[..., : d // 2]) == "original"
    assert patched(q, k.double(), cos, sin) == "original"
    assert len(calls) == 2


def test_patch_leaves_unknown_modules_alone_and_unpatches(tiny_llama):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    report = kernelkit.patch(model)
    assert report.replaced == {}
    assert any("loss not replaced" in why for why in report.left_alone)
    llama = tiny_llama()
    kernelkit.patch(llama)
    from kernelkit.patching import unpatch

    unpatch(llama)
    assert all("forward" not in m.__dict__ for m in llama.modules())


def test_patch_refuses_a_model_on_a_device_without_kernels(monkeypatch, tiny_llama):
    model = tiny_llama()
    on_xpu = types.SimpleNamespace(device=torch.device("xpu"))
    monkeypatch.setattr(model, "parameters", lambda: iter([on_xpu]))
    with pytest.raises(NotImplementedError, match="have no xpu kernels"):
        kernelkit.patch(model)


@pytest.mark.gpu
def test_patch_a_cuda_model(tiny_llama):
    model = tiny_llama().cuda()
    report = kernelkit.patch(model)
    assert report.replaced["RMSNorm -> kernelkit.ops.rms_norm"] > 0
    ids = torch.randint(0, 100, (2, 16), device="cuda")
    assert torch.isfinite(model(input_ids=ids, labels=ids).loss)
