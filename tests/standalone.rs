//! `standalone.mk` where Open MPI cannot build a component: no wrapper
//! compiler, or one whose Open MPI has no internal headers (a runtime
//! package alone, a source build without `--with-devel-headers`). The build
//! stops before compiling anything, with a message that says what to
//! install, rather than with the C compiler's missing `ompi_config.h`.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{repo, run_captured, Run};

/// A directory of its own under the target directory, empty.
fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target/standalone-tests").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// `make -f standalone.mk` with `MPICC` set, building into `dir`.
fn make_with(mpicc: &str, dir: &Path) -> Run {
    run_captured(
        Command::new("make")
            .args(["-s", "-f", "standalone.mk"])
            .arg(format!("MPICC={mpicc}"))
            .arg(format!("BUILD={}", dir.join("build").display()))
            .current_dir(repo()),
    )
}

/// The build failed with `message` before compiling anything: the C
/// compiler never ran, and the build directory holds no glue object and no
/// stamp of the Open MPI it was built against.
fn stopped_before_compiling(run: &Run, dir: &Path, message: &str) {
    assert!(!run.ok, "the build succeeded:\n{}", run.output);
    assert!(
        run.output.contains(message),
        "no {message:?} in:\n{}",
        run.output
    );
    assert!(
        !run.output.contains("ompi_config.h: No such file"),
        "the C compiler ran:\n{}",
        run.output
    );
    let objects = fs::read_dir(dir.join("build"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(objects, 0, "the build wrote files into {}", dir.display());
}

#[test]
fn without_a_wrapper_compiler_the_build_says_what_to_install() {
    let dir = scratch("no-mpicc");
    let missing = dir.join("bin/mpicc");
    let run = make_with(missing.to_str().unwrap(), &dir);
    stopped_before_compiling(
        &run,
        &dir,
        &format!(
            "standalone.mk: no Open MPI wrapper compiler '{}': install Open MPI with its development files (libopenmpi-dev on Debian)",
            missing.display()
        ),
    );
    // Nothing else on the way: the shell's or make's own "not found".
    assert_eq!(
        run.output
            .lines()
            .filter(|l| l.contains("not found") || l.contains("No such file"))
            .count(),
        0,
        "{}",
        run.output
    );
}

#[test]
fn an_open_mpi_without_internal_headers_is_named_with_what_to_install() {
    let dir = scratch("no-headers");
    // An Open MPI whose public headers alone are installed: mpi.h, no
    // ompi_config.h.
    let include = dir.join("include");
    fs::create_dir_all(&include).unwrap();
    fs::write(include.join("mpi.h"), "/* public header only */\n").unwrap();
    let mpicc = dir.join("mpicc");
    fs::write(
        &mpicc,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n\
             --showme:compile) echo \"-I{}\" ;;\n\
             --showme:libdirs) echo \"{}\" ;;\n\
             --showme:version) echo \"mpicc: Open MPI 4.1.9 (Language: C)\" ;;\n\
             *) exit 1 ;;\nesac\n",
            include.display(),
            dir.join("lib").display()
        ),
    )
    .unwrap();
    fs::set_permissions(&mpicc, fs::Permissions::from_mode(0o755)).unwrap();
    let run = make_with(mpicc.to_str().unwrap(), &dir);
    stopped_before_compiling(
        &run,
        &dir,
        &format!(
            "standalone.mk: the Open MPI of {} (mpicc: Open MPI 4.1.9 (Language: C)) has no internal headers where it looks (-I{}); a component is built against them: libopenmpi-dev on Debian, --with-devel-headers for a source build",
            mpicc.display(),
            include.display()
        ),
    );
}
