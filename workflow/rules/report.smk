# The claims report: verdicts from paired differences over seeds, figures, HTML. It covers every registered
# paper that has results/<id>/metrics.csv, not only the papers of this run (`only` restricts what runs).


rule report:
    input:
        expand("results/{paper}/metrics.csv", paper=PAPERS),
        # the verdict code and the pre-registration lock: editing either re-renders the report
        report_code(),
    output:
        csv="reports/claims.csv",
        md="reports/claims.md",
        html="reports/index.html",
        metrics=expand("reports/metrics/{paper}.json", paper=PAPERS),
    params:
        profile=PROFILE,
        # claim settings (margins, levels, seeds) of every paper: the rows are built from them
        claims=claim_settings(),
    conda:
        "../envs/paperflow.yaml"
    log:
        "logs/report.log",
    shell:
        "python3 -m paperflow.cli report --profile {params.profile} 2>&1 | tee {log}"
