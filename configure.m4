# -*- shell-script -*-
#
# Configure checks for ipmc inside an Open MPI source tree
# (ompi/mca/coll/ipmc/). Read by Open MPI's autogen.pl/configure; the
# standalone build against an installed Open MPI does not use it.

# The Rust core is a static archive that only the component's own link
# consumes. Built as a static component, it would have to reach every
# application's link line too, so ipmc is always a DSO.
# Open MPI 5.0 passes the variable component_compile_mode_tmp and then reads
# the variable that it names (AS_VAR_COPY of its value); 4.1 reads $4 itself.
AC_DEFUN([MCA_ompi_coll_ipmc_COMPILE_MODE], [
    AC_MSG_CHECKING([for MCA component $2:$3 compile mode])
    m4_if([$4], [component_compile_mode_tmp],
          [coll_ipmc_compile_mode="dso"
           $4=coll_ipmc_compile_mode
           AC_MSG_RESULT([$coll_ipmc_compile_mode])],
          [$4="dso"
           AC_MSG_RESULT([$$4])])
])

# MCA_ompi_coll_ipmc_CONFIG([action-if-can-compile],
#                           [action-if-cant-compile])
# ------------------------------------------------
AC_DEFUN([MCA_ompi_coll_ipmc_CONFIG],[
    AC_CONFIG_FILES([ompi/mca/coll/ipmc/Makefile])

    AC_ARG_VAR([CARGO], [Rust's cargo, used to build the ipmc collective component])
    AC_PATH_PROG([CARGO], [cargo], [no], [$PATH$PATH_SEPARATOR$HOME/.cargo/bin])
    coll_ipmc_dir="$srcdir/ompi/mca/coll/ipmc"
    # The Rust that Cargo.toml states (rust-version); an older cargo would
    # fail in make, and take Open MPI's build down with it.
    coll_ipmc_need=`sed -n 's/^rust-version *= *"\(.*\)"/\1/p' "$coll_ipmc_dir/Cargo.toml"`
    coll_ipmc_happy=yes
    # ipmc is always a DSO (above); an Open MPI that loads none
    # (--disable-dlopen; in 4.1 also --disable-mca-dso) would install it and
    # never load it.
    AS_IF([test "$enable_dlopen" = "no"],
          [AC_MSG_WARN([coll:ipmc is always built as a DSO, and this Open MPI cannot load one (--disable-dlopen): the component will not be built])
           coll_ipmc_happy=no],
          [test "$CARGO" = "no"],
          [AC_MSG_WARN([coll:ipmc needs cargo (Rust $coll_ipmc_need or later); the component will not be built])
           coll_ipmc_happy=no],
          [AC_MSG_CHECKING([whether $CARGO is Rust $coll_ipmc_need or later])
           coll_ipmc_have=`"$CARGO" --version 2>/dev/null | cut -d' ' -f2`
           coll_ipmc_need_major=`echo "$coll_ipmc_need" | cut -d. -f1`
           coll_ipmc_need_minor=`echo "$coll_ipmc_need" | cut -d. -f2`
           coll_ipmc_have_major=`echo "$coll_ipmc_have" | cut -d. -f1`
           coll_ipmc_have_minor=`echo "$coll_ipmc_have" | cut -d. -f2`
           AS_IF([test "$coll_ipmc_have_major" -gt "$coll_ipmc_need_major" 2>/dev/null ||
                  { test "$coll_ipmc_have_major" -eq "$coll_ipmc_need_major" 2>/dev/null &&
                    test "$coll_ipmc_have_minor" -ge "$coll_ipmc_need_minor" 2>/dev/null; }],
                 [AC_MSG_RESULT([yes ($coll_ipmc_have)])],
                 [AC_MSG_RESULT([no])
                  AS_IF([test -n "$coll_ipmc_have"],
                        [AC_MSG_WARN([coll:ipmc needs Rust $coll_ipmc_need or later; $CARGO is cargo $coll_ipmc_have: the component will not be built])],
                        [AC_MSG_WARN([coll:ipmc needs Rust $coll_ipmc_need or later; "$CARGO --version" did not run: the component will not be built])])
                  coll_ipmc_happy=no])])

    # Open MPI builds run without network access: the crates must already be
    # in ompi/mca/coll/ipmc/vendor (cargo vendor) or in cargo's cache (cargo
    # fetch, or a cargo build of the component). Only those of the platform
    # that make builds for: without --target, cargo fetch asks for every
    # platform's, which a cache filled by a build does not hold.
    AS_IF([test "$coll_ipmc_happy" = "yes"],
          [AC_MSG_CHECKING([whether the crates of coll:ipmc are available offline])
           coll_ipmc_target=`"$CARGO" -vV 2>/dev/null | sed -n 's/^host: //p'`
           coll_ipmc_fetch_args="fetch --offline --locked${coll_ipmc_target:+ --target $coll_ipmc_target}"
           AS_IF([test -d "$coll_ipmc_dir/vendor"],
                 [coll_ipmc_fetch=`cd "$coll_ipmc_dir" && "$CARGO" $coll_ipmc_fetch_args \
                      --config 'source.crates-io.replace-with="vendored-sources"' \
                      --config 'source.vendored-sources.directory="vendor"' 2>&1`
                  coll_ipmc_fetched=$?],
                 [coll_ipmc_fetch=`cd "$coll_ipmc_dir" && "$CARGO" $coll_ipmc_fetch_args 2>&1`
                  coll_ipmc_fetched=$?])
           AS_IF([test "$coll_ipmc_fetched" -eq 0],
                 [AC_MSG_RESULT([yes])],
                 [AC_MSG_RESULT([no])
                  AC_MSG_WARN([cargo could not find the crates of coll:ipmc offline:])
                  AC_MSG_WARN([$coll_ipmc_fetch])
                  AC_MSG_WARN([run "cargo vendor --locked vendor" in ompi/mca/coll/ipmc first; the component will not be built])
                  coll_ipmc_happy=no])])

    # bindgen (build.rs) loads libclang at build time from where clang-sys
    # looks for it: LIBCLANG_PATH, llvm-config's directory, LD_LIBRARY_PATH,
    # then the system's library directories. Without it make would fail.
    AS_IF([test "$coll_ipmc_happy" = "yes"],
          [AC_CACHE_CHECK([for the libclang that bindgen loads to build coll:ipmc],
               [coll_ipmc_cv_libclang],
               [coll_ipmc_cv_libclang=no
                AS_IF([test -f "$LIBCLANG_PATH"], [coll_ipmc_cv_libclang=$LIBCLANG_PATH])
                coll_ipmc_llvm_libdir=`"${LLVM_CONFIG_PATH:-llvm-config}" --libdir 2>/dev/null`
                for coll_ipmc_d in `echo "$LIBCLANG_PATH:$coll_ipmc_llvm_libdir:$LD_LIBRARY_PATH" | tr ':' ' '` \
                        /usr/local/llvm*/lib* /usr/local/lib*/*/* /usr/local/lib*/* /usr/local/lib* \
                        /usr/lib*/*/* /usr/lib*/* /usr/lib*; do
                    AS_IF([test "$coll_ipmc_cv_libclang" != "no"], [break])
                    for coll_ipmc_f in "$coll_ipmc_d"/libclang.so "$coll_ipmc_d"/libclang-*.so \
                            "$coll_ipmc_d"/libclang.so.* "$coll_ipmc_d"/libclang-*.so.*; do
                        AS_IF([test -f "$coll_ipmc_f"], [coll_ipmc_cv_libclang=$coll_ipmc_f; break])
                    done
                done])
           AS_IF([test "$coll_ipmc_cv_libclang" = "no"],
                 [AC_MSG_WARN([coll:ipmc needs libclang to build (Debian: libclang-dev); set LIBCLANG_PATH to its directory if it is elsewhere: the component will not be built])
                  coll_ipmc_happy=no])])

    # What `rustc --print native-static-libs` lists for a staticlib on Linux.
    coll_ipmc_RUST_LIBS="-lgcc_s -lutil -lrt -lpthread -lm -ldl"
    AC_SUBST([coll_ipmc_RUST_LIBS])

    AS_IF([test "$coll_ipmc_happy" = "yes"], [$1], [$2])
])dnl
