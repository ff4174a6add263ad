#!/bin/sh
# killed.sh RANK SECONDS PROGRAM [ARGS...]
# Runs PROGRAM; on MPI_COMM_WORLD rank RANK (mpirun sets
# OMPI_COMM_WORLD_RANK) kills it with SIGKILL after SECONDS, as a node
# failure or the out-of-memory killer would, and exits as it did.
rank=$1
after=$2
shift 2
if [ "$OMPI_COMM_WORLD_RANK" != "$rank" ]; then
    exec "$@"
fi
"$@" &
pid=$!
sleep "$after"
echo "killed.sh: killed rank $rank" >&2
kill -KILL "$pid"
wait "$pid"
