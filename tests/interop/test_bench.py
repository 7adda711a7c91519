"""The samples benchmark runs from a fresh clone, or says what it needs in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "bench" / "import_samples.py"


# Guards a past bug: with no samples folder where it looks it gave a traceback.
def test_without_samples_it_says_what_to_pass(tmp_path: Path) -> None:
    clone = tmp_path / "clone" / "bench"
    clone.mkdir(parents=True)
    shutil.copy(SCRIPT, clone)
    for args in ([], [str(tmp_path / "nowhere")]):
        result = subprocess.run([sys.executable, str(clone / "import_samples.py"), *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "no interop samples at" in lines[0]
        assert "SAMPLES_DIR" in lines[0]


def test_it_runs_on_a_small_samples_folder(tmp_path: Path, data: Path) -> None:
    samples = tmp_path / "samples"
    (samples / "claude").mkdir(parents=True)
    shutil.copy(data / "claude_tree.jsonl", samples / "claude")
    result = subprocess.run([sys.executable, str(SCRIPT), str(samples)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "re-import: 0 new nodes" in result.stdout
