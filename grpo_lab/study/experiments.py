"""The old home of ``compare``, ``paired`` and the statistics, kept only until its last importers (the
command line, notebooks 03, 05 and 06) name the new modules; then delete this file."""

from .compare import DEFAULT_SECONDS, ChildRunFailed, _run, compare, run_one  # noqa: F401
from .histories import (  # noqa: F401
    RUN_METRICS,
    final_accuracy,
    format_seed_table,
    format_tests,
    load_runs,
    run_metrics,
    seed_table,
    tail_mean,
    welch_against_baseline,
)
from .paired import PAIRED_METRICS, UPDATE_FIELDS, format_paired_summary, paired_summary, paired_updates  # noqa: F401
from .stats import holm, mean_and_spread, student_t_two_sided_p, welch_test  # noqa: F401
