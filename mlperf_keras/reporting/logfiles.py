"""Finding MLLOG files under folders and reading their events with mlperf-logging's own parser.

The line parser is mlperf_logging.compliance_checker.mlp_parser (the one the official checkers use).
We call its per-line function rather than its parse_file because parse_file only survives
ValueError: a truncated line or a line without "time_ms" raises KeyError/TypeError there and would
abort the whole report. Per line, a bad line becomes a reported problem and the rest of the file
is still read.
"""

import collections
import os
import re

from mlperf_logging.compliance_checker.mlp_parser import ruleset_060, ruleset_070

MLLOG_TOKEN = ":::MLLOG"          # v0.7+ JSON lines (what mlperf_logging.mllog writes)
MLL_V06_TOKEN = ":::MLL "          # v0.6 lines: ':::MLL <seconds> <key>: <json>'
MLP_V05_TOKEN = ":::MLPv0.5.0"     # v0.5 lines: a different grammar, not supported

# Files that are never logs; skipping them avoids reading checkpoints and datasets byte by byte.
_NEVER_LOGS = (".h5", ".keras", ".npz", ".npy", ".pb", ".index", ".png", ".jpg", ".jpeg", ".svg",
               ".tfrecord", ".gz", ".zip", ".tar", ".pkl", ".pdf", ".parquet", ".pt", ".whl")
_NEVER_LOG_PARTS = (".data-", ".ckpt", ".tfrecord")

Event = collections.namedtuple("Event", ["time_ms", "key", "value", "metadata", "lineno"])


def _might_be_log(path):
    name = os.path.basename(path).lower()
    return not (name.endswith(_NEVER_LOGS) or any(part in name for part in _NEVER_LOG_PARTS))


def find_log_files(folders, exclude=()):
    """Every file under the folders that could hold MLLOG lines, sorted; plus folders with none.

    Returns (files, empty_folders). `exclude` folders (the report's own output) are never read, so
    a report written inside a log folder does not read its own result copies back.
    """
    excluded = [os.path.realpath(e) for e in exclude]
    files, empty = [], []
    for folder in folders:
        found = []
        for root, dirs, names in os.walk(folder):
            real_root = os.path.realpath(root)
            dirs[:] = sorted(d for d in dirs
                             if os.path.realpath(os.path.join(root, d)) not in excluded)
            if real_root in excluded:
                continue
            for name in sorted(names):
                path = os.path.join(root, name)
                if _might_be_log(path) and _has_token(path):
                    found.append(path)
        if not found:
            empty.append(folder)
        files.extend(found)
    return files, empty


def _has_token(path):
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                if b":::ML" in chunk:
                    return True
    except OSError:
        return False
    return False


def read_events(path):
    """(events, bad_lines, log_format) for one file.

    bad_lines: [(line number, text, reason)] for MLLOG lines that did not parse.
    log_format: "mllog" (v0.7+), "mll_v0.6", "mlp_v0.5" (unsupported) or None (no MLLOG lines).
    """
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    lines = text.splitlines()
    ends_mid_line = bool(text) and not text.endswith("\n")
    if any(MLLOG_TOKEN in line for line in lines):
        token, to_logline, log_format, time_scale = MLLOG_TOKEN, ruleset_070.string_to_logline, "mllog", 1.0
    elif any(MLL_V06_TOKEN in line for line in lines):
        # v0.6 timestamps are seconds; everything downstream works in milliseconds.
        token, to_logline, log_format, time_scale = ":::MLL", ruleset_060.string_to_logline, "mll_v0.6", 1000.0
    elif any(MLP_V05_TOKEN in line for line in lines):
        return [], [], "mlp_v0.5"
    else:
        return [], [], None

    events, bad = [], []
    for number, line in enumerate(lines, start=1):
        if token not in line:
            continue
        # Same normalisation as mlp_parser.strip_and_dedup: drop any prefix before the token.
        line = re.sub(".*" + re.escape(token), token, line).strip()
        try:
            parsed = to_logline(number, line)
            value = parsed.value if isinstance(parsed.value, dict) else {"value": parsed.value}
            metadata = value.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise ValueError("metadata is not an object")
            events.append(Event(float(parsed.timestamp) * time_scale, parsed.key,
                                value.get("value"), metadata, number))
        except Exception as error:  # noqa: BLE001 - any malformed line is reported, not raised
            is_last = number == len(lines)
            reason = "cut off (file ends mid-line)" if (is_last and ends_mid_line) else \
                f"does not parse ({type(error).__name__}: {error})"
            bad.append((number, line[:120], reason))
    return events, bad, log_format
