"""Where the tests find shared data: the golden tables beside the repository."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
GOLDEN_ROOT = (REPO_ROOT.parent / "shared" / "testdata" / "delta-golden").resolve()
"""``../shared/testdata/delta-golden`` from the repo root, symlinks resolved (delta-rs resolves them)."""
