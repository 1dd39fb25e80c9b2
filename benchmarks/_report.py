"""The head every graphopt benchmark's Markdown report starts with (title, command, machine)."""

from __future__ import annotations

from typing import Any


def md_head(title: str, results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    return [
        f"# {title}",
        "",
        f"`{results['command']}`",
        "",
        f"- date: {m['date']}; CPU: {m['cpu_model']} ({m['cores_usable']} usable cores); "
        f"load average at start: {m['load_avg_at_start']}",
    ]
