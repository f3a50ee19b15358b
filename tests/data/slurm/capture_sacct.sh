#!/bin/sh
# Capture `sacct -D -X --json -j 1` of a job requeued once, then COMPLETED, inside ONE
# container (Debian's slurmctld, slurmd, slurmdbd and MariaDB all on localhost; no network
# needed): the e2e image of a release plus `slurmdbd mariadb-server`, e.g.
#
#   printf 'FROM slurmguard-node:forky\nRUN apt-get update && apt-get install -y \
#     --no-install-recommends slurmdbd mariadb-server\n' | docker build --network host -t sacct-cap -
#   docker run --rm --network none --hostname sgcap -v $PWD/tests/data/slurm:/d \
#     --entrypoint /bin/sh sacct-cap /d/capture_sacct.sh /d
#
# Seen 2026-12-04 on forky: slurmdbd 26.05.5 exits at start against Debian's MariaDB 11.8.9
# ("_check_mysql_concat_is_sane: null result from query `select @var := concat('');`",
# MariaDB error 5027), so no 26.05 sacct capture exists yet (docs/slurm.md).
set -eu
OUT=${1:-/out}
# munge
mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
chmod 400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged
# MariaDB and slurmdbd
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/tmp/mariadb-install.log 2>&1
mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock >/tmp/mariadbd.log 2>&1 &
for _ in $(seq 100); do [ -S /run/mysqld/mysqld.sock ] && break; sleep 0.2; done
mariadb -e "CREATE USER 'slurm'@'localhost' IDENTIFIED BY 'sgcap'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
mkdir -p /var/log/slurm /var/spool/slurmd /var/lib/slurm/slurmctld
cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=sgcap
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
chmod 600 /etc/slurm/slurmdbd.conf
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=sgcap
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
NodeName=n1 NodeHostname=$(hostname -s) CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
slurmdbd
for _ in $(seq 30); do timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.5; done
if ! pidof slurmdbd >/dev/null; then
    echo "capture_sacct: slurmdbd exited; its log:" >&2
    tail -n 5 /var/log/slurm/slurmdbd.log >&2
    exit 1
fi
sacctmgr -i add cluster sgcap >/dev/null
slurmctld
slurmd -N n1
for _ in $(seq 100); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.3; done
sbatch -q normal -N1 --requeue --wrap 'sleep 4' >/dev/null 2>&1 || sbatch -N1 --requeue --wrap 'sleep 4' >/dev/null
for _ in $(seq 100); do squeue -h -j 1 -o %T | grep -q RUNNING && break; sleep 0.3; done
scontrol requeue 1
for _ in $(seq 300); do sacct -n -X -j 1 -o state | grep -q COMPLETED && break; sleep 0.5; done
sleep 2
v=$(scontrol -V | awk '{print $2}')
sacct -D -X --json -j 1 >"$OUT/sacct-requeued-$v.json"
echo "wrote sacct-requeued-$v.json"
