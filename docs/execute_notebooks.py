"""Write the executed copies of the notebooks that the docs site shows: ``python docs/execute_notebooks.py``.

The repository stores ``notebooks/*.ipynb`` without outputs (pytest runs them with
``--nbmake``); the site shows ``docs/notebooks/*.ipynb``, the same notebooks run here with
their outputs. Executing them at every docs build would take minutes (the training
notebook trains PPO, the LLM notebooks start servers), so they are run by this script
instead, and ``tests/test_docs_build.py`` checks that each copy has its source's code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def execute(source: Path, target: Path, timeout: int = 600) -> None:
    notebook = nbformat.read(source, as_version=4)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(source.parent)}}).execute()
    for cell in notebook.cells:  # links to docs/ files, seen from docs/notebooks/
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("](../docs/", "](../")
    nbformat.write(notebook, target)


def main(names: list[str] | None = None) -> None:
    out = ROOT / "docs" / "notebooks"
    out.mkdir(exist_ok=True)
    for source in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if not names or source.stem in names or source.name in names:
            execute(source, out / source.name)
            print(f"wrote {out / source.name}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
