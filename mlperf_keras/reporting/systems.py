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


def is_cpu_family(family) -> bool:
    """A family (describe_system's last item) of CPU-only runs: "cpu" or "<platform> (cpu)"."""
    name = str(family).lower()
    return name == "cpu" or name.endswith("(cpu)")


def device_words(families) -> tuple[str, str]:
    """How titles name the devices and their count: CPU-only reports count workers, any GPU run makes it GPUs."""
    families = [f for f in families if f is not None and not (isinstance(f, float) and f != f)]
    if families and all(is_cpu_family(f) for f in families):
        return "CPU", "worker"
    return "GPU", "GPU"


def bar_label(family, device_count):
    """How a system appears in a chart legend: 'r740_t4 (NVIDIA T4) x2'."""
    return f"{family} x{device_count}" if device_count is not None else family


# --- Systems identified by where their logs live (the MLPerf submission layout) -------------------------

import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from typing import Optional  # noqa: E402

_RESULT_FILE = re.compile(r"^result_\d+\.txt$")


@dataclasses.dataclass
class Layout:
    """A system known from its folder: `<root>/results/<system>/[<benchmark>/]result_N.txt`."""
    folder: str                          # the results/<system> folder: runs of different folders never pool
    system: str                          # unique, filesystem-safe name: "<submitter folder>_<system folder>"
    family: str                          # what speedups compare: the same name
    submitter: Optional[str] = None
    accelerator_model: Optional[str] = None
    accelerator_count: Optional[int] = None   # accelerators_per_node x number_of_nodes
    framework: Optional[str] = None
    description_file: Optional[str] = None
    identified_by: str = ""


class SystemRegistry:
    """One per report: the folder -> Layout map, so every run of one folder gets the same system and
    two folders never get the same name (a second "NVIDIA/dgx1" from another log folder becomes "_2")."""

    def __init__(self):
        self._by_folder = {}
        self._names = set()

    def identify(self, path):
        """The Layout for a log in a submission layout, else None (identify by logged platform)."""
        parts = os.path.abspath(path).split(os.sep)
        if not _RESULT_FILE.match(parts[-1]) or "results" not in parts[:-2]:
            return None
        index = len(parts) - 1 - parts[::-1].index("results")   # the last "results" component
        if index + 2 > len(parts) - 1 or len(parts) - index - 1 > 3:
            return None                  # not results/<system>/<file> or results/<system>/<benchmark>/<file>
        folder = os.sep.join(parts[:index + 2])
        if folder in self._by_folder:
            return self._by_folder[folder]
        root, system_folder = os.sep.join(parts[:index]), parts[index + 1]
        layout = _read_layout(root, system_folder, folder)
        name = layout.system
        suffix = 2
        while name in self._names:
            name = f"{layout.system}_{suffix}"
            suffix += 1
        layout.system = layout.family = name
        self._names.add(name)
        self._by_folder[folder] = layout
        return layout


def _read_layout(root, system_folder, folder):
    submitter_folder = os.path.basename(root) or "unknown"
    label = f"{submitter_folder}/{system_folder}"
    layout = Layout(folder=folder, system=safe_name(f"{submitter_folder}_{system_folder}"), family="")
    candidates = [os.path.join(root, "systems", f"{system_folder}.json"),   # v0.6 and later
                  os.path.join(folder, "entry.json")]                       # v0.5
    for candidate in candidates:
        description = _read_json(candidate)
        if description is None and os.path.isfile(candidate):
            description = _read_entry_text(candidate)
        if isinstance(description, dict):
            _fill_from_description(layout, description)
            layout.description_file = candidate
            layout.identified_by = f"folder {label}, {os.path.relpath(candidate, os.path.dirname(root))}"
            break
    else:
        layout.identified_by = f"folder {label} (no systems JSON found: GPU count unknown)"
    submission = _read_json(os.path.join(root, "submission.json"))   # v0.5: {"org": "Google", ..}
    if isinstance(submission, dict) and submission.get("org"):
        layout.submitter = layout.submitter or str(submission["org"])
        # v0.5: <org>/<entry>/results/<system>; NVIDIA's entry is "submission", Google's name the entry
        # ("resnet-tpuv2-8") over a system folder that is always "tpu".
        entry = os.path.basename(root)
        # v0.6 entries with a v0.5-style submission.json sit in the org folder itself (Fujitsu/, Alibaba/).
        plain = entry.lower() == "submission" or \
            safe_name(entry).lower() == safe_name(submission["org"]).split("_")[0].lower()
        layout.system = safe_name(f"{submission['org']}_{system_folder}" if plain
                                  else f"{submission['org']}_{entry}_{system_folder}")
    return layout


