"""Finding MLPerf log files under folders and reading their events, in every published format.

Formats (one per round of mlcommons/training_results_v0.5 ... v0.7 and later):
  v0.5  ':::MLPv0.5.0 <benchmark> <seconds> (<file>:<line>) <key>[: <json value>]'
  v0.6  ':::MLL <seconds> <key>: {"value": .., "metadata": {..}}'
  v0.7+ ':::MLLOG {"time_ms": .., "key": .., "value": .., "metadata": {..}}' (some submitters wrote
        "time_s" instead of "time_ms": Alibaba's v0.7 ResNet logs)
v0.6 lines go through mlperf_logging.compliance_checker.mlp_parser's per-line function (what the
official checkers use); v0.7+ lines are read with json here so "time_s" logs are not lost; the v0.5
grammar is parsed here (mlperf-logging has no v0.5 parser). Per line, a bad line becomes a reported
problem and the rest of the file is still read; a file that is not a regular file (a FIFO, a socket,
a device) or cannot be read is a Problem, never a hang or a silent omission.
"""

import collections
import json
import os
import re
import stat

from mlperf_logging.compliance_checker.mlp_parser import ruleset_060

from mlperf_keras.reporting.records import Problem

MLLOG_TOKEN = ":::MLLOG"          # v0.7+ JSON lines (what mlperf_logging.mllog writes)
MLL_V06_TOKEN = ":::MLL "          # v0.6 lines: ':::MLL <seconds> <key>: <json>'
MLP_V05_TOKEN = ":::MLPv0.5.0"     # v0.5 lines: ':::MLPv0.5.0 <benchmark> <seconds> (<file>:<line>) <key>[: <value>]'
_V05_LINE = re.compile(r":::MLPv0\.5\.0\s+(?P<benchmark>\S+)\s+(?P<seconds>[0-9.]+)\s+\((?P<where>[^)]*)\)\s+"
                       r"(?P<key>[A-Za-z0-9_]+)(?:\s*:\s*(?P<value>.*))?$")

# Files that are never logs; skipping them avoids reading checkpoints and datasets byte by byte.
_NEVER_LOGS = (".h5", ".keras", ".npz", ".npy", ".pb", ".index", ".png", ".jpg", ".jpeg", ".svg",
               ".tfrecord", ".gz", ".zip", ".tar", ".pkl", ".pdf", ".parquet", ".pt", ".whl")
_NEVER_LOG_PARTS = (".data-", ".ckpt", ".tfrecord")

Event = collections.namedtuple("Event", ["time_ms", "key", "value", "metadata", "lineno"])


def _might_be_log(path):
    name = os.path.basename(path).lower()
    return not (name.endswith(_NEVER_LOGS) or any(part in name for part in _NEVER_LOG_PARTS))


def find_log_files(folders, exclude=()):
    """Every file under the folders that could hold MLPerf log lines, sorted; folders with none; problems.

    Returns (files, empty_folders, problems). `exclude` folders (the report's own output) are never
    read, so a report written inside a log folder does not read its own result copies back. A path
    that is not a regular file (FIFO, socket, device: opening a FIFO would block forever) or cannot
    be read becomes one Problem each.
    """
    excluded = [os.path.realpath(e) for e in exclude]
    files, empty, problems = [], [], []
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
                if not _might_be_log(path):
                    continue
                try:
                    mode = os.stat(path).st_mode
                except OSError as error:
                    problems.append(Problem(path, f"cannot read: {error.strerror or error}"))
                    continue
                if not stat.S_ISREG(mode):
                    problems.append(Problem(path, "not a regular file (FIFO, socket or device): not read"))
                    continue
                has_token, error = _has_token(path)
                if error is not None:
                    problems.append(Problem(path, f"cannot read: {error}"))
                elif has_token:
                    found.append(path)
                elif name.lower().endswith(".log"):
                    # Named as a log (ours are <model>_seed<N>_<time>.log): say why it is not used.
                    problems.append(Problem(path, "no MLPerf log line (binary or not an MLPerf log): not read"))
        if not found:
            empty.append(folder)
        files.extend(found)
    return files, empty, problems


