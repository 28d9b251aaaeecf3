"""The typed events reject mistakes when type-checked: mypy (strict, as a
user's CI would run it) accepts tests/typing/accepted.py and rejects exactly
the lines of tests/typing/rejected.py marked "rejected" (a misspelled event
type, a misspelled field, a field of another type's data, a wrong type)."""

import pathlib
import re
import subprocess
import sys
from typing import List

HERE = pathlib.Path(__file__).resolve().parent


def error_lines(name: str, cache: pathlib.Path) -> List[int]:
    path = HERE / "typing" / name
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(cache), str(path)],
        capture_output=True,
        text=True,
    )
    lines = [int(m.group(1)) for m in re.finditer(rf"^\S*{re.escape(name)}:(\d+): error:", checked.stdout, re.M)]
    assert (checked.returncode == 0) == (not lines), checked.stdout + checked.stderr
    return lines


def test_mypy_accepts_the_typed_events_used_as_their_types_say(tmp_path: pathlib.Path) -> None:
    assert error_lines("accepted.py", tmp_path) == []


def test_mypy_rejects_a_misspelled_event_type_or_field(tmp_path: pathlib.Path) -> None:
    text = (HERE / "typing" / "rejected.py").read_text().splitlines()
    marked = [i + 1 for i, line in enumerate(text) if "# rejected" in line]
    assert len(marked) == 4
    assert error_lines("rejected.py", tmp_path) == marked
