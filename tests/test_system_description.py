"""The host's CPU counts: read from /proc/cpuinfo at run start, logged, and written into the system description."""
from mlperf_keras import system
from mlperf_keras.reporting.records import RunRecord
from mlperf_keras.reporting.submission import system_description


def test_cpu_counts_from_cpuinfo(tmp_path):
    """2 sockets x 2 cores x 2 hardware threads: the threads repeat (physical id, core id)."""
    entries = [(p, socket, core) for p, (socket, core) in
               enumerate([(s, c) for s in (0, 1) for c in (0, 1) for _ in (0, 1)])]
    path = tmp_path / "cpuinfo"
    path.write_text("".join(f"processor\t: {p}\nmodel name\t: Xeon\nphysical id\t: {s}\ncore id\t\t: {c}\n\n"
                            for p, s, c in entries))
    assert system.host_cpu_counts(str(path)) == {"host_processors": 2, "host_cpu_cores": 4, "host_vcpus": 8}
    counts = system.host_cpu_counts(str(tmp_path / "absent"))
    assert counts["host_processors"] is None and counts["host_cpu_cores"] is None and counts["host_vcpus"] >= 1


def test_system_description_fills_the_core_counts_per_processor():
    run = RunRecord(path="x.log", benchmark="ncf", run_start_ms=0, run_stop_ms=1, status="success", converged=True,
                    host_cpu="AMD EPYC 7742 x 256", host_processors=2, host_cpu_cores=128, host_vcpus=256)
    run.system = "2xcpu"
    fields, _ = system_description([run])
    assert fields["host_processor_model_name"] == "AMD EPYC 7742"       # was "AMD EPYC 7742 x 256"
    assert (fields["host_processors_per_node"], fields["host_processor_core_count"],
            fields["host_processor_vcpu_count"]) == ("2", "64", "128")    # were "1", "", ""
