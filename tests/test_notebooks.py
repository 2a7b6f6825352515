"""The notebooks in notebooks/ run headless, unchanged, against a demo lake.

One small demo lake is built per module with `lakehouse demo`, which stops its Postgres
at the end: the notebooks therefore run with the source down, as an operator may find it
(the health notebook must still show the lake side). Each notebook runs in a fresh
kernel of this interpreter with cwd = the demo's work dir and LAKEHOUSE_CONFIG set.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import nbformat
import pytest
import yaml
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from pipelines.embedded_pg import free_port
from tests.support.cli import lakehouse

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = {
    "01_bronze_change_log.ipynb": 1,  # name -> cells tagged "chart"
    "02_silver_current_state.ipynb": 0,
    "03_gold_reports.ipynb": 3,
    "04_pipeline_health.ipynb": 1,
}
KERNEL = "lakehouse-test"
# one worker builds the demo lake (a module fixture) every notebook runs on
pytestmark = pytest.mark.xdist_group("notebooks")
# Portability rules (docs/architecture.md rule 7, and what Sail lacks): none of this in a notebook.
FORBIDDEN = (".rdd", ".cache(", ".persist(", "input_file_name", "_metadata", "sparkContext",
             "readStream", "readChangeFeed")


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK_DIR / name, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_the_notebooks_are_all_here() -> None:
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_committed_notebook_is_valid_and_has_no_outputs(name: str) -> None:
    nb = read(name)
    nbformat.validate(nb)
    for cell in code_cells(nb):
        assert cell.outputs == [], f"{name}: clear the outputs before committing"
        assert cell.execution_count is None, f"{name}: clear the execution counts"
    source = "\n".join(cell.source for cell in code_cells(nb))
    assert not [word for word in FORBIDDEN if word in source]
    assert "get_spark(config)" in code_cells(nb)[0].source, "the first cell gets the session"
    charts = [c for c in code_cells(nb) if "chart" in c.metadata.get("tags", [])]
    assert len(charts) == NOTEBOOKS[name]


@pytest.fixture(scope="module")
def demo_workdir() -> Iterator[Path]:
    """A demo lake (2,000 seed rows, 3 s of workload); its Postgres is stopped afterwards."""
    base = Path(tempfile.mkdtemp(prefix="lakehouse-notebooks-"))
    base.chmod(0o755)  # under root the demo's Postgres runs as an unprivileged user
    workdir = base / "demo"
    try:
        result = lakehouse(None, "demo", "--workdir", str(workdir), "--rows", "2000",
                           "--seconds", "3", "--port", str(free_port()), cwd=REPO,
                           env=project_env(), check=False, timeout=300)
        assert result.returncode == 0, (f"lakehouse demo exited {result.returncode}:\n"
                                        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        yield workdir
    finally:
        shutil.rmtree(base, ignore_errors=True)


def project_env() -> dict[str, str]:
    """This environment with the repository importable. A DSN from the caller's environment
    would override the demo config's and point the notebooks at another database."""
    env = {k: v for k, v in os.environ.items() if k != "LAKEHOUSE_SOURCE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def kernel_env(workdir: Path, engine: str) -> dict[str, str]:
    """The kernel's environment: the demo's config with `engine` (the lake was written on
    Sail: on classic Spark the notebooks also read another engine's tables), charts as
    inline PNG images."""
    config = yaml.safe_load((workdir / "lakehouse.yml").read_text())
    path = workdir / f"lakehouse-{engine}.yml"
    path.write_text(yaml.safe_dump({**config, "engine": engine}))
    return {**project_env(), "LAKEHOUSE_CONFIG": str(path),
            "MPLBACKEND": "module://matplotlib_inline.backend_inline"}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """A kernel spec for this very interpreter (not whatever `python3` kernel is installed)."""
    spec_dir = tmp_path_factory.mktemp("kernels") / KERNEL
    spec_dir.mkdir()
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "lakehouse tests", "language": "python"}))
    return KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs_on_the_demo_lake(name: str, demo_workdir: Path, config_engine: str,
                                        kernel_specs: KernelSpecManager) -> None:
    nb = read(name)
    kernel = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    client = NotebookClient(nb, km=kernel, timeout=180,
                            resources={"metadata": {"path": str(demo_workdir)}})
    try:  # raises CellExecutionError on a failing cell
        client.execute(env=kernel_env(demo_workdir, config_engine))
    finally:  # a client given its kernel leaves it running, with the kernel's engine
        if kernel.has_kernel:
            kernel.shutdown_kernel(now=True)

    for cell in code_cells(nb):
        assert not [o for o in cell.outputs if o.output_type == "error"]
        if "chart" in cell.metadata.get("tags", []):
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
                f"{name}: a chart cell drew no image:\n{cell.source[:200]}"
    if name == "04_pipeline_health.ipynb":
        text = "".join(o.get("text", "") for c in code_cells(nb) for o in c.outputs)
        assert "source not reachable, showing lake-side health only" in text
        assert "backfill public.time_entries: done" in text
