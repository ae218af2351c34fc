"""Row-level changes: DELETE, UPDATE and MERGE (placeholder docstring, completed below)."""
