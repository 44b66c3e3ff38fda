"""A study unit's starting point: the warm-started tiny model of one warm-start seed and its before-RL record."""

from __future__ import annotations

import json
import os
import time

from studies.paths import warm_start_dir, write_json
from studies.provenance import machine_record
from studies.task import problem_sets, sampled_pass_rates


def prepare_warm_start(protocol: dict, output_dir: str, warm_seed: int, legacy: bool, pilot: bool = False) -> dict:
    """Warm-start the tiny model once per warm-start seed, save it and its before-RL record (reused when there).

    The demo's warm start (`coba_trl.demo.run.run_demo`) with its seed replaced by `warm_seed`: the model's
    initialisation and the order of the warm-start batches. A pilot's record keeps no accuracy; a later study run
    from the same folder measures the saved checkpoint then.
    """
    import torch
    from transformers import Qwen2ForCausalLM

    from coba_trl.demo.accuracy import heldout_accuracy
    from coba_trl.demo.warm_start import warm_start
    from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

    directory = warm_start_dir(output_dir, warm_seed, legacy)
    info_path = os.path.join(directory, "before_rl.json")
    if protocol.get("warm_start_threads"):
        torch.set_num_threads(protocol["warm_start_threads"])
    start, cpu_start = time.perf_counter(), time.process_time()
    train, heldout, sft = problem_sets(protocol)
    tokenizer = build_byte_tokenizer()
    if os.path.exists(os.path.join(directory, "model.safetensors")) and os.path.exists(info_path):
        with open(info_path) as handle:
            info = json.load(handle)
        if pilot or "heldout" in info:
            return info
        model = Qwen2ForCausalLM.from_pretrained(directory)  # a pilot's warm start: measure it now
    else:
        torch.manual_seed(warm_seed)
        model = build_tiny_qwen2(
            tokenizer,
            hidden_size=protocol["hidden_size"],
            num_hidden_layers=protocol["num_layers"],
            max_position_embeddings=128,
            seed=warm_seed,
        )
        warm_start(
            model,
            tokenizer,
            sft,
            steps=protocol["warm_start_steps"],
            learning_rate=protocol["warm_start_learning_rate"],
            seed=warm_seed,
            log_every=0,
        )
        model.save_pretrained(directory)
        info = {"warm_start_seed": warm_seed, "train_levels": [p.level for p in train]}
        info["wall_time_s"] = round(time.perf_counter() - start, 1)
        info["cpu_time_s"] = round(time.process_time() - cpu_start, 1)
        info["machine"] = machine_record()
    if not pilot:
        max_new, samples = protocol["max_completion_length"], protocol["conversion_samples"]
        info["heldout"] = heldout_accuracy(model, tokenizer, heldout, max_new)
        info["heldout_sampled"] = sampled_pass_rates(model, tokenizer, heldout, samples, max_new)
        if protocol.get("conversion", True):
            info["train_pass_rates"] = sampled_pass_rates(model, tokenizer, train, samples, max_new)
            info["train_greedy_correct"] = sampled_pass_rates(model, tokenizer, train, 0, max_new)
    return write_json(info_path, info)
