"""DataFrame -> GitHub markdown table (pandas' to_markdown needs the optional 'tabulate' package)."""

import pandas as pd


def _cell(value, fmt):
    if value is None or (not isinstance(value, (str, list, dict, tuple)) and pd.isna(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if fmt and isinstance(value, (int, float)):
        return fmt.format(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(frame, formats=None, columns=None):
    """Markdown for `frame`; `formats` maps column -> format string such as '{:,.0f}'."""
    formats = formats or {}
    columns = list(columns or frame.columns)
    if frame.empty:
        return "_(nothing to show)_\n"
    lines = ["| " + " | ".join(str(c) for c in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_cell(_plain(row[c]), formats.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _plain(value):
    # numpy scalars -> Python scalars, so isinstance checks above work.
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value
