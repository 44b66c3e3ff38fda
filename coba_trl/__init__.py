"""coba-trl: CoBA-RL rollout-budget allocation for TRL's GRPOTrainer.

`CoBAConfig` and `CoBAGRPOTrainer` are imported lazily, so `coba_trl.allocation` stays usable without torch or TRL.
"""

__version__ = "0.1.0"

__all__ = ["CoBAConfig", "CoBAGRPOTrainer", "__version__"]


def __getattr__(name: str):
    if name == "CoBAConfig":
        from coba_trl.config import CoBAConfig

        return CoBAConfig
    if name == "CoBAGRPOTrainer":
        from coba_trl.trainer import CoBAGRPOTrainer

        return CoBAGRPOTrainer
    raise AttributeError(f"module 'coba_trl' has no attribute {name!r}")
