"""`python -m data_prep.<dataset> --help` shows the flags every command shares (absl hides another module's flags)."""
import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("module", ["data_prep.movielens", "data_prep.coco"])
def test_help_lists_the_shared_flags(module):
    proc = run_cli(module, "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]  # asked-for help is no failure (mlperf_keras/entry.py)
    assert "Traceback" not in proc.stderr
    for flag in ("--raw_dir:", "--output_dir:", "--[no]overwrite:", "--[no]allow_subset:"):
        assert flag in proc.stdout, f"{module} --help does not list {flag}"
