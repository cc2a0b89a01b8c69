# The claims report: verdicts from paired differences over seeds, figures, HTML.


rule report:
    input:
        expand("results/{paper}/metrics.csv", paper=PAPERS),
    output:
        csv="reports/claims.csv",
        md="reports/claims.md",
        html="reports/index.html",
    params:
        papers=PAPERS,
        profile=PROFILE,
    log:
        "logs/report.log",
    shell:
        "{PF} report --profile {PROFILE} --papers {params.papers:q} 2>&1 | tee {log}"
