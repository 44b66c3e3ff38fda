"""The machine a benchmark ran on, printed at its top so that every figure names its processor, load and numerics."""

import os
import platform

from coba_trl.numerics import numerics_setting


def cpu_model() -> str:
    """The processor's model name (Linux /proc/cpuinfo, else what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def numerics_line() -> str:
    """The pinned variables as set (`unset` when not) and torch's CPU capability, when torch is loaded."""
    setting = numerics_setting()
    capability = setting.pop("torch_cpu_capability") or "torch not loaded"
    variables = " ".join(f"{name}={value or 'unset'}" for name, value in setting.items())
    return f"numerics {variables}, torch CPU capability {capability}"


def machine_line() -> str:
    """CPU model, usable cores, OMP_NUM_THREADS, the 1 / 5 / 15-minute load averages and the numerics in effect."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return (
        f"CPU {cpu_model()}, {len(os.sched_getaffinity(0))} cores usable, OMP_NUM_THREADS {threads}, load {load}; "
        f"{numerics_line()}"
    )
