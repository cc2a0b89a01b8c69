# The claims report: verdicts from paired differences over seeds, figures, HTML.


rule report:
    input:
        expand("results/{paper}/metrics.csv", paper=PAPERS),
    output:
        csv="reports/claims.csv",
        md="reports/claims.md",
        html="reports/index.html",
    params:
        profile=PROFILE,
        papers=PAPERS,
    conda:
        "../envs/paperflow.yaml"
    log:
        "logs/report.log",
    shell:
        "python3 -m paperflow.cli report --profile {params.profile} --papers {params.papers:q} 2>&1 | tee {log}"
