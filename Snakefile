# paperflow: data prep -> training of method and baselines over seeds -> compression ->
# evaluation of dense and compressed models -> claims report, for every registered paper.
#   snakemake --cores 8 all                          default profile
#   snakemake --cores 8 all --config profile=smoke   CI-sized
#   snakemake --cores 8 all --config only=[owl]      one paper
from snakemake.utils import min_version

min_version("9.0")


configfile: "params.yaml"


# params.yaml (with --config overrides) is validated against workflow/schemas/params.schema.yaml and every
# paper's Config in common.smk, before any job: one message that names the fix (Snakemake's own validate()
# printed the whole schema, ~1000 lines, for a one-letter typo).


include: "workflow/rules/common.smk"


wildcard_constraints:
    paper="|".join(PAPERS) or "NO_PAPER",
    variant="[A-Za-z0-9_]+",
    seed=r"\d+",


include: "workflow/rules/resources.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


onstart:
    record_lock_owner()
    write_resolved_params()
    init_tracking()


onsuccess:
    stop_tracking()
    release_lock_owner()


onerror:
    stop_tracking()
    release_lock_owner()


rule all:
    input:
        "reports/index.html",
        "reports/claims.md",
        "reports/claims.csv",
        # every job's artifacts: a hole under results/ (an interrupted --forcerun) is rebuilt, not hidden by
        # up-to-date downstream files (Snakemake does not rebuild a missing input of a job that need not run)
        all_job_outputs(),
    default_target: True
