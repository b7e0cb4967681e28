"""python -m mlperf_keras.report --logs DIR [DIR ...] --out DIR [--baseline SYSTEM] [--round R]

Reads every MLPerf log under the log folders (this package's logs, any other producer's, and the
published results of every round: v0.5 ':::MLPv0.5.0', v0.6 ':::MLL', v0.7+ ':::MLLOG') and writes,
under --out: report.md, tables/*.csv, charts/*.png|svg, and the MLPerf submission layout of this
package's runs (systems/*.json, results/<system>/<benchmark>/result_<i>.txt).

Exit status: 0 when every input was used, 1 when some input was skipped (each is named, with its
reason, in the output and in report.md), 2 when nothing was written: no MLPerf log under any --logs folder,
an --out this reporter did not write, or a flag error (one line on stderr each). With --benchmark_results and no
MLPerf log, only the benchmark scaling table is written (1).
Pure Python: importing this must never import TensorFlow or Keras.
"""

import sys

from absl import flags

from mlperf_keras import entry
from mlperf_keras.reporting.build import NothingToReport, build_report, summarize_problems
from mlperf_keras.reporting.submission import OutputNotOurs

FLAGS = flags.FLAGS


def define_flags():
    """Only when run as a program, so importing this module never clashes with another entry point's flags."""
    flags.DEFINE_multi_string("logs", None, "Folder(s) to read MLLOG files from, recursively. "
                              "Several may follow one --logs (--logs A B) or --logs may repeat.")
    flags.DEFINE_string("out", None, "Folder for the report and the submission layout.")
    flags.DEFINE_string("baseline", None, "System to compute speedups against: a platform (r740_t4), "
                        "a GPU type (\"NVIDIA T4\") or a system name without the count.")
    flags.DEFINE_string("round", None, "Round (0.6, 0.7, ...) of published logs whose round neither their format nor a "
                        "vX.Y folder in their path (training_results_v0.7) tells: picks their scoring rules and "
                        "the compliance ruleset they are checked at.")
    flags.DEFINE_bool("overwrite", False, "Replace a results/ folder under --out that this reporter did not write.")
    flags.DEFINE_bool("compliance", True, "Run the official compliance checker on every log.")
    flags.DEFINE_bool("charts", True, "Draw the charts (--nocharts: tables only, faster).")
    flags.DEFINE_multi_string("benchmark_results", [], "JSON-lines files of python -m mlperf_keras.benchmark results "
                              "(e.g. benchmarks/gpu_suite.sh's results.jsonl): adds a weak-scaling table and chart.")
    flags.DEFINE_multi_string("estimate", [], "JSON files of python -m mlperf_keras.estimate: listed in report.md "
                              "beside the measured and published scores of the same benchmark, marked as estimates.")
    flags.mark_flag_as_required("out")


EXIT_OK, EXIT_SKIPPED, EXIT_FAILED = 0, 1, 2
MAX_PRINTED_RESULTS = 40


def main(argv):
    # absl leaves "--logs A B C" as --logs=A plus positionals B C: those are log folders too.
    log_dirs = list(FLAGS.logs or []) + list(argv[1:])
    if not log_dirs:
        print("error: give at least one log folder with --logs", file=sys.stderr)
        return EXIT_FAILED
    estimates = []
    if FLAGS.estimate:
        from mlperf_keras.reporting.convergence import EstimateError
        from mlperf_keras.reporting.estimate import read_estimates

        try:
            estimates = read_estimates(FLAGS.estimate)
        except EstimateError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_FAILED
    try:
        report = build_report(log_dirs, FLAGS.out, baseline=FLAGS.baseline, overwrite=FLAGS.overwrite,
                              check_compliance=FLAGS.compliance, draw_charts=FLAGS.charts,
                              default_round=FLAGS.round)
    except NothingToReport as error:
        if not FLAGS.benchmark_results:
            print(f"error: {error}; nothing written to {FLAGS.out}", file=sys.stderr)
            return EXIT_FAILED
        # The benchmark results alone still make their scaling table.
        print(f"warning: {error}; only the benchmark scaling table is written", file=sys.stderr)
        _write_benchmark_scaling()
        return EXIT_SKIPPED
    except OutputNotOurs as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED

    print(f"{len(report.records)} runs, {len(report.results)} results; report: {report.report_path}")
    if estimates:
        from mlperf_keras.reporting.estimate import estimates_markdown

        with open(report.report_path, "a") as handle:
            handle.write(estimates_markdown(estimates, report.results))
        for estimate in estimates:
            minutes = estimate.get("minutes")
            text = f"{minutes['median']:.2f} min" if minutes else "unknown"
            print(f"  {estimate['model']:12s} {'ESTIMATE ' + str(estimate.get('gpus') or '?') + ' GPUs':40s} "
                  f"{text:>12s}  estimate, not measured")
    if FLAGS.benchmark_results:
        _write_benchmark_scaling()
    for result in report.results[:MAX_PRINTED_RESULTS]:
        score = f"{result.score_min:.2f} min" if result.score_min is not None else "no score"
        print(f"  {result.benchmark:12s} {result.system:40s} {score:>12s}  {result.status}")
    if len(report.results) > MAX_PRINTED_RESULTS:
        print(f"  ... {len(report.results) - MAX_PRINTED_RESULTS} more in {FLAGS.out}/tables/scores.csv")
    for note in report.speedup_notes:
        print(f"warning: {note}", file=sys.stderr)
    # One line per kind of problem (count and an example); each one is in tables/problems.csv.
    for kind in summarize_problems(report.problems):
        print(kind, file=sys.stderr)
    return EXIT_SKIPPED if report.skipped else EXIT_OK


def _write_benchmark_scaling():
    from mlperf_keras.reporting import benchmark_scaling

    scaling = benchmark_scaling.write(FLAGS.benchmark_results, FLAGS.out, draw_chart=FLAGS.charts)
    print(f"benchmark scaling ({len(scaling)} rows): {FLAGS.out}/tables/benchmark_scaling.csv")


def run():
    """Console-script entry point (setup.py)."""
    define_flags()
    entry.run(main, takes_arguments=True)


if __name__ == "__main__":
    run()
