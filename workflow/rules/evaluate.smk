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
        "logs/{paper}/collect.log",
    shell:
        "python3 -m paperflow.cli stage collect --paper {wildcards.paper} --profile {params.profile} 2>&1 | tee {log}"
