# One dataset artifact per paper, shared by its variants and seeds.


rule prepare:
    input:
        paper_resources,
    output:
        "results/{paper}/data/data.pt",
    params:
        cfg=paper_params,
        torch_threads=lambda wildcards, threads: torch_threads(threads),
    threads: lambda wildcards: job_threads(wildcards.paper)
    log:
        "logs/{paper}/prepare.log",
    shell:
        "{PF} stage prepare --paper {wildcards.paper} --profile {PROFILE} "
        "--threads {params.torch_threads} 2>&1 | tee {log}"
