"""Which system a run ran on: a filesystem-safe name, the GPU type, and the device count.

The system name is the platform (submission_platform) plus what ran on it: "r740_t4_2xNVIDIA_T4" is
platform r740_t4 with 2 T4s. CPU runs count workers instead of GPUs ("laptop_2xcpu"), so the
scaling tables have an axis for them too. Foreign logs that lack our extra keys fall back to the
platform name alone, with the count unknown.
"""

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text):
    """A name usable as a file or folder name on any OS: letters, digits, '.', '_', '-'."""
    cleaned = _UNSAFE.sub("_", str(text)).strip("._-")
    return cleaned or "unknown"


def is_cpu(accelerator_model, accelerator_count):
    if accelerator_model is not None and str(accelerator_model).strip().lower() == "cpu":
        return True
    return accelerator_count == 0


def describe_system(platform, accelerator_model, accelerator_count, num_workers):
    """(system name, gpu_type label, device_count or None, family) for one run."""
    platform_name = safe_name(platform) if platform else "unknown_platform"
    if is_cpu(accelerator_model, accelerator_count):
        model, count = "cpu", (num_workers or 1)
    else:
        model, count = accelerator_model, accelerator_count
    if not model or count is None:
        # Foreign log: nothing but the platform is known.
        return platform_name, (model or "unknown"), None, platform_name
    model_name = safe_name(model)
    # "cpu" platform with cpu devices -> "2xcpu", not "cpu_2xcpu".
    if platform_name.lower() == model_name.lower():
        system = f"{count}x{model_name}"
        family = model
    else:
        system = f"{platform_name}_{count}x{model_name}"
        family = f"{platform_name} ({model})"
    return system, model, int(count), family


def bar_label(family, device_count):
    """How a system appears in a chart legend: 'r740_t4 (NVIDIA T4) x2'."""
    return f"{family} x{device_count}" if device_count is not None else family
