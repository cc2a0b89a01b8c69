# Metrics of the dense model and of every compressed level; then one table per paper.


rule evaluate:
    input:
        data="results/{paper}/data/data.pt",
        model="results/{paper}/{variant}/seed{seed}/model.pt",
        compressed="results/{paper}/{variant}/seed{seed}/compressed.pt",
    output:
        "results/{paper}/{variant}/seed{seed}/metrics.json",
    params:
        cfg=paper_params,
        torch_threads=lambda wildcards, threads: torch_threads(threads),
    threads: lambda wildcards: job_threads(wildcards.paper)
    log:
        "logs/{paper}/{variant}/seed{seed}/evaluate.log",
    shell:
        "{PF} stage evaluate --paper {wildcards.paper} --variant {wildcards.variant} --seed {wildcards.seed} "
        "--profile {PROFILE} --threads {params.torch_threads} 2>&1 | tee {log}"


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
