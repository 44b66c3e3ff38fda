"""The GPU check: one command on a CUDA machine checks coba-trl there and measures it against GRPOTrainer
(docs/gpu.md).

    bash benchmarks/gpu_check.sh OUT

`run.sh` (behind that command) installs what the machine lacks from the wheels `wheels.sh` downloads
(`requirements.txt`), then runs `check.py`, which runs the sections in turn: correctness and LoRA (`sections.py`),
FSDP (`fsdp.py`, launched in processes of its own) and speed (`speed.py`, the arms taking turns through
`turns.py`), all on the trainers of `trainers.py`. `generation_rows.py` prints what each generate call of the speed
arms receives.
"""
