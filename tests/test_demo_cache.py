"""A demo's data is generated once per cache folder, and again when its version changes (old caches are not reused)."""
from __future__ import annotations

import dataclasses
import os


def _tiny_ncf_raw(raw_dir):
    from data_prep import demo_movielens

    demo_movielens.write_ratings_csv(os.path.join(raw_dir, "ml-20m", "ratings.csv"), num_users=60, num_items=200,
                                     seed=1)


def test_a_new_demo_version_prepares_beside_the_old_cache_and_reuses_its_own(tmp_path, monkeypatch):
    from data_prep import demos

    cache, lines = str(tmp_path), []
    monkeypatch.setitem(demos.DEMOS, "ncf", dataclasses.replace(demos.DEMOS["ncf"], write_raw=_tiny_ncf_raw))
    first = demos.prepare("ncf", cache, log=lines.append)
    assert first == os.path.join(cache, "ncf", "prepared")
    assert sum("generating" in line for line in lines) == 1

    monkeypatch.setitem(demos.DEMOS, "ncf", dataclasses.replace(demos.DEMOS["ncf"], version=2))
    second = demos.prepare("ncf", cache, log=lines.append)
    assert second == os.path.join(cache, "ncf-v2", "prepared")
    assert sum("generating" in line for line in lines) == 2
    assert os.path.isdir(first)                     # the old version's folder is left alone
    assert demos.prepare("ncf", cache, log=lines.append) == second
    assert sum("generating" in line for line in lines) == 2


def test_the_ssd_demo_data_is_at_version_2():
    """Version 2 drew only 5 classes with larger objects; a cache prepared with version 1's 80 classes stays unused."""
    from data_prep import demos

    assert demos.demo_root("ssd", "/c") == os.path.join("/c", "ssd-v2")
    assert demos.demo_root("resnet", "/c") == os.path.join("/c", "resnet")