def _read_entry_text(path):
    """NVIDIA's v0.6 systems files are a logged `entry: {"value": "{'nodes': \"{'num_nodes': '1', ..}\"}"}` line,
    not JSON: read the v0.5-style node fields out of the text."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = {}
    for name in ("num_nodes", "num_accelerators", "accelerator", "framework"):
        match = re.search(r"'" + name + r"':\s*'([^']*)'", text)
        if match:
            fields[name] = match.group(1)
    if "num_nodes" not in fields or "num_accelerators" not in fields:
        return None
    return {"framework": fields.get("framework"), "nodes": [fields]}


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _field(description, *names):
    """A systems-JSON field under any of its published spellings ("number_of_nodes", "number of nodes")."""
    normalized = {re.sub(r"[\s_-]+", "_", str(k).strip().lower()): v for k, v in description.items()}
    for name in names:
        value = normalized.get(name)
        if value not in (None, ""):
            return value
    return None


def _as_count(value):
    try:
        return int(float(str(value).strip()))
    except (TypeError, ValueError):
        return None


def _fill_from_description(layout, description):
    layout.submitter = _field(description, "submitter")
    layout.framework = _field(description, "framework")
    nodes = description.get("nodes")
    if isinstance(nodes, list) and nodes and all(isinstance(n, dict) for n in nodes):
        # v0.5 entry.json: [{"num_nodes": 1, "accelerator": "Tesla V100-SXM2-16GB", "num_accelerators": 8}, ...]
        counts = [(_as_count(n.get("num_nodes")), _as_count(n.get("num_accelerators"))) for n in nodes]
        models = {str(n.get("accelerator")) for n in nodes if n.get("accelerator")}
        layout.accelerator_model = ", ".join(sorted(models)) or None
        if all(a is not None and b is not None for a, b in counts):
            layout.accelerator_count = sum(a * b for a, b in counts)
            if layout.accelerator_count == 0:   # CPU-only (Intel's v0.5 entries): count nodes
                layout.accelerator_model, layout.accelerator_count = "cpu", sum(a for a, _ in counts)
        return
    layout.accelerator_model = _field(description, "accelerator_model_name")
    per_node = _as_count(_field(description, "accelerators_per_node"))
    node_count = _as_count(_field(description, "number_of_nodes"))
    if per_node is not None and node_count is not None:
        layout.accelerator_count = per_node * node_count
        if per_node == 0:
            # CPU-only systems (Intel's v0.7 entries): count nodes, as this package counts CPU workers.
            layout.accelerator_model, layout.accelerator_count = "cpu", node_count
    if layout.accelerator_model is not None and str(layout.accelerator_model).strip().lower() in ("n/a", "none", ""):
        layout.accelerator_model = "cpu"


def platform_spelling_key(platform):
    """What two spellings of one platform share: "1xDSS8440" and "DSS8440" -> "dss8440",
    "16xNVIDIA DGX-2H" and "16xNVIDIA DGX2-H" -> "16xnvidiadgx2h" (a count other than 1 is part of the name)."""
    text = re.sub(r"^1\s*x\s*", "", str(platform).strip().lower())
    return re.sub(r"[^a-z0-9]+", "", text)


def identity_notes(records):
    """Lines for the report: platform strings several systems logged, and spelling variants of one platform.

    Neither merges anything: runs stay in their folder's system; these lines only say what the logs show.
    """
    by_platform, by_key = {}, {}
    for record in records:
        if record.platform:
            by_platform.setdefault(record.platform, set()).add(record.system)
            by_key.setdefault(platform_spelling_key(record.platform), set()).add(record.platform)
    notes = []
    for platform, systems in sorted(by_platform.items()):
        if len(systems) > 1:
            shown = sorted(systems)
            notes.append(f"submission_platform {platform!r} is logged by {len(shown)} different systems, kept "
                         f"apart: {', '.join(shown[:6])}{' ...' if len(shown) > 6 else ''}")
    for key, spellings in sorted(by_key.items()):
        if len(spellings) > 1:
            notes.append(f"spelling variants of one platform name (not merged): {', '.join(sorted(spellings))}")
    return notes
