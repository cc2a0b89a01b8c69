# One dataset artifact per paper, shared by its variants and seeds.


rule prepare:
    input:
        resources=paper_resources,
        code=paper_code,
    output:
        "results/{paper}/data/data.pt",
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
        "logs/{paper}/prepare.benchmark.tsv"
    log:
        main="logs/{paper}/prepare.log",
        usage="logs/{paper}/prepare.usage.json",
    shell:
        "python3 -m paperflow.job --usage {log.usage} stage prepare --paper {wildcards.paper} --profile {params.profile} "
        "--job-threads {threads} 2>&1 | tee {log.main}"
