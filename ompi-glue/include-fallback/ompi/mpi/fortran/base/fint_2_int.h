/*
 * Stands in for Open MPI's own header where an installation lacks it (Debian's
 * libopenmpi-dev 4.1 ships ompi/op/op.h, which includes it, but not the
 * header itself). The build searches here last (-idirafter), so Open MPI's
 * copy wins wherever it exists. Only an inline function of op.h that ipmc never
 * calls uses this macro.
 */
#ifndef IPMC_FALLBACK_FINT_2_INT_H
#define IPMC_FALLBACK_FINT_2_INT_H

#define OMPI_INT_2_FINT(a) ((MPI_Fint) (a))

#endif
