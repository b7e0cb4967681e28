"""mlperf_keras: the MLPerf Training workloads in Keras 3, from raw data to MLPerf result files."""

__version__ = "0.1.0"
