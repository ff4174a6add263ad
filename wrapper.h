/* What bindgen turns into Rust declarations (see build.rs): the glue boundary only. */
#include "ompi-glue/ipmc_glue.h"
