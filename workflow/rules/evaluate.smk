# One metrics table per paper (after its derive(): e.g. Delta-m% against single-task models).


rule collect:
    input:
        paper_metrics,
    output:
        "results/{paper}/metrics.csv",
    params:
        profile=PROFILE,
        cfg=paper_params,
        seeds=lambda wildcards: paper_seeds(wildcards.paper),
    conda:
        "../envs/paperflow.yaml"
    benchmark:
        "logs/{paper}/collect.benchmark.tsv"
    log:
        main="logs/{paper}/collect.log",
        usage="logs/{paper}/collect.usage.json",
    shell:
        "python3 -m paperflow.job --usage {log.usage} stage collect --paper {wildcards.paper} --profile {params.profile} 2>&1 | tee {log.main}"
