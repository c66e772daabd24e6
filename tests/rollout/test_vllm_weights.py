"""The tensors a weight sync sends: checkpoint names, full tensors, one at a time (no vLLM needed)."""

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lit_grpo.models.tiny import char_tokenizer, tiny_config
from lit_grpo.rollout.weights import full_weights, merged_adapters


def _tiny_policy(seed: int = 0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(char_tokenizer(), "tiny"))


def test_full_weights_are_the_checkpoint_tensors_tied_ones_under_each_name():
    policy = _tiny_policy()
    sent = dict(full_weights(policy))
    expected = policy.state_dict()
    assert sent.keys() == expected.keys()
    assert sent["lm_head.weight"].data_ptr() == sent["model.embed_tokens.weight"].data_ptr()  # tied: no copy
    assert all(torch.equal(sent[k], expected[k]) for k in expected)
    assert not any(t.requires_grad for t in sent.values())


def test_peft_names_map_back_to_the_base_checkpoint():
    peft = pytest.importorskip("peft")
    base = _tiny_policy()
    config = peft.LoraConfig(
        r=2, target_modules=["q_proj", "down_proj"], modules_to_save=["norm"], init_lora_weights=False
    )
    lora = peft.get_peft_model(copy.deepcopy(base), config)
    lora.merge_adapter()
    try:
        sent = dict(full_weights(lora.get_base_model()))
        merged_q = lora.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
        assert torch.equal(sent["model.layers.0.self_attn.q_proj.weight"], merged_q)
    finally:
        lora.unmerge_adapter()
    assert sent.keys() == base.state_dict().keys()  # no lora_A/B, base_layer or original_module names
    assert not torch.equal(
        sent["model.layers.0.self_attn.q_proj.weight"], base.model.layers[0].self_attn.q_proj.weight
    )


def _shard(model) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def _fsdp2_worker(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import peft

        policy = _tiny_policy()
        reference = {k: v.clone() for k, v in policy.state_dict().items()}
        _shard(policy)
        shard = policy.model.layers[0].mlp.up_proj.weight
        rows = (shard.to_local().shape[0], shard.shape[0])
        # every rank walks the same order: one gather per tensor, each a plain full tensor
        plain_ok = all(
            type(t) is torch.Tensor and torch.equal(t, reference[n]) for n, t in full_weights(policy)
        )
        config = peft.LoraConfig(r=2, target_modules=["q_proj", "down_proj"], init_lora_weights=False)
        lora = peft.get_peft_model(_tiny_policy(), config)
        merged = copy.deepcopy(lora)
        merged.merge_adapter()
        expected = dict(full_weights(merged.get_base_model()))
        x = torch.tensor([[5, 6, 7, 8]])
        with torch.no_grad():
            logits = lora(input_ids=x).logits
        _shard(lora.get_base_model())
        with merged_adapters(lora) as model:  # merged on the shards, gathered, unmerged
            sent = dict(full_weights(model))
        lora_ok = sent.keys() == expected.keys() and all(
            torch.allclose(sent[k], expected[k], atol=1e-6) for k in sent
        )
        with torch.no_grad():
            unmerged_ok = torch.allclose(lora(input_ids=x).logits, logits, atol=1e-5)
        queue.put((rank, plain_ok, lora_ok, unmerged_ok, rows))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_fsdp2_shards_are_gathered_to_full_tensors_with_and_without_lora():
    pytest.importorskip("peft")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_fsdp2_worker, args=(rank, 2, port, queue)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    results = sorted(queue.get(timeout=5) for _ in procs)
    assert [r[0] for r in results] == [0, 1]
    for _, plain_ok, lora_ok, unmerged_ok, (local_rows, full_rows) in results:
        assert local_rows < full_rows  # the parameters really were sharded
        assert plain_ok, "the gathered tensors differ from the unsharded state dict"
        assert lora_ok, "the merged LoRA weights gathered from the shards differ from merging unsharded"
        assert unmerged_ok, "the adapters were not unmerged after the sync"
