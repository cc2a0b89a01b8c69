# Method and baselines over seeds; each job opens the (variant, seed) parent run in MLflow.


rule train:
    input:
        "results/{paper}/data/data.pt",
    output:
        model="results/{paper}/{variant}/seed{seed}/model.pt",
        curves="results/{paper}/{variant}/seed{seed}/curves.json",
        run="results/{paper}/{variant}/seed{seed}/run.json",
    params:
        cfg=paper_params,
        torch_threads=lambda wildcards, threads: torch_threads(threads),
    threads: lambda wildcards: job_threads(wildcards.paper)
    log:
        "logs/{paper}/{variant}/seed{seed}/train.log",
    shell:
        "{PF} stage train --paper {wildcards.paper} --variant {wildcards.variant} --seed {wildcards.seed} "
        "--profile {PROFILE} --threads {params.torch_threads} 2>&1 | tee {log}"
