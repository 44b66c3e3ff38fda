"""The machine a benchmark ran on, printed at its top so that every figure names its processor and load."""

import os
import platform


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


def machine_line() -> str:
    """CPU model, usable cores, OMP_NUM_THREADS and the 1 / 5 / 15-minute load averages."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return f"CPU {cpu_model()}, {len(os.sched_getaffinity(0))} cores usable, OMP_NUM_THREADS {threads}, load {load}"