def _has_token(path):
    """(has an MLPerf log token, None) or (False, why the file could not be read)."""
    try:
        # O_NONBLOCK: if the file became a FIFO after the stat, opening it still does not block.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                if b":::ML" in chunk:
                    return True, None
    except OSError as error:
        return False, error.strerror or str(error)
    return False, None


def read_events(path):
    """(events, bad_lines, log_format) for one file; times in milliseconds whatever the format.

    bad_lines: [(line number, text, reason)] for log lines that did not parse.
    log_format: "mllog" (v0.7+), "mll_v0.6", "mlp_v0.5" or None (no MLPerf log lines).
    For v0.5 logs every event's metadata also holds "benchmark" (the second field of each line).
    """
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    lines = text.splitlines()
    ends_mid_line = bool(text) and not text.endswith("\n")
    if any(MLLOG_TOKEN in line for line in lines):
        token, to_event, log_format = MLLOG_TOKEN, _mllog_event, "mllog"
    elif any(MLL_V06_TOKEN in line for line in lines):
        token, to_event, log_format = ":::MLL", _mll_v06_event, "mll_v0.6"
    elif any(MLP_V05_TOKEN in line for line in lines):
        token, to_event, log_format = MLP_V05_TOKEN, _mlp_v05_event, "mlp_v0.5"
    else:
        return [], [], None

    events, bad, seen = [], [], set()
    for number, line in enumerate(lines, start=1):
        if token not in line:
            continue
        # Same normalisation as mlp_parser.strip_and_dedup: drop any prefix before the token, and drop a line
        # seen before (some logs print every line twice, once with a logger prefix).
        line = re.sub(".*" + re.escape(token), token, line).strip()
        if line in seen:
            continue
        seen.add(line)
        try:
            events.append(to_event(number, line))
        except Exception as error:  # noqa: BLE001 - any malformed line is reported, not raised
            is_last = number == len(lines)
            reason = "cut off (file ends mid-line)" if (is_last and ends_mid_line) else \
                f"does not parse ({type(error).__name__}: {error})"
            bad.append((number, line[:120], reason))
    return events, bad, log_format


def _mllog_event(number, line):
    record = json.loads(line[len(MLLOG_TOKEN):])
    if "time_ms" in record:
        time_ms = float(record["time_ms"])
    elif "time_s" in record:
        time_ms = float(record["time_s"]) * 1000.0
    else:
        raise ValueError("no time_ms or time_s")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not an object")
    return Event(time_ms, str(record["key"]), record.get("value"), metadata, number)


def _mll_v06_event(number, line):
    parsed = ruleset_060.string_to_logline(number, line)
    value = parsed.value if isinstance(parsed.value, dict) else {"value": parsed.value}
    metadata = value.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not an object")
    # v0.6 timestamps are seconds; everything downstream works in milliseconds.
    return Event(float(parsed.timestamp) * 1000.0, parsed.key, value.get("value"), metadata, number)


def _mlp_v05_event(number, line):
    match = _V05_LINE.match(line)
    if match is None:
        raise ValueError("not ':::MLPv0.5.0 <benchmark> <seconds> (<file>:<line>) <key>[: <value>]'")
    raw = match.group("value")
    value = None
    if raw is not None and raw.strip():
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw.strip()
    metadata = {"benchmark": match.group("benchmark")}
    # v0.5 put the epoch inside the value: eval_accuracy: {"epoch": 3, "value": 0.7}.
    if isinstance(value, dict) and "value" in value:
        if "epoch" in value:
            metadata["epoch_num"] = value["epoch"]
        metadata.update({k: v for k, v in value.items() if k not in ("value", "epoch")})
        value = value["value"]
    return Event(float(match.group("seconds")) * 1000.0, match.group("key"), value, metadata, number)
