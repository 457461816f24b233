"""Java `.properties` text, as Apollo's `/configfiles/{appId}/{cluster}/{namespace}` renders it.

Apollo writes `java.util.Properties.store(Writer)` output without its leading date comment; keys and values
are escaped the way Java's `saveConvert` does (unicode is kept as is when storing to a Writer).
"""

from __future__ import annotations

from collections.abc import Mapping

_SPECIAL = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _escape(text: str, is_key: bool) -> str:
    out: list[str] = []
    for pos, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if is_key or pos == 0 else " ")
        elif ch in _SPECIAL:
            out.append(_SPECIAL[ch])
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def to_properties(configurations: Mapping[str, str]) -> str:
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in configurations.items())
