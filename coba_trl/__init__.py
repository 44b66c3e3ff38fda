"""coba-trl: CoBA-RL rollout-budget allocation for TRL's GRPOTrainer."""

__version__ = "0.1.0"
