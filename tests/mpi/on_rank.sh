#!/bin/sh
# on_rank.sh RANK NAME=VALUE PROGRAM [ARGS...]
# Runs PROGRAM with the environment variable NAME=VALUE on MPI_COMM_WORLD
# rank RANK only (mpirun sets OMPI_COMM_WORLD_RANK), so that one rank of a
# job can see a different MCA parameter than the others.
rank=$1
setting=$2
shift 2
if [ "$OMPI_COMM_WORLD_RANK" = "$rank" ]; then
    export "$setting"
fi
exec "$@"
