"""The offline CPU demo: a tiny Qwen2 model learns graded arithmetic with CoBA-RL (see `run.py`)."""
