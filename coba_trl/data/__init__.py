"""DAPO-Math-17K for training and the math benchmarks for evaluation, normalised for TRL's GRPOTrainer."""

from coba_trl.data.benchmarks import EVAL_BENCHMARKS, EvalBenchmark, load_eval_benchmark
from coba_trl.data.dapo import DAPO_HUB_ID, detect_schema, load_dapo_math
from coba_trl.data.prompts import apply_instruction, strip_instruction, text_prompt_id

__all__ = [
    "DAPO_HUB_ID",
    "EVAL_BENCHMARKS",
    "EvalBenchmark",
    "apply_instruction",
    "detect_schema",
    "load_dapo_math",
    "load_eval_benchmark",
    "strip_instruction",
    "text_prompt_id",
]
