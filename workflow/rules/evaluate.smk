# One metrics table per paper (after its derive(): e.g. Delta-m% against single-task models).


rule collect:
    input:
        paper_metrics,
    output:
        "results/{paper}/metrics.csv",
    params:
        cfg=paper_params,
        seeds=SEEDS,
    log:
        "logs/{paper}/collect.log",
    shell:
        "{PF} stage collect --paper {wildcards.paper} --profile {PROFILE} 2>&1 | tee {log}"
