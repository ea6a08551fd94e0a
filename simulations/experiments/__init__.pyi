"""The names :mod:`simulations.experiments` re-exports (read by type checkers, and by
``lazy_loader`` at run time: each loads on first use)."""

from . import csv as csv
from . import plan as plan
from . import plots as plots
from . import run as run
from . import summary as summary
from .csv import ADDED_FIELDS as ADDED_FIELDS
from .csv import CSV_FIELDS as CSV_FIELDS
from .csv import TIMING_FIELDS as TIMING_FIELDS
from .csv import ExperimentsCSVError as ExperimentsCSVError
from .csv import read_csv as read_csv
from .csv import write_csv as write_csv
from .plan import CATEGORIES as CATEGORIES
from .plan import SURVEY_OPTIONS as SURVEY_OPTIONS
from .plan import ExperimentPlan as ExperimentPlan
from .plan import ExperimentResult as ExperimentResult
from .plan import Log as Log
from .plan import Row as Row
from .plan import category_protocols as category_protocols
from .plan import default_rows as default_rows
from .plan import make_plan as make_plan
from .plots import plot_category as plot_category
from .run import generate as generate
from .run import rebuild_experiments as rebuild_experiments
from .run import run_experiments as run_experiments
from .summary import SURVEY_PROTOCOLS as SURVEY_PROTOCOLS
from .summary import Finding as Finding
from .summary import findings as findings
from .summary import write_summary as write_summary
