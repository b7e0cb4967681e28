"""A hardware flagfile applied on a machine with another accelerator is named in a warning line."""
from __future__ import annotations

import glob
import os
import re

import pytest

from mlperf_keras.system import PRESET_ACCELERATORS, preset_mismatch_warning
from tests.conftest import ROOT


def test_every_flagfile_preset_knows_its_accelerator():
    platforms = set()
    for path in glob.glob(os.path.join(ROOT, "flags", "*.flags")):
        (platform,) = re.findall(r"^--platform=(\S+)$", open(path).read(), flags=re.M)
        platforms.add(platform)
        assert os.path.basename(path) == f"{platform}.flags"   # the warning's advice names the file this way
    assert platforms == set(PRESET_ACCELERATORS)


@pytest.mark.parametrize("platform, detected", [
    ("r740_t4", "Tesla T4"), ("r740_v100_pcie", "Tesla V100-PCIE-16GB"), ("a100", "NVIDIA A100-SXM4-80GB"),
    ("h200", "NVIDIA H200"), ("cpu", "cpu"),
    ("my_cluster", "NVIDIA H200"), (None, "Tesla T4"),        # not a preset: nothing to compare against
])
def test_no_warning_when_the_preset_fits_or_is_not_a_preset(platform, detected):
    assert preset_mismatch_warning(platform, detected) is None


def test_a_t4_preset_on_an_h200_names_both_and_the_right_flagfile():
    line = preset_mismatch_warning("r740_t4", "NVIDIA H200")
    assert line.startswith("warning: --platform=r740_t4 is the preset for NVIDIA T4, but this machine has NVIDIA H200")
    assert line.endswith("use --flagfile=flags/h200.flags")


def test_gpu_preset_without_a_gpu_and_cpu_preset_with_one():
    assert "this machine has no GPU" in preset_mismatch_warning("h200", "cpu")
    assert preset_mismatch_warning("h200", "cpu").endswith("flags/cpu.flags")
    assert "flags/a100.flags" in preset_mismatch_warning("cpu", "NVIDIA A100-PCIE-40GB")


def test_an_accelerator_without_a_preset_gets_advice_to_write_one():
    assert "write a flagfile" in preset_mismatch_warning("a100", "NVIDIA L4")
