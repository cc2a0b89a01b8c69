"""The service scripts never destroy what they did not make (issue 26): local_slurm.sh refuses a site's slurm.conf
and stops only the daemons it started; local_postgres.sh keeps the tracking data unless asked to purge it."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from conftest import ROOT

SLURM = ["bash", str(ROOT / "scripts" / "local_slurm.sh")]


def test_slurm_start_refuses_a_config_it_did_not_write(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=site\n# a site's own SLURM\n")
    proc = subprocess.run(SLURM + ["start"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PAPERFLOW_SLURM_CONF_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    assert conf.read_text() == "ClusterName=site\n# a site's own SLURM\n"


def test_slurm_stop_ends_only_the_daemons_it_started(tmp_path):
    fake = tmp_path / "slurmd"  # a process named like the daemon that this script did not start
    shutil.copy(shutil.which("sleep"), fake)
    other = subprocess.Popen([str(fake), "60"])
    mine = subprocess.Popen([str(fake), "60"])
    try:
        time.sleep(0.2)
        pids = tmp_path / "pids"
        pids.write_text(f"slurmd {mine.pid}\nslurmctld {other.pid}\n")  # a recorded pid whose name no longer matches
        subprocess.run(SLURM + ["stop"], check=True, timeout=60, env={**os.environ, "PAPERFLOW_SLURM_PIDS": str(pids)})
        assert mine.wait(timeout=10) != 0  # the recorded slurmd was ended
        time.sleep(0.2)
        assert other.poll() is None, "a process the script did not start was killed"
        assert not pids.exists()
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
def test_postgres_stop_keeps_the_tracking_data():
    if shutil.which("pg_createcluster") is None and os.geteuid() != 0 and shutil.which("sudo") is None:
        pytest.skip("no PostgreSQL here and no root/sudo to install Debian postgresql")
    script = ["bash", str(ROOT / "scripts" / "local_postgres.sh")]
    store = subprocess.run(script + ["start"], capture_output=True, text=True, timeout=600, check=True).stdout.split()[-1]
    import psycopg2

    with psycopg2.connect(store) as conn, conn.cursor() as cur:
        cur.execute("create table if not exists keepme (x int); delete from keepme; insert into keepme values (7)")
    subprocess.run(script + ["stop"], check=True, timeout=300)
    store = subprocess.run(script + ["start"], capture_output=True, text=True, timeout=600, check=True).stdout.split()[-1]
    with psycopg2.connect(store) as conn, conn.cursor() as cur:
        cur.execute("select x from keepme")
        assert cur.fetchall() == [(7,)], "stop dropped the tracking data"
        cur.execute("drop table keepme")
