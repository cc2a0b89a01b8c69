# Per (paper, variant, seed): train -> compress -> evaluate, one job (one process) with three tracked
# stages and their own atomic artifacts. One job instead of three saves a start-up per stage, and the job
# server (paperflow/jobserver.py, via `paperflow.job`) saves the ~3 s torch import of each job, which
# dominated small profiles (DESIGN.md, "Jobs"); `paperflow stage train|compress|evaluate` still runs each
# stage on its own.


rule run:
    input:
        data="results/{paper}/data/data.pt",
        code=paper_code,
    output:
        model="results/{paper}/{variant}/seed{seed}/model.pt",
        curves="results/{paper}/{variant}/seed{seed}/curves.json",
        run="results/{paper}/{variant}/seed{seed}/run.json",
        compressed="results/{paper}/{variant}/seed{seed}/compressed.pt",
        metrics="results/{paper}/{variant}/seed{seed}/metrics.json",
    params:
        profile=PROFILE,
        cfg=paper_params,
    threads: lambda wildcards: job_threads(wildcards.paper)
    resources:
        mem_mb=job_mem_mb,
        runtime=job_runtime_min,
    conda:
        "../envs/paperflow.yaml"
    benchmark:
        "logs/{paper}/{variant}/seed{seed}/run.benchmark.tsv"
    log:
        main="logs/{paper}/{variant}/seed{seed}/run.log",
        usage="logs/{paper}/{variant}/seed{seed}/run.usage.json",
    shell:
        "python3 -m paperflow.job --usage {log.usage} stage run --paper {wildcards.paper} --variant {wildcards.variant} --seed {wildcards.seed} "
        "--profile {params.profile} --job-threads {threads} 2>&1 | tee {log.main}"
