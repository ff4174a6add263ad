//! The entry points C calls (`ipmc_rs_*`, declared in `ompi-glue/ipmc_glue.h`)
//! and the panic boundary around them ([`exports`]): the top floor, which
//! hands each call to the component.
#![allow(unsafe_code)]

pub mod exports;
