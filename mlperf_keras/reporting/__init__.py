"""The reporter: MLLOG files -> runs, MLPerf scores, compliance, comparison tables, charts, submission layout.

Pure Python (pandas, matplotlib, mlperf-logging). Nothing here may import TensorFlow or Keras, directly or
through another mlperf_keras module, so reports can be built on any machine.
"""
