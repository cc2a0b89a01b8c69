# The paper's own compression (or the shared default) applied to each trained model.


rule compress:
    input:
        data="results/{paper}/data/data.pt",
        model="results/{paper}/{variant}/seed{seed}/model.pt",
        run="results/{paper}/{variant}/seed{seed}/run.json",
    output:
        "results/{paper}/{variant}/seed{seed}/compressed.pt",
    params:
        cfg=paper_params,
        torch_threads=lambda wildcards, threads: torch_threads(threads),
    threads: lambda wildcards: job_threads(wildcards.paper)
    log:
        "logs/{paper}/{variant}/seed{seed}/compress.log",
    shell:
        "{PF} stage compress --paper {wildcards.paper} --variant {wildcards.variant} --seed {wildcards.seed} "
        "--profile {PROFILE} --threads {params.torch_threads} 2>&1 | tee {log}"
