"""One module per MLPerf workload, each implementing workloads.base.Workload."""
